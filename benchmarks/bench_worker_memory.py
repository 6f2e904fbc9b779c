"""Is the TFF worker's memory flat without jemalloc? Recycling vs glibc as is (issue 25 item 9).

With glibc's malloc the worker's RSS grows ~0.3 MiB per round although its
live heap is flat (see ``tff_idp.execution.runtime``). The runtime's default
without jemalloc recycles the worker between rounds once it has grown
``recycle_worker_mib`` past its warm size. This runs the same small
IDP-FedAvg rounds (logistic regression, Poisson cohorts of mean 20 padded to
multiples of 8, clients trained in the worker by default) on two runtimes side
by side, one round each in turn (in alternating order) so both see the same
machine load:

* ``glibc``: glibc malloc, never recycled (the worker before this fix);
* ``recycled``: glibc malloc, recycled (the default when no jemalloc is found).

It reports each worker's RSS slope (least squares over the rounds after
warm-up, MiB/round; target ≤ 0.05), its RSS range, and the recycled run's
total time over the plain run's (target ≤ 1.05), recycling included:

  .venv/bin/python -m benchmarks.bench_worker_memory [--rounds=1000]

Results go to ``benchmarks/results/worker_memory.json``.
"""
from __future__ import annotations

import collections
import json
import os
import time

from absl import app
from absl import flags
import numpy as np

_ROUNDS = flags.DEFINE_integer("rounds", 1000, "Rounds per runtime.")
_WARMUP = flags.DEFINE_integer("warmup", 50, "Rounds left out of the slope.")
_EXECUTION = flags.DEFINE_enum(
    "client_execution", "tff", ["tff", "in_process"],
    "Where the clients train: tff (in the worker, which then does most of the work and "
    "grows fastest) or in_process (the experiments' default; only aggregation in the worker).")
_OUT = flags.DEFINE_string("out", os.path.join(os.path.dirname(__file__), "results",
                                               "worker_memory.json"), "Result file.")


def slope_mib_per_round(rss: list[float], warmup: int) -> float:
  """Least-squares slope of RSS over the rounds after ``warmup``."""
  y = np.asarray(rss[warmup:], float)
  return float(np.polyfit(np.arange(y.size), y, 1)[0]) if y.size > 1 else 0.0


def main(argv):
  del argv
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  from datasets import synthetic  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  from tff_idp.idp_fedavg.process import build_idp_fedavg_driver_process  # pylint: disable=g-import-not-at-top

  num_clients, cohort = 500, 20
  train, _, _ = synthetic.load_synthetic(
      synthetic.SyntheticConfig(num_clients=num_clients, iid=True))
  ids = train.client_ids
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 60], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(lambda: models.build_logistic_regression(60, 10), spec)
  process = build_idp_fedavg_driver_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), noise_multiplier=1.0,
      expected_clients_per_round=cohort, aggregator_kwargs=dict(noise_seed=0),
      client_execution=_EXECUTION.value)
  empty = train.create_tf_dataset_for_client(ids[0]).take(0).batch(16)
  runtimes = {
      "glibc": runtime.ExecutionRuntime(worker_allocator="glibc", recycle_worker_mib=None,
                                        install_signal_handlers=False),
      "recycled": runtime.ExecutionRuntime(worker_allocator="glibc",
                                           install_signal_handlers=False),
  }
  stack = context_stack_impl.context_stack
  previous = stack.current
  for rt in runtimes.values():
    rt.start()
  try:
    states, rss, seconds = {}, {k: [] for k in runtimes}, {k: 0.0 for k in runtimes}
    for name, rt in runtimes.items():
      stack.set_default_context(rt.context)
      states[name] = process.initialize()
    rng = np.random.default_rng(0)
    for r in range(_ROUNDS.value):
      chosen = np.flatnonzero(rng.random(num_clients) < cohort / num_clients)
      data = [train.create_tf_dataset_for_client(ids[i]).batch(16) for i in chosen]
      data += [empty] * (-(-max(1, len(data)) // 8) * 8 - len(data))
      order = list(runtimes.items())
      for name, rt in (order if r % 2 == 0 else order[::-1]):
        stack.set_default_context(rt.context)
        t0 = time.perf_counter()
        states[name] = process.next(states[name], data).state
        rt.maybe_recycle_worker()  # what RoundDriver does between rounds
        seconds[name] += time.perf_counter() - t0
        rss[name].append(runtime.rss_mib(rt.worker_pid))
      if (r + 1) % 100 == 0:
        print(f"round {r + 1}: " + ", ".join(
            f"{k} {rss[k][-1]:.0f} MiB, {seconds[k]:.0f} s" for k in runtimes), flush=True)
  finally:
    for rt in runtimes.values():
      rt.close()
    stack.set_default_context(previous)
  warm = _WARMUP.value
  result = {
      "rounds": _ROUNDS.value, "warmup": warm,
      "recycle_worker_mib": runtimes["recycled"].recycle_worker_mib,
      "recycles": runtimes["recycled"].worker_recycles,
      **{name: {"slope_mib_per_round": slope_mib_per_round(rss[name], warm),
                "rss_mib_after_warmup": rss[name][warm], "rss_mib_max": max(rss[name]),
                "rss_mib_end": rss[name][-1], "seconds": seconds[name]}
         for name in runtimes},
      "recycled_over_glibc_time": seconds["recycled"] / seconds["glibc"],
  }
  os.makedirs(os.path.dirname(_OUT.value), exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(result, f, indent=1)
  print("| worker | RSS slope (MiB/round) | RSS after warm-up → max → end (MiB) | total s |\n"
        "|---|---|---|---|")
  for name in runtimes:
    r = result[name]
    print(f"| {name} | {r['slope_mib_per_round']:.3f} | {r['rss_mib_after_warmup']:.0f} → "
          f"{r['rss_mib_max']:.0f} → {r['rss_mib_end']:.0f} | {r['seconds']:.1f} |")
  print(f"\nrecycled / glibc time: {result['recycled_over_glibc_time']:.3f} "
        f"({result['recycles']} recycles at +{result['recycle_worker_mib']:g} MiB)")


if __name__ == "__main__":
  # Keras must be imported before absl's app.run (see tff_idp.cli.launch).
  import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  app.run(main)
