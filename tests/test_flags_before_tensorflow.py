"""Every command line refuses a bad flag in one line, exit 2, before TensorFlow is imported.

Each case runs ``python -m <module> <bad flags>`` in a fresh process forked from
one that has not loaded TensorFlow (``tests/forked_runs.py``, ``before_tensorflow``:
the run reports the TensorFlow modules it loaded, which must be none;
``TFF_IDP_TEST_FORK=0`` runs each case as ``python -X importtime -m …`` instead,
and ``tests/test_forked_runs.py`` checks both give the same on a case). No timing
is asserted: a refusal measured 0.5-0.8 s on 2 cores, against about 10 s with the
import; see ``benchmarks/bench_flag_errors.py``.
"""
import re

import pytest

from tests import forked_runs

# module -> bad flags and the text the one line must contain. Each kind of
# check is covered: absl's own (enum, number), the shared rules, and the
# module's own configuration checks.
CASES = [
    ("experiments.idp_fedavg", ["--runs=10-20-30"], "--runs"),
    ("experiments.idp_fedavg", ["--accountant=foo"], "--accountant"),
    ("experiments.idp_fedavg", ["--rounds=1e9"], "integer"),
    ("experiments.fmnist", ["--runs=10-20-30"], "--runs"),
    ("experiments.cifar10", ["--rounds=0"], "--rounds=0"),
    ("experiments.svhn", ["--delta=2"], "--delta"),
    ("experiments.rpdp", ["--methods=foo"], "--methods"),
    ("experiments.rpdp", ["--distribution=by_class"], "--class_budgets"),
    ("experiments.rpdp", ["--model=foo"], "--model"),
    ("experiments.rpdp", ["--client_execution=in_process", "--workers=localhost:8000"],
     "--client_execution=tff"),
    ("experiments.rpdp", ["--client_execution=tff", "--parallel_clients=2"],
     "--parallel_clients"),
    ("experiments.apes", ["--frameworks=foo"], "--frameworks"),
    ("experiments.apes", ["--keep_fraction=2"], "--keep_fraction"),
    ("experiments.audit", ["--controls=zz"], "--controls"),
    ("experiments.ino_sgd", ["--epsilons=0.1"], "owners"),
    ("experiments.ino_sgd", ["--class_budgets=0-9:1", "--record_distribution=three_levels"],
     "not both"),
    ("experiments.centralized", ["--level_ratios=0.5,0.2,0.1"], "sum to"),
    ("experiments.scf_curves", ["--delta=2"], "--delta"),
    ("tff_idp.idp_fedavg.calibrate", ["--delta=0"], "--delta"),
    # issue 33: a repeated seed counted one run twice (sd 0.00, a t-test with df=1)
    ("experiments.idp_fedavg", ["--seeds=0,0"], "appears more than once"),
    ("experiments.rpdp", ["--seeds=1,1,2"], "appears more than once"),
    ("experiments.audit", ["--seeds=0,0"], "appears more than once"),
    ("experiments.fmnist", ["--seeds=2,2"], "appears more than once"),
    ("experiments.ino_sgd", ["--seeds=3,3"], "appears more than once"),
    ("experiments.centralized", ["--seeds=0,0"], "appears more than once"),
    # issue 33: words that are not flags were ignored
    ("experiments.rpdp", ["rounds=3"], "unexpected argument"),
    ("experiments.idp_fedavg", ["--rounds=3", "extra"], "unexpected argument"),
    ("tff_idp.idp_fedavg.calibrate", ["epsilons=1"], "unexpected argument"),
    # issue 33 item 4: refused only after TensorFlow loaded
    ("experiments.idp_fedavg", ["--dataset=/no/such/split"], "no such split directory"),
    ("experiments.rpdp", ["--dataset=/no/such/split"], "no such split directory"),
    ("experiments.ino_sgd", ["--dataset=/no/such/split"], "no such split directory"),
    ("experiments.idp_fedavg", ["--num_clients=50", "--clients_per_round=60"],
     "clients_per_round"),
    # issue 33 item 3: accepted silently
    ("experiments.idp_fedavg", ["--audit_canaries=5", "--runs=nonprivate"],
     "only non-private"),
    ("experiments.audit", ["--hidden=0"], "--hidden=0"),
    # issue 48: a release holds only what a ledger accounts for; no run without noise,
    # no second training on the same records (rPDP-FL's canary audit)
    ("experiments.rpdp", ["--release_only", "--methods=ours,privacy_free"],
     "drop it from --methods"),
    ("experiments.rpdp", ["--release_only", "--methods=ours", "--audit_canaries=4"],
     "run the audit without --release_only"),
    ("experiments.idp_fedavg", ["--release_only", "--runs=nonprivate,0-0-100"],
     "drop it from --runs"),
    ("experiments.svhn", ["--release_only", "--runs=nonprivate"], "drop it from --runs"),
    # issue 33 item 3: flags of another dataset were ignored silently
    ("experiments.idp_fedavg", ["--partition=iid"], "--partition cannot apply"),
    ("experiments.idp_fedavg", ["--dataset=fmnist", "--alpha=0.3", "--noiid"],
     "--iid, --alpha cannot apply"),
    ("experiments.idp_fedavg", ["--dataset=docs", "--data_dir=x"], "--data_dir cannot apply"),
    ("experiments.cifar10", ["--dataset=docs", "--num_clients=5"],
     "--num_clients cannot apply"),
    ("experiments.fmnist", ["--dataset=tfds:emnist", "--data_dir=x"],
     "--data_dir cannot apply"),
    ("experiments.centralized", ["--split_dir=x"], "--split_dir cannot apply"),
    ("experiments.apes", ["--data_dir=x"], "--data_dir cannot apply"),
    ("experiments.apes", ["--preset=paper", "--data_dir=x", "--data_seed=3"],
     "--data_seed cannot apply"),
    ("datasets.plot", ["--split_dir=s", "--num_clients=0"], "--num_clients=0"),
    ("datasets.plot", ["--split_dir=s", "--num_clients=-3"], "--num_clients=-3"),
    ("datasets.plot", ["--num_clients=5"], "--split_dir is required"),
    # issue 33 item 5: absl's "FATAL Flags parsing error", exit 1; a traceback for --out
    ("datasets.plot", ["--split_dir=s", "--bins=x"], "--bins"),
    ("datasets.plot", ["--split_dir=s", "--out=README.md/fig.png"], "is not a directory"),
    ("datasets.plot", ["--split_dir=s", "--out=docs"], "is a directory"),
    ("datasets.build", ["--dataset=foo"], "--dataset=foo"),
    ("datasets.build", ["--dataset=svhn", "--num_clients=1e3"], "integer"),
    ("datasets.build", ["--dataset=svhn", "--out=README.md/split"], "is a file"),
    ("datasets.build", ["--partition=iid"], "--dataset is required"),
    # issue 50 items 3-5: accepted silently, refused after TensorFlow loaded, or a message
    # that named no flag or the wrong one
    ("experiments.idp_fedavg", ["--clients_per_round=1e-9"], "--clients_per_round >= 1"),
    ("experiments.fmnist", ["--clients_per_round=0.5"], "--clients_per_round >= 1"),
    ("experiments.idp_fedavg", ["--num_features=0"], "--num_features must be"),
    ("experiments.idp_fedavg", ["--num_classes=1"], "--num_classes must be"),
    ("experiments.idp_fedavg", ["--alpha=-1", "--noiid"], "--alpha=-1.0"),
    ("experiments.rpdp", ["--distribution=by_class", "--class_budgets=foo"],
     "--class_budgets: class budget 'foo'"),
    ("experiments.rpdp", ["--distribution=by_class", "--class_budgets=0-9:-1"],
     "--class_budgets: class budget '0-9:-1'"),
    ("experiments.centralized", ["--mode=table3", "--table3_examples=100000"],
     "raise --train_examples"),
    ("experiments.ino_sgd", ["--expected_batch=1e9"], "lower --expected_batch"),
    ("experiments.idp_fedavg", ["--runs=idp", "--ratios=0.5,0.5"], "give 3 --ratios"),
    ("experiments.idp_fedavg", ["--runs=50-50"], "give 3, one per budget (e.g. 34-33-33)"),
    ("experiments.rpdp", ["--level_ratios=0.7,0.3"], "--levels/--level_ratios: 2 ratios"),
    ("experiments.centralized", ["--level_ratios=0.7,0.3"], "--levels/--level_ratios"),
    ("tff_idp.execution.worker", ["--port=1", "--log_path=/etc/hostname/x.log"],
     "--log_path=/etc/hostname/x.log: cannot write it"),
    # issue 50 item 2: a worker other machines can reach needs TLS or the insecure flag
    ("tff_idp.execution.worker", ["--port=1", "--listen_address=0.0.0.0"],
     "--listen_address=0.0.0.0 lets other machines run computations"),
    ("tff_idp.execution.worker", ["--port=1", "--listen_address=host.example"],
     "give an IP address"),
]


