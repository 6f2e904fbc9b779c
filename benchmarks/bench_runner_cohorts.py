"""Large cohorts as users run them: ``run_idp_fedavg`` on a split, client data included (issue 49).

``bench_large_cohorts`` times the vectorized round with the cohort's arrays
drawn before the clock starts. This one times the path a user runs:
``tff_idp.run_idp_fedavg`` on a ``datasets.from_arrays`` split held in memory
and on the same split saved to disk (``split.save(dir)``, SQLite), and the
command line ``python -m experiments.idp_fedavg --dataset=<saved split>``.
Each entry's round includes everything the driver does per round: Poisson
sampling, reading every sampled client's examples (from the split's arrays,
issue 49, or through a ``tf.data`` pipeline per client before), training,
the server step, metrics and progress.

The federation: 20,000 clients × 8 examples of 60 features, 10 classes,
logistic regression, non-private, 1 local epoch of batch 16 (one step per
client), c = 1,000 clients per round. The time per round is
(run of ``--long`` rounds − run of ``--short`` rounds) / (long − short), so
start-up, tracing and the final evaluation cancel; the per-client entry, about
100× slower per round, runs ``--per_client_long`` rounds instead (its rounds
dwarf the start-up's noise), the others ``--long`` (enough rounds that a
second of start-up noise is small against them). Entries run side by side
in one process (the command line in a child process), so load affects them
alike; the load average is printed at the start and the end.

  python -m benchmarks.bench_runner_cohorts [--short=2] [--long=42] [--per_client_long=8]

Results: ``benchmarks/results/runner_cohorts.json``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import arguments

RESULTS = os.path.join(os.path.dirname(__file__), "results", "runner_cohorts.json")
CLIENTS, EXAMPLES, FEATURES, CLASSES, COHORT = 20_000, 8, 60, 10, 1_000
COMMON = dict(runs=("nonprivate",), clients_per_round=COHORT, local_epochs=1, batch_size=16,
              model="logreg", eval_every=1_000, checkpoint_every=1_000, progress=False)


def _split():
  import datasets  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  n = CLIENTS * EXAMPLES
  x = rng.normal(size=(n, FEATURES)).astype(np.float32)
  y = rng.integers(0, CLASSES, n)
  owners = np.repeat(np.arange(CLIENTS), EXAMPLES)
  test = rng.normal(size=(500, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, 500)
  return datasets.from_arrays(x, y, partition="natural", groups=owners, test_x=test[0],
                              test_y=test[1], seed=0)


def _runner_seconds(split, rounds: int, execution: str, out: str) -> float:
  import tff_idp  # pylint: disable=g-import-not-at-top
  start = time.perf_counter()
  tff_idp.run_idp_fedavg(split, output_dir=out, rounds=rounds, client_execution=execution,
                         **COMMON)
  return time.perf_counter() - start


def _cli_seconds(split_dir: str, rounds: int, out: str) -> float:
  start = time.perf_counter()
  subprocess.run(
      [sys.executable, "-m", "experiments.idp_fedavg", f"--dataset={split_dir}",
       "--runs=nonprivate", f"--clients_per_round={COHORT}", f"--rounds={rounds}",
       "--local_epochs=1", "--batch_size=16", "--model=logreg", "--seeds=0",
       "--eval_every=1000", "--checkpoint_every=1000", "--progress=false",
       f"--output_dir={out}"], check=True, capture_output=True,
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return time.perf_counter() - start


def main(short: int = 2, long: int = 42, per_client_long: int = 8, cli: bool = True) -> dict:
  print(f"load average at start: {os.getloadavg()}", flush=True)
  in_memory = _split()
  scratch = tempfile.mkdtemp(prefix="bench_runner_cohorts_")
  saved_dir = os.path.join(scratch, "split")
  saved = in_memory.save(saved_dir)
  entries = {
      "runner, from_arrays split, per client (in_process)":
          lambda r, out: _runner_seconds(in_memory, r, "in_process", out),
      "runner, from_arrays split, default (auto -> vectorized)":
          lambda r, out: _runner_seconds(in_memory, r, "auto", out),
      "runner, saved split, default (auto -> vectorized)":
          lambda r, out: _runner_seconds(saved, r, "auto", out),
  }
  if cli:
    entries["command line, saved split, default"] = (
        lambda r, out: _cli_seconds(saved_dir, r, out))
  results = {}
  for name, run in entries.items():
    last = per_client_long if "per client" in name else long
    times = {r: run(r, os.path.join(scratch, f"{len(results)}_{r}")) for r in (short, last)}
    per_round = (times[last] - times[short]) / (last - short)
    results[name] = {"seconds_per_round": per_round, "clients_per_second": COHORT / per_round,
                     "run_seconds": times}
    print(f"{name}: {per_round:.3f} s per round, {COHORT / per_round:.0f} clients/s", flush=True)
  base = results["runner, from_arrays split, default (auto -> vectorized)"]["seconds_per_round"]
  per_client = results["runner, from_arrays split, per client (in_process)"]["seconds_per_round"]
  summary = {"default_speedup_over_per_client": per_client / base}
  if cli:
    summary["command_line_over_runner"] = (
        results["command line, saved split, default"]["seconds_per_round"] / base)
  print(json.dumps(summary, indent=1))
  print(f"load average at end: {os.getloadavg()}", flush=True)
  out = {"federation": dict(clients=CLIENTS, examples=EXAMPLES, features=FEATURES,
                            classes=CLASSES, cohort=COHORT),
         "short": short, "long": long, "per_client_long": per_client_long, "entries": results,
         "summary": summary}
  os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
  with open(RESULTS, "w") as f:
    json.dump(out, f, indent=1)
  return out


if __name__ == "__main__":
  main(**arguments.parse(sys.argv[1:], "benchmarks.bench_runner_cohorts", __doc__,
                         ints=("short", "long", "per_client_long")))
