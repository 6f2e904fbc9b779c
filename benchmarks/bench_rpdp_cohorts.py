"""rPDP-FL cohorts: the vectorized record-level DP-SGD against the per-client executions (issue 35).

Per cohort size c, c clients of 20 records (60 features, 10 classes, rates
q_j ~ U(0.2, 0.9)), the logistic regression (610 parameters), τ = 5 local
steps of Poisson DP-SGD (σ = 1, L = 1, SGD 0.1). Entries:

* ``tff``: every client's DP-SGD a TFF client computation (what ``auto``
  picked for this model before issue 35);
* ``in_process``: one traced DP-SGD call per client, 2 model copies;
* ``vectorized``: every client at once on stacked weights (what ``auto``
  picks now).

A round is building the c client inputs (records, rates, the client's
seed: a ``tf.data`` dataset each, or ``RecordArrays`` for the vectorized
entry, as the runner builds them) plus ``process.next`` (the clients, then the unchanged TFF mean and
server step). Each pass runs one round of every entry, in rotated order,
after a warm-up round each; medians over passes, ranges in brackets, the
load average printed at the start and the end.

  python -m benchmarks.bench_rpdp_cohorts [--passes=3] [--cohorts=100,1000]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from benchmarks import arguments
from benchmarks import results_file

RESULTS = os.path.join(os.path.dirname(__file__), "results", "rpdp_cohorts.json")
ENTRIES = ("tff", "in_process", "vectorized")
RECORDS, FEATURES, CLASSES, STEPS = 20, 60, 10, 5


def _client_arrays(client_id: int):
  rng = np.random.default_rng(client_id)
  return (rng.normal(size=(RECORDS, FEATURES)).astype(np.float32),
          rng.integers(0, CLASSES, RECORDS).astype(np.int32),
          rng.uniform(0.2, 0.9, RECORDS).astype(np.float32))


def main(passes: int = 3, cohorts=(100, 1000)) -> dict:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import client_work  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import records  # pylint: disable=g-import-not-at-top
  print(f"load average at start: {os.getloadavg()}", flush=True)
  spec = {"x": tf.TensorSpec([None, FEATURES], tf.float32), "y": tf.TensorSpec([None], tf.int32)}
  model_fn = models.tff_model_fn(lambda: models.build_logistic_regression(FEATURES, CLASSES),
                                 spec)
  processes = {e: client_work.build_rpdp_fedavg_driver_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=STEPS,
      noise_multiplier=1.0, clip_norm=1.0, loss_fn=models.per_example_loss("softmax"),
      client_execution=e, **({"parallel_clients": 2} if e == "in_process" else {}))
      for e in ENTRIES}
  arrays = {i: _client_arrays(i) for i in range(max(cohorts))}
  rng = np.random.default_rng(0)
  times: dict = {}
  for c in cohorts:
    states = {e: processes[e].initialize() for e in ENTRIES}

    def one_round(entry: str) -> float:
      start = time.perf_counter()
      seeds = rng.integers(0, 2**62, (c, 2))
      if entry == "vectorized":  # what the runner hands it: the same records as arrays
        data = [records.RecordArrays(*arrays[i], seeds[i]) for i in range(c)]
      else:
        data = [client_work.record_dataset(*arrays[i], tuple(seeds[i])) for i in range(c)]
      states[entry] = processes[entry].next(states[entry], data).state
      seconds = time.perf_counter() - start
      runtime.between_rounds()
      return seconds

    for entry in ENTRIES:
      one_round(entry)  # warm-up: tracing
    for p in range(passes):
      order = ENTRIES[p % 3:] + ENTRIES[:p % 3]
      for entry in order:
        times.setdefault(f"{c}|{entry}", []).append(one_round(entry))
  res = {"passes": passes, "cohorts": list(cohorts), "seconds": times,
         "load_end": os.getloadavg()}
  res["summary"] = summarize(times)
  return results_file.report(res, table(res), RESULTS)


def summarize(times: dict) -> dict:
  """Median round (range) and clients/s per ``cohort|entry``, and the ratios to ``tff`` and ``in_process``."""
  out = {}
  for key, seconds in times.items():
    cohort, entry = key.split("|")
    median = float(np.median(seconds))
    out[key] = {"cohort": int(cohort), "entry": entry, "round_s": median,
                "range_s": [float(np.min(seconds)), float(np.max(seconds))],
                "clients_per_s": int(cohort) / median}
  for row in out.values():
    for base in ("tff", "in_process"):
      other = out.get(f"{row['cohort']}|{base}")
      row[f"x_{base}"] = other["round_s"] / row["round_s"] if other else None
  return out


def table(res: dict) -> str:
  lines = ["| c | entry | round s (range) | clients/s | × tff | × in_process |",
           "|---:|---|---|---:|---:|---:|"]
  for row in res["summary"].values():
    lo, hi = row["range_s"]
    lines.append(f"| {row['cohort']:,} | {row['entry']} | {row['round_s']:.2f} "
                 f"({lo:.2f}–{hi:.2f}) | {row['clients_per_s']:,.0f} | {row['x_tff']:.2f}× | "
                 f"{row['x_in_process']:.2f}× |")
  return "\n".join(lines)


def _parse(argv) -> dict:
  return arguments.parse(argv, "benchmarks.bench_rpdp_cohorts", __doc__, ints=("passes",),
                         int_lists=("cohorts",))


if __name__ == "__main__":
  import tff_idp  # noqa: F401  (quiet TensorFlow before it loads)
  from tff_idp.execution import runtime as _runtime  # pylint: disable=g-import-not-at-top
  kwargs = _parse(sys.argv[1:])
  with _runtime.execution_context():
    main(**kwargs)
