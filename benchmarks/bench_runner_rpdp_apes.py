"""rPDP-FL and APES cohorts as users run them: ``run_rpdp``, ``run_apes`` at c ≈ 1,000 (issue 49).

``bench_rpdp_cohorts`` and ``bench_apes_rounds`` time the process's round
alone. This one times the runners a user calls, so every entry's round
includes all the driver does per round: Poisson client sampling (rPDP-FL),
each client's input (its records, rates and secret seed as arrays for the
vectorized execution; a ``tf.data`` dataset per client for the per-client
ones), the clients' work, the TFF server step, the ledger's update (rPDP-FL's
per-record accountant), metrics and checkpoints' bookkeeping.

* rPDP-FL: ``tff_idp.run_rpdp`` on a ``datasets.from_arrays`` split of
  2,000 clients × 20 records (60 features, 10 classes), client rate λ = 0.5
  (about 1,000 clients a round), the logistic regression, the ``ours``
  method at the command line's defaults otherwise (τ = 10 steps of Poisson
  DP-SGD, σ = 2, L = 1). Entries: ``in_process`` and ``tff`` (one client
  at a time) and the default (``auto`` → vectorized).
* APES: ``tff_idp.run_apes`` on the command line's embedded users
  (``datasets.shuffle_users.synthetic_users(1000)``, every user every round),
  the ``apes`` framework at its defaults (10 FedProx epochs of batch 32,
  Clip-Laplace). Entries: ``tff`` (one TFF client computation per user; APES
  has no per-user in-process execution) and the default (``auto`` → vectorized).

The time per round is (run of ``long`` rounds − run of ``--short`` rounds) /
(long − short): start-up, calibration, tracing and the final evaluation
cancel. Per-client entries run ``--per_client_long`` rounds (each round takes
seconds), the defaults ``--long``. Entries run one after the other in one
process; the load average is printed at the start and the end.

  python -m benchmarks.bench_runner_rpdp_apes [--short=2] [--long=12] [--per_client_long=5]

Results: ``benchmarks/results/runner_rpdp_apes.json``.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks import arguments
from benchmarks import results_file

RESULTS = os.path.join(os.path.dirname(__file__), "results", "runner_rpdp_apes.json")
CLIENTS, RECORDS, FEATURES, CLASSES, CLIENT_RATE = 2_000, 20, 60, 10, 0.5
APES_USERS = 1_000
QUIET = dict(eval_every=1_000, checkpoint_every=1_000, progress=False)


def _split():
  import datasets  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  n = CLIENTS * RECORDS
  x = rng.normal(size=(n, FEATURES)).astype(np.float32)
  y = rng.integers(0, CLASSES, n)
  owners = np.repeat(np.arange(CLIENTS), RECORDS)
  test_x, test_y = rng.normal(size=(500, FEATURES)).astype(np.float32), rng.integers(0, CLASSES,
                                                                                       500)
  return datasets.from_arrays(x, y, partition="natural", groups=owners, test_x=test_x,
                              test_y=test_y, seed=0)


def _timed(run, rounds: int, out: str) -> float:
  start = time.perf_counter()
  run(rounds, out)
  return time.perf_counter() - start


def _entries() -> dict:
  import tff_idp  # pylint: disable=g-import-not-at-top
  from datasets import shuffle_users  # pylint: disable=g-import-not-at-top
  split = _split()
  users = shuffle_users.synthetic_users(APES_USERS, seed=0)

  def rpdp(execution):
    return lambda rounds, out: tff_idp.run_rpdp(
        split, output_dir=out, methods=("ours",), rounds=rounds, client_rate=CLIENT_RATE,
        model="logreg", client_execution=execution, **QUIET)

  def apes(execution):
    return lambda rounds, out: tff_idp.run_apes(
        users, output_dir=out, frameworks=("apes",), rounds=rounds, client_execution=execution,
        **QUIET)

  return {("rpdp", "per client (in_process)"): rpdp("in_process"),
          ("rpdp", "per client (tff)"): rpdp("tff"),
          ("rpdp", "default (auto -> vectorized)"): rpdp("auto"),
          ("apes", "per client (tff)"): apes("tff"),
          ("apes", "default (auto -> vectorized)"): apes("auto")}


def main(short: int = 2, long: int = 12, per_client_long: int = 5) -> dict:
  print(f"load average at start: {os.getloadavg()}", flush=True)
  scratch = tempfile.mkdtemp(prefix="bench_runner_rpdp_apes_")
  results: dict = {}
  for index, ((family, name), run) in enumerate(_entries().items()):
    last = per_client_long if "per client" in name else long
    times = {r: _timed(run, r, os.path.join(scratch, f"{family}_{index}_{r}"))
             for r in (short, last)}
    per_round = (times[last] - times[short]) / (last - short)
    results.setdefault(family, {})[name] = {"seconds_per_round": per_round,
                                            "run_seconds": times}
    print(f"{family}, {name}: {per_round:.3f} s per round", flush=True)
  summary = {}
  for family, entries in results.items():
    default = entries["default (auto -> vectorized)"]["seconds_per_round"]
    per_client = {k: v["seconds_per_round"] for k, v in entries.items() if "per client" in k}
    summary[family] = {"default_over_" + k.split("(")[1].rstrip(")"): v / default
                       for k, v in per_client.items()}
    summary[family]["default_over_fastest_per_client"] = min(per_client.values()) / default
  out = {"rpdp": dict(clients=CLIENTS, records=RECORDS, features=FEATURES, classes=CLASSES,
                      client_rate=CLIENT_RATE),
         "apes": dict(users=APES_USERS), "short": short, "long": long,
         "per_client_long": per_client_long, "entries": results, "summary": summary,
         "load_end": os.getloadavg()}
  return results_file.report(out, json.dumps(summary, indent=1), RESULTS)


if __name__ == "__main__":
  main(**arguments.parse(sys.argv[1:], "benchmarks.bench_runner_rpdp_apes", __doc__,
                         ints=("short", "long", "per_client_long")))