@pytest.mark.parametrize("module,args,expected", CASES,
                         ids=[f"{m}:{a[0]}" for m, a, _ in CASES])
def test_bad_flag_is_refused_before_tensorflow_loads(module, args, expected, tmp_path):
  writes_runs = module.startswith("experiments.") and module != "experiments.scf_curves"
  output = [f"--output_dir={tmp_path / 'out'}"] if writes_runs else []
  proc = forked_runs.run_module(module, [*args, *output], timeout=120, before_tensorflow=True)
  errors = proc.stderr.splitlines()
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert len(errors) == 1 and errors[0].startswith("error: "), errors
  assert expected in errors[0], errors[0]
  loaded = proc.tensorflow_modules
  assert not loaded, f"{module} imported {loaded[:3]} before refusing the flag"


# Every command a user runs, with a flag only that module defines (issue 34 item 1).
HELP_MODULES = [
    ("experiments.idp_fedavg", "--runs"), ("experiments.rpdp", "--methods"),
    ("experiments.apes", "--frameworks"), ("experiments.audit", "--controls"),
    ("experiments.ino_sgd", "--epsilons"), ("experiments.centralized", "--level_ratios"),
    ("experiments.scf_curves", "--delta"), ("experiments.fmnist", "--runs"),
    ("experiments.cifar10", "--runs"), ("experiments.svhn", "--runs"),
    ("tff_idp.idp_fedavg.calibrate", "--epsilons"), ("tff_idp.execution.worker", "--port"),
    ("datasets.plot", "--split_dir"), ("datasets.build", "--partition"),
]


