# tff_idp: two commands do all the set-up on a fresh machine.
#   make demo   runs the main job (IDP-FedAvg on the embedded federation)
#   make test   runs the test suite
#   make mutation  mutation testing of the privacy code (outside CI; 57 min on 2 cores, measured)
# Both create .venv and install the pinned stack the first time.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Test processes (pytest-xdist); each test file stays in one process, so module fixtures
# are built once. Three on 2 cores: much of the suite waits on the processes it starts
# (command-line runs, TFF workers, signals), and a third process fills those waits.
# TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= 3
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
# Tests marked `bench` (long end-to-end checks whose property a faster test covers) run in
# `make bench`, not here; PYTEST_ARGS='-m ""' runs every test.
TEST_MARKERS ?= not bench

.PHONY: install demo test test-fast bench mutation mutation-report clean

install: $(STAMP)

$(STAMP): requirements.txt requirements-tff.txt setup.cfg
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	# TFF 0.87 pins jax==0.4.14, which the registry no longer serves:
	# install it without its own pins; requirements.txt holds its working set.
	$(PY) -m pip install --quiet --no-deps -r requirements-tff.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -c "import tensorflow_federated, tensorflow_privacy, dp_accounting, tff_idp.execution.runtime; print('tff', tensorflow_federated.__version__)"
	# The TFF workers listen on loopback through a small preload library built with cc.
	$(PY) -c "from tff_idp.execution import listen_address as l; print('loopback library', l.shim_path())"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m experiments.idp_fedavg $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q -ra --durations=25 $(XDIST) -m "$(TEST_MARKERS)" $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not bench" $(PYTEST_ARGS)

bench: $(STAMP)
	# The long end-to-end checks left out of make test (marker `bench`).
	$(PY) -m pytest -q -ra $(XDIST) -m bench
	# The long form of SAMPLE's property tests (200 random settings; make test runs 40).
	TFF_IDP_PROPERTY_EXAMPLES=200 $(PY) -m pytest -q tests/accounting/client/test_sample.py \
	  -k 'random_settings or single_group_is_get_noise'
	$(PY) -m benchmarks.bench_calibration
	$(PY) -m benchmarks.bench_cohort_variation
	$(PY) -m benchmarks.bench_dp_step
	$(PY) -m benchmarks.bench_scf
	$(PY) -m benchmarks.bench_ino_step
	$(PY) -m benchmarks.bench_round_throughput
	$(PY) -m benchmarks.bench_small_model_rounds
	$(PY) -m benchmarks.bench_large_cohorts
	$(PY) -m benchmarks.bench_runner_cohorts
	$(PY) -m benchmarks.bench_runner_rpdp_apes
	$(PY) -m benchmarks.bench_apes_rounds
	$(PY) -m benchmarks.bench_rpdp_cohorts
	$(PY) -m benchmarks.bench_workers
	$(PY) -m benchmarks.bench_flag_errors
	$(PY) -m benchmarks.bench_worker_memory
	$(PY) -m benchmarks.bench_default_hyperparameters
	$(PY) -m benchmarks.bench_run_spec_memory
	$(PY) -m benchmarks.bench_small_silo

# Mutation testing (mutmut 3; setup.cfg [mutmut] lists the modules and their mirrored tests).
# A fresh run each time; the per-module kill rates and the survivors are printed at the end
# and again by `make mutation-report`. MUTATION_WORKERS processes test mutants in parallel.
# SAMPLE's property tests run at MUTATION_PROPERTY_EXAMPLES random settings here (40 in make test).
MUTATION_WORKERS ?= 2
MUTATION_PROPERTY_EXAMPLES ?= 10
MUTATION_STAMP := $(VENV)/.mutation-installed

$(MUTATION_STAMP): requirements-mutation.txt $(STAMP)
	$(PY) -m pip install --quiet -r requirements-mutation.txt
	touch $(MUTATION_STAMP)

mutation: $(MUTATION_STAMP)
	rm -rf mutants
	mkdir -p mutants
	@echo "mutmut run: progress in mutants/run.log"
	TF_CPP_MIN_LOG_LEVEL=2 TFF_IDP_PROPERTY_EXAMPLES=$(MUTATION_PROPERTY_EXAMPLES) \
	  $(PY) tools/mutmut_run.py run --max-children $(MUTATION_WORKERS) \
	  > mutants/run.log 2>&1 || (tail -c 3000 mutants/run.log; exit 1)
	@tail -c 400 mutants/run.log | tr '\r' '\n' | tail -n 3
	$(PY) tools/mutation_report.py

mutation-report: $(MUTATION_STAMP)
	$(PY) tools/mutation_report.py

clean:
	rm -rf $(VENV) runs mutants
