"""Does the driving process stay flat over a long grid of run specs? (issue 33 item 7)

``tff_idp.run_idp_fedavg`` trains every run spec of ``runs=`` in one process,
each with its own calibration and learning process. This runs a grid of
``--specs`` distinct SAMPLE run specs (group mixes such as ``34-43-23``,
``40-40-20``, ...; then the same mixes under SCALE) of ``--rounds`` rounds
each on a small generated federation (100 clients, logistic regression), and
reads the driving process's resident memory (VmRSS) after each spec, once the
spec's objects are released (``gc.collect()``). It reports the least-squares
slope in MiB per run spec over the specs after the first two (warm-up) and the
range, for each grid of ``--grids`` in turn, in one process each: clients
trained in the TFF worker with TFF's compiled computations kept (``before``,
as before issue 33 item 7) and released between run specs (``after``, what
:func:`tff_idp.engine.run_template.run_grid` does), and clients trained in
process (``after``). Last, ``--long_spec`` (issue 50 item 6) trains one run
spec of ``4 × --rounds`` rounds in process and reads RSS every ``--rounds``
rounds: its slope per round, times the rounds of a spec, is what the
per-spec slope is made of once the compiled computations are released.

  .venv/bin/python -m benchmarks.bench_run_spec_memory [--specs=8] [--rounds=10]

Results go to ``benchmarks/results/run_spec_memory.json``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from absl import app
from absl import flags
import numpy as np

_SPECS = flags.DEFINE_integer("specs", 8, "Distinct group mixes (each run as SAMPLE and SCALE).")
_ROUNDS = flags.DEFINE_integer("rounds", 10, "Rounds per run spec.")
_GRIDS = flags.DEFINE_list(
    "grids", ["tff:before", "tff:after", "in_process:after"],
    "execution:variant per grid. execution: where the clients train (tff, in_process); "
    "variant: after (TFF's compiled computations released between run specs, the "
    "default) or before (not released, as before issue 33 item 7).")
_LONG_SPEC = flags.DEFINE_bool(
    "long_spec", True, "Also measure RSS per round within one run spec of 4 × --rounds rounds.")
_OUT = flags.DEFINE_string("out", os.path.join(os.path.dirname(__file__), "results",
                                               "run_spec_memory.json"), "Result file.")

MIXES = [(34, 43, 23), (40, 40, 20), (50, 30, 20), (30, 30, 40), (20, 50, 30), (60, 20, 20),
         (25, 25, 50), (45, 45, 10), (70, 20, 10), (10, 20, 70)]

# One grid in a fresh interpreter: prints one RSS reading (MiB) per finished run spec.
_GRID = """
import gc, sys
import numpy as np
import tensorflow  # before anything builds a Keras model
import datasets, tff_idp
from tff_idp.idp_fedavg import runs as idp_runs

def rss_mib():
  with open("/proc/self/status") as f:
    return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024

from tff_idp.engine import run_template
if sys.argv[6] == "before":  # as before issue 33 item 7: nothing released between specs
  run_template.runtime = type("Kept", (), {"release_compiled_computations": staticmethod(gc.collect)})
if sys.argv[6] == "rounds":  # one long spec: RSS every `rounds` rounds
  from tff_idp.engine import driver
  check, count = driver.termination.check, [0]
  def counting_check():
    if count[0] and count[0] % int(sys.argv[2]) == 0:
      gc.collect()
      print("RSS", count[0], rss_mib(), flush=True)
    count[0] += 1
    return check()
  driver.termination.check = counting_check
end_spec = idp_runs._IdpFedAvgRuns.end_spec
def measured_end_spec(self, spec, results):
  row = end_spec(self, spec, results)
  self.process = None
  gc.collect()
  print("RSS", spec.name, rss_mib(), flush=True)
  return row
idp_runs._IdpFedAvgRuns.end_spec = measured_end_spec

