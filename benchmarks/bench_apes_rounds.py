"""APES rounds: the vectorized client work against one TFF client computation per user (issue 35).

``experiments.apes``'s embedded defaults: 1,000 users × 10 train records of
60 features (``datasets.shuffle_users.synthetic_users``), softmax regression
(d = 610), 10 local FedProx epochs of batch 32 at SGD 1.0, μ = 0.01, every
user every round, Clip-Laplace at each user's own ε (Uniform2) with C = 0.1,
de-biased mean. Entries:

* ``tff``: :func:`tff_idp.apes.build_apes_process`, every user a TFF client
  computation (what ``experiments.apes`` ran before issue 35);
* ``vectorized``: ``build_apes_driver_process(client_execution="vectorized")``
  (what ``auto`` picks now): every user's FedProx and randomizer in one
  computation, the same TFF server step.

A round is what the driver times: building the 1,000 client inputs (a
``tf.data`` pipeline and a privacy dataset per user for ``tff``,
``LdpClientArrays`` for ``vectorized``) plus ``process.next``; after each
round, untimed, the TFF worker is recycled if it grew, as the round driver
does between rounds. Each pass runs
``--rounds`` rounds of each entry, in rotated order, after one warm-up round
per entry (tracing); medians over passes, ranges in brackets; the load
average is printed at the start and the end. Both entries draw every user's
noise from the same seeds, and the benchmark checks that their models agree.

  python -m benchmarks.bench_apes_rounds [--passes=3] [--rounds=2]
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

from benchmarks import arguments
from benchmarks import results_file

RESULTS = os.path.join(os.path.dirname(__file__), "results", "apes_rounds.json")
ENTRIES = ("tff", "vectorized")


def _setup():
  from datasets import shuffle_users  # pylint: disable=g-import-not-at-top
  from tff_idp import apes, models  # pylint: disable=g-import-not-at-top
  from tff_idp.apes import runs  # pylint: disable=g-import-not-at-top
  from tff_idp.apes.defaults import DATA_DEFAULTS, DEFAULTS  # pylint: disable=g-import-not-at-top
  from tff_idp.engine.privacy_randomness import PrivacyRandomness  # pylint: disable=g-import-not-at-top
  federation = shuffle_users.synthetic_users(DATA_DEFAULTS["users"],
                                             DATA_DEFAULTS["samples_per_user"],
                                             seed=DATA_DEFAULTS["data_seed"])
  epsilons = runs.draw_epsilons(DEFAULTS["distribution"], federation.num_users, 0)
  training = runs.ApesTraining(local_epochs=DEFAULTS["local_epochs"],
                               batch_size=DEFAULTS["batch_size"],
                               client_learning_rate=DEFAULTS["client_learning_rate"],
                               proximal_strength=DEFAULTS["proximal_strength"],
                               clip=DEFAULTS["clip"])
  d, c = federation.num_features, federation.num_classes
  model_fn = models.tff_model_fn(lambda: models.build_logistic_regression(d, c),
                                 models.input_spec_for((d,)))
  processes, input_fns = {}, {}
  # Both entries draw the same noise from the same per-user seeds (the insecure,
  # loudly labelled debug derivation: this is a benchmark, not a private run).
  randomness = PrivacyRandomness.for_run(0, "bench/apes", reproducible=True)
  for entry in ENTRIES:
    processes[entry] = apes.build_apes_driver_process(
        model_fn, mechanism="clip_laplace", clip=training.clip, epsilons=epsilons,
        client_learning_rate=training.client_learning_rate,
        proximal_strength=training.proximal_strength, local_epochs=training.local_epochs,
        num_reports=federation.num_users, client_execution=entry)
    input_fns[entry] = runs.user_input_fn(federation, epsilons, training, randomness,
                                          vectorized=entry == "vectorized")
  return federation, processes, input_fns


def _flat(weights) -> np.ndarray:
  return np.concatenate([np.ravel(w) for w in weights.trainable])


def main(passes: int = 3, rounds: int = 2) -> dict:
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  print(f"load average at start: {os.getloadavg()}", flush=True)
  federation, processes, input_fns = _setup()
  states = {e: processes[e].initialize() for e in ENTRIES}
  round_num = {e: 0 for e in ENTRIES}

  def one_round(entry: str) -> float:
    start = time.perf_counter()
    inputs = [input_fns[entry](cid, round_num[entry]) for cid in federation.client_ids]
    states[entry] = processes[entry].next(states[entry], inputs).state
    round_num[entry] += 1
    seconds = time.perf_counter() - start
    runtime.between_rounds()  # as the round driver does: recycle a grown TFF worker (untimed)
    return seconds

  for entry in ENTRIES:  # warm-up: tracing
    one_round(entry)
  gap = float(np.max(np.abs(_flat(states["tff"].global_model_weights)
                            - _flat(states["vectorized"].global_model_weights))))
  times = {e: [] for e in ENTRIES}
  for p in range(passes):
    order = ENTRIES[p % 2:] + ENTRIES[:p % 2]
    for entry in order:
      times[entry].append(sum(one_round(entry) for _ in range(rounds)) / rounds)
  res = {"passes": passes, "rounds_per_pass": rounds, "users": federation.num_users,
         "seconds_per_round": times, "max_weight_gap_after_round_1": gap,
         "load_end": os.getloadavg()}
  res["summary"] = {e: {"median_s": float(np.median(t)), "min_s": float(np.min(t)),
                        "max_s": float(np.max(t)),
                        "users_per_s": federation.num_users / float(np.median(t))}
                    for e, t in times.items()}
  res["speedup"] = res["summary"]["tff"]["median_s"] / res["summary"]["vectorized"]["median_s"]
  return results_file.report(res, table(res), RESULTS)


def table(res: dict) -> str:
  lines = ["| APES round, 1,000 users | s per round (range) | users/s | × tff |", "|---|---|---|---|"]
  base = res["summary"]["tff"]["median_s"]
  for entry, s in res["summary"].items():
    lines.append(f"| {entry} | {s['median_s']:.2f} ({s['min_s']:.2f}–{s['max_s']:.2f}) | "
                 f"{s['users_per_s']:,.0f} | {base / s['median_s']:.2f}× |")
  lines.append(f"\nmodels after the warm-up round agree to {res['max_weight_gap_after_round_1']:.1e}")
  return "\n".join(lines)


def _parse(argv) -> dict:
  return arguments.parse(argv, "benchmarks.bench_apes_rounds", __doc__, ints=("passes", "rounds"))


if __name__ == "__main__":
  import tff_idp  # noqa: F401  (quiet TensorFlow before it loads)
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  kwargs = _parse(sys.argv[1:])
  with runtime.execution_context():
    main(**kwargs)
