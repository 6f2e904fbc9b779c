"""Does a varying cohort size (Poisson sampling) make TFF slow down or grow?

TFF builds and caches an executor per cardinality. Poisson sampling changes
the cohort size every round, so this runs ≥ 200 rounds of DP-FedAvg with
(a) a fixed cohort, (b) Poisson sampling of the same mean size and (c)
Poisson sampling padded to multiples of 8 (what ``RoundDriver`` does), each
on a fresh ``ExecutionRuntime`` (its own TFF worker) in one Python process,
and reports per-round time and resident memory (Python process + TFF worker)
early vs late in the run, as ratios. (a)-(c) train the clients as TFF client
computations (``client_execution="tff"``); (d) ``poisson_padded_in_process``
is (c) with the experiments' default, in-process client training (issue 14).

The TFF worker alone is also reported after warm-up: its mean RSS over
rounds 40-60 against the last 20 rounds (``worker_flatness``, target ≤ 1.05)
and the growth per round between those windows (``worker_mib_per_round``).
``--before_fix`` adds the padded run on a worker with glibc's default malloc
arenas and no idle-executor eviction (the runtime before issue 9's fix).

  python -m benchmarks.bench_cohort_variation [--rounds=240] [--before_fix]
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time

import numpy as np


def _rss_mib(pid: int) -> float:
  with open(f"/proc/{pid}/status") as f:
    for line in f:
      if line.startswith("VmRSS:"):
        return int(line.split()[1]) / 1024.0
  return float("nan")


WARM_WINDOW = (40, 60)  # worker RSS after warm-up, compared with the last 20 rounds


def _worker_flatness(rss_worker: list[float]) -> dict:
  """Worker RSS after warm-up (rounds 40-60) vs the last 20 rounds."""
  lo, hi = WARM_WINDOW
  n = len(rss_worker)
  warm, late = float(np.mean(rss_worker[lo:hi])), float(np.mean(rss_worker[-20:]))
  distance = (n - 10) - (lo + hi) / 2  # rounds between the windows' centres
  return {
      "worker_rss_mib_rounds_40_60": warm,
      "worker_rss_mib_last_20": late,
      "worker_flatness": late / warm,
      "worker_mib_per_round": (late - warm) / distance,
      "worker_rss_mib_max": float(np.max(rss_worker)),
  }


def main(rounds: int = 240, before_fix: bool = False) -> dict:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from datasets import synthetic  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.execution import runtime
  from tff_idp.idp_fedavg.process import build_idp_fedavg_driver_process  # pylint: disable=g-import-not-at-top

  num_clients, cohort = 1000, 20
  train, _, _ = synthetic.load_synthetic(
      synthetic.SyntheticConfig(num_clients=num_clients, iid=True))
  ids = train.client_ids
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 60], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(lambda: models.build_logistic_regression(60, 10), spec)
  results = {}
  build = lambda execution: build_idp_fedavg_driver_process(  # noqa: E731
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
      noise_multiplier=1.0, expected_clients_per_round=cohort,
      aggregator_kwargs=dict(noise_seed=0), client_execution=execution)
  processes = {"tff": build("tff"), "in_process": build("in_process")}
  empty = train.create_tf_dataset_for_client(ids[0]).take(0).batch(16)
  modes = ["fixed", "poisson", "poisson_padded", "poisson_padded_in_process"]
  if before_fix:
    modes.append("poisson_padded_before_fix")
  for mode in modes:
    # Pre-fix worker: glibc malloc with default arenas, executors kept until LRU-evicted.
    kwargs = (dict(worker_allocator="glibc", malloc_arena_max=None, executor_idle_calls=None)
              if mode.endswith("before_fix") else {})
    process = processes["in_process" if mode.endswith("in_process") else "tff"]
    with runtime.execution_context(**kwargs) as rt:
      rng = np.random.default_rng(0)
      state = process.initialize()
      times, sizes, rss, rss_worker = [], [], [], []
      for r in range(rounds):
        if mode.startswith("poisson"):
          chosen = np.flatnonzero(rng.random(num_clients) < cohort / num_clients)
        else:
          chosen = rng.choice(num_clients, cohort, replace=False)
        data = [train.create_tf_dataset_for_client(ids[i]).batch(16) for i in chosen]
        if mode.startswith("poisson_padded"):  # what RoundDriver(padding_input_fn=...) does
          data += [empty] * (-(-max(1, len(data)) // 8) * 8 - len(data))
        t0 = time.perf_counter()
        state = process.next(state, data).state
        times.append(time.perf_counter() - t0)
        sizes.append(len(chosen))
        rss_worker.append(_rss_mib(rt.worker_pid))
        rss.append(_rss_mib(os.getpid()) + rss_worker[-1])
      window = max(20, rounds // 10)
      early_t, late_t = np.median(times[10:10 + window]), np.median(times[-window:])
      early_m, late_m = np.mean(rss[10:10 + window]), np.mean(rss[-window:])
      results[mode] = {
          "rounds": rounds,
          "distinct_cohort_sizes": len(set(sizes)),
          "median_round_s_early": float(early_t),
          "median_round_s_late": float(late_t),
          "late_over_early_time": float(late_t / early_t),
          "rss_mib_early": float(early_m),
          "rss_mib_late": float(late_m),
          "late_over_early_rss": float(late_m / early_m),
          "worker_rss_mib_early": float(np.mean(rss_worker[10:10 + window])),
          "worker_rss_mib_late": float(np.mean(rss_worker[-window:])),
          # After the executor cache has filled, memory should be flat:
          "rss_mib_at_quarters": [float(rss[i]) for i in
                                  (rounds // 4 - 1, rounds // 2 - 1, 3 * rounds // 4 - 1,
                                   rounds - 1)],
          "second_half_rss_growth": float(rss[-1] / rss[rounds // 2 - 1]),
          "second_half_time_ratio": float(np.median(times[-window:]) /
                                          np.median(times[rounds // 2 - window:rounds // 2])),
          **_worker_flatness(rss_worker),
      }
  results["poisson_over_fixed_late_time"] = (
      results["poisson"]["median_round_s_late"] / results["fixed"]["median_round_s_late"])
  results["padded_over_fixed_late_time"] = (
      results["poisson_padded"]["median_round_s_late"]
      / results["fixed"]["median_round_s_late"])
  return results


def _table(res: dict) -> str:
  lines = ["| sampling | rounds | distinct cohort sizes | round time late/early | "
           "RSS late/early (MiB) | RSS at 1/4, 1/2, 3/4, end (MiB) | RSS end / half-way | "
           "round time end / half-way | worker RSS rounds 40-60 → last 20 (MiB) | "
           "worker flatness | worker MiB/round |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for mode in [m for m in res if isinstance(res[m], dict)]:
    r = res[mode]
    lines.append(
        f"| {mode} | {r['rounds']} | {r['distinct_cohort_sizes']} | "
        f"{r['median_round_s_late']:.3f}/{r['median_round_s_early']:.3f} s = "
        f"{r['late_over_early_time']:.2f}× | {r['rss_mib_late']:.0f}/"
        f"{r['rss_mib_early']:.0f} = {r['late_over_early_rss']:.3f}× | "
        f"{', '.join(f'{m:.0f}' for m in r['rss_mib_at_quarters'])} | "
        f"{r['second_half_rss_growth']:.3f}× | {r['second_half_time_ratio']:.2f}× | "
        f"{r['worker_rss_mib_rounds_40_60']:.0f} → {r['worker_rss_mib_last_20']:.0f} | "
        f"{r['worker_flatness']:.3f}× | {r['worker_mib_per_round']:+.3f} |")
  lines.append(f"\nround time (late) vs fixed: Poisson "
               f"{res['poisson_over_fixed_late_time']:.2f}×, Poisson padded to "
               f"multiples of 8: {res['padded_over_fixed_late_time']:.2f}×")
  return "\n".join(lines)


if __name__ == "__main__":
  n, before = 240, False
  for arg in sys.argv[1:]:
    if arg.startswith("--rounds="):
      n = int(arg.split("=", 1)[1])
    elif arg == "--before_fix":
      before = True
  if n < 80:
    raise SystemExit("--rounds must be >= 80 (worker RSS after warm-up: rounds 40-60 "
                     "vs the last 20).")
  res = main(n, before)
  os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
  with open(os.path.join(os.path.dirname(__file__), "results", "cohort_variation.json"),
            "w") as f:
    json.dump(res, f, indent=1)
  print(_table(res))