@pytest.mark.parametrize("module,own_flag", HELP_MODULES, ids=[m for m, _ in HELP_MODULES])
def test_help_lists_the_flags_and_exits_0_before_tensorflow(module, own_flag):
  """``--help``/``-h`` print the module's own flags (then the shared ones), ``--helpfull`` all.

  Exit status 0, no TensorFlow imported. Bug caught: absl's help flags not
  defined when the toolkit parses the command line, so ``--help`` was an
  "Unknown command line flag" with exit 2.
  """
  outputs = {}
  for arg in ("--help", "-h", "--helpfull"):
    proc = forked_runs.run_module(module, [arg], timeout=120, before_tensorflow=True)
    assert proc.returncode == 0, (arg, proc.stderr[-2000:])
    assert not proc.tensorflow_modules, f"{arg} imported TensorFlow"
    assert "Unknown command line flag" not in proc.stdout + proc.stderr
    assert f"{own_flag}" in proc.stdout and "(default:" in proc.stdout, proc.stdout[:2000]
    outputs[arg] = proc.stdout
  assert outputs["--help"] == outputs["-h"]
  assert "flags of this command" in outputs["--help"]
  for arg in ("--help", "--helpfull"):  # issue 51: the command's own flags were listed twice
    # a flag's own line is indented 2 spaces, its wrapped description 4
    names = re.findall(r"^  --(?:\[no\])?(\w+):", outputs[arg], flags=re.M)
    assert names and len(names) == len(set(names)), sorted(
        n for n in set(names) if names.count(n) > 1)
  assert len(outputs["--helpfull"]) > len(outputs["--help"])
  assert "--verbosity" in outputs["--helpfull"]  # absl's own flags only in --helpfull


@pytest.mark.parametrize("module", ["experiments.idp_fedavg", "experiments.rpdp",
                                    "experiments.apes", "experiments.ino_sgd",
                                    "experiments.audit", "experiments.centralized"])
@pytest.mark.parametrize("where", ["a_file", "under_a_file"])
def test_an_unusable_output_dir_is_refused_before_tensorflow(module, where, tmp_path):
  """Issue 33 item 4: --output_dir problems were refused only after TensorFlow loaded."""
  blocker = tmp_path / "a_file"
  blocker.write_text("not a directory")
  out = blocker if where == "a_file" else blocker / "runs"
  proc = forked_runs.run_module(module, [f"--output_dir={out}"], timeout=120,
                                before_tensorflow=True)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = proc.stderr.splitlines()
  assert lines == [lines[0]] and lines[0].startswith("error: --output_dir="), lines
  assert not proc.tensorflow_modules