specs, rounds, execution, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
mixes = [tuple(int(v) for v in m.split("-")) for m in sys.argv[5].split(",")][:specs]
rng = np.random.default_rng(0)
x = rng.normal(size=(3000, 8)); y = (x[:, 0] - x[:, 2] > 0).astype(int)
split = datasets.from_arrays(x[:2500], y[:2500], partition="dirichlet", num_clients=100,
                             alpha=0.5, test_x=x[2500:], test_y=y[2500:])
runs = [f"{a}-{b}-{c}" for a, b, c in mixes] + [f"scale-{a}-{b}-{c}" for a, b, c in mixes]
if sys.argv[6] == "rounds":
  runs, rounds = runs[:1], 4 * rounds + 1
tff_idp.run_idp_fedavg(split, output_dir=out, runs=runs, seeds=[0], rounds=rounds,
                       head="sigmoid", progress=False, client_execution=execution)
"""


def slope_mib_per_spec(rss: list[float], warmup: int = 2) -> float:
  """Least-squares slope of RSS over the run specs after ``warmup``."""
  y = np.asarray(rss[warmup:], float)
  return float(np.polyfit(np.arange(y.size), y, 1)[0]) if y.size > 1 else 0.0


def run_grid(execution: str, variant: str, specs: int, rounds: int, out_dir: str
             ) -> list[float]:
  """RSS (MiB) after each run spec of one grid, in a fresh interpreter."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  mixes = ",".join("-".join(str(v) for v in m) for m in MIXES)
  proc = subprocess.run([sys.executable, "-c", _GRID, str(specs), str(rounds), execution,
                         out_dir, mixes, variant], capture_output=True, text=True, cwd=root,
                        env=dict(os.environ, PYTHONPATH=root), check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"grid ({execution}) failed: {proc.stderr[-2000:]}")
  return [float(line.split()[-1]) for line in proc.stdout.splitlines()
          if line.startswith("RSS ")]


def main(argv) -> int:
  del argv
  import tempfile  # pylint: disable=g-import-not-at-top
  specs = min(_SPECS.value, len(MIXES))
  print(f"load average {os.getloadavg()[0]:.2f}; {2 * specs} run specs × {_ROUNDS.value} "
        "rounds, 100 clients, logistic regression", flush=True)
  results = {"specs": 2 * specs, "rounds": _ROUNDS.value, "grids": {}}
  for grid in _GRIDS.value:
    execution, variant = grid.split(":")
    with tempfile.TemporaryDirectory() as tmp:
      rss = run_grid(execution, variant, specs, _ROUNDS.value, tmp)
    slope = slope_mib_per_spec(rss)
    results["grids"][grid] = {"rss_mib": rss, "slope_mib_per_spec": slope}
    print(f"{execution:10s} {variant:6s} RSS {rss[0]:.0f} → {rss[-1]:.0f} MiB over "
          f"{len(rss)} run specs; slope {slope:+.2f} MiB per run spec", flush=True)
  if _LONG_SPEC.value:
    with tempfile.TemporaryDirectory() as tmp:
      rss = run_grid("in_process", "rounds", specs, _ROUNDS.value, tmp)[:4]
    per_round = slope_mib_per_spec(rss, warmup=0) / _ROUNDS.value
    results["long_spec"] = {"rss_mib_every_rounds": rss, "slope_mib_per_round": per_round,
                            "slope_mib_per_spec_of_rounds": per_round * _ROUNDS.value}
    print(f"in_process one spec of {4 * _ROUNDS.value} rounds: RSS {rss[0]:.0f} → {rss[-1]:.0f}"
          f" MiB; slope {1024 * per_round:+.1f} KiB per round = "
          f"{per_round * _ROUNDS.value:+.2f} MiB per {_ROUNDS.value}-round spec", flush=True)
  os.makedirs(os.path.dirname(_OUT.value), exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(results, f, indent=1)
  print(f"written to {_OUT.value}")
  return 0


if __name__ == "__main__":
  app.run(main)
