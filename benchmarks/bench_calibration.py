"""Calibration speed: tff_idp's Alg. 1 solver vs a straightforward implementation.

Run from the repository root:

    python -m benchmarks.bench_calibration

Setting: the IDP-FedAvg paper's FMNIST experiment (ε = 1, 2, 3 for 34/43/23% of
N = 3383 clients, δ = 1e-4, 420 rounds, c = 30 expected clients per round).

Methods, timed side by side in one process:
  (a) tff_idp get_group_sampling_rates, RDP: one warm-up call, then median of 5.
  (b) tff_idp get_group_sampling_rates, PLD: one call.
  (c) baseline: the paper's Alg. 1 as written. σ starts at
      getNoise(ε_1, δ, c/N, I) and shrinks by s = 0.99 per step until
      Σ_p |G_p| q_p <= c, with every q_p = getSampleRate(ε_p, δ, σ, I) found by
      bisection to 1e-6 relative, and every ε evaluation building a fresh
      dp-accounting RdpAccountant. One call.

Prints a markdown table and writes the same numbers to
benchmarks/results/calibration.json.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import time
from pathlib import Path

import dp_accounting
import numpy as np

from tff_idp.accounting.client import sample
from tff_idp.accounting import validation

EPSILONS = [1.0, 2.0, 3.0]
RATIOS = [0.34, 0.43, 0.23]
NUM_CLIENTS = 3383
DELTA = 1e-4
ROUNDS = 420
CLIENTS_PER_ROUND = 30
RESULTS = Path(__file__).resolve().parent / "results" / "calibration.json"


# ---------------------------------------------------------------------------
# Baseline: Alg. 1 with nested bisection, a fresh RdpAccountant per evaluation
# ---------------------------------------------------------------------------

class Baseline:
  """The paper's Alg. 1, implemented the obvious way."""

  def __init__(self, shrink: float = 0.99, rtol: float = 1e-6):
    self.shrink = shrink
    self.rtol = rtol
    self.evaluations = 0

  def epsilon(self, q: float, sigma: float, rounds: int, delta: float) -> float:
    self.evaluations += 1
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
        rounds))
    return acc.get_epsilon(delta)

  def get_noise(self, eps: float, delta: float, q: float, rounds: int) -> float:
    """Smallest σ with ε(q, σ) <= eps, by bisection (returns the feasible end)."""
    lo, hi = 0.0, 1.0
    while self.epsilon(q, hi, rounds, delta) > eps:
      lo, hi = hi, 2 * hi
    while hi - lo > self.rtol * hi:
      mid = 0.5 * (lo + hi)
      if self.epsilon(q, mid, rounds, delta) > eps:
        lo = mid
      else:
        hi = mid
    return hi

  def get_sample_rate(self, eps: float, delta: float, sigma: float,
                      rounds: int) -> float:
    """Largest q in (0, 1] with ε(q, σ) <= eps, by bisection (feasible end)."""
    if self.epsilon(1.0, sigma, rounds, delta) <= eps:
      return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > self.rtol * max(lo, 1e-12):
      mid = 0.5 * (lo + hi)
      if self.epsilon(mid, sigma, rounds, delta) > eps:
        hi = mid
      else:
        lo = mid
    return lo

  def group_sampling_rates(self, epsilons, sizes, delta, rounds, c):
    sizes = np.asarray(sizes)
    q = c / sizes.sum()
    sigma = self.get_noise(min(epsilons), delta, q, rounds)
    rates = [self.get_sample_rate(e, delta, sigma, rounds) for e in epsilons]
    steps = 0
    while float(sizes @ np.asarray(rates)) > c:
      sigma *= self.shrink
      rates = [self.get_sample_rate(e, delta, sigma, rounds) for e in epsilons]
      steps += 1
    return sigma, rates, steps


# ---------------------------------------------------------------------------


def _row(method, seconds, sigma, rates, sizes, **extra):
  return dict(method=method, seconds=seconds, sigma=float(sigma),
              sampling_rates=[float(q) for q in rates],
              expected_clients_per_round=float(np.dot(sizes, rates)), **extra)


def run() -> dict:
  sizes = validation.group_sizes_from_ratios(RATIOS, NUM_CLIENTS)
  args = (EPSILONS, sizes, DELTA, ROUNDS, CLIENTS_PER_ROUND)
  rows = []

  # (a) RDP, warm.
  sample.get_group_sampling_rates(*args, accountant="rdp")
  times = []
  for _ in range(5):
    start = time.perf_counter()
    cal = sample.get_group_sampling_rates(*args, accountant="rdp")
    times.append(time.perf_counter() - start)
  rows.append(_row("tff_idp get_group_sampling_rates (RDP, warm, median of 5)",
                   statistics.median(times), cal.noise_multiplier,
                   cal.sampling_rates, sizes, runs=times,
                   achieved_epsilons=list(cal.achieved_epsilons)))

  # (b) PLD, one call.
  start = time.perf_counter()
  cal = sample.get_group_sampling_rates(*args, accountant="pld")
  rows.append(_row("tff_idp get_group_sampling_rates (PLD, 1 run)",
                   time.perf_counter() - start, cal.noise_multiplier,
                   cal.sampling_rates, sizes,
                   achieved_epsilons=list(cal.achieved_epsilons)))

  # (c) Baseline, one call.
  base = Baseline()
  start = time.perf_counter()
  sigma, rates, steps = base.group_sampling_rates(*args)
  seconds = time.perf_counter() - start
  achieved = [base.epsilon(q, sigma, ROUNDS, DELTA) for q in rates]
  rows.append(_row("baseline Alg. 1 (s=0.99, bisection 1e-6, fresh RdpAccountant, 1 run)",
                   seconds, sigma, rates, sizes, achieved_epsilons=achieved,
                   accountant_evaluations=base.evaluations, outer_steps=steps))

  for r in rows:
    r["speedup_vs_baseline"] = seconds / r["seconds"]
  return dict(
      setting=dict(epsilons=EPSILONS, ratios=RATIOS, group_sizes=[int(n) for n in sizes],
                   num_clients=NUM_CLIENTS, delta=DELTA, rounds=ROUNDS,
                   clients_per_round=CLIENTS_PER_ROUND),
      machine=dict(python=platform.python_version(), processor=platform.processor(),
                   cpus=os.cpu_count(), load_average=list(os.getloadavg()),
                   dp_accounting=importlib.metadata.version("dp-accounting")),
      results=rows)


def markdown(report: dict) -> str:
  lines = ["| method | seconds | speed-up vs baseline | σ | q per group "
           "| expected clients/round |",
           "|---|---:|---:|---:|---|---:|"]
  for r in report["results"]:
    q = ", ".join(f"{x:.6f}" for x in r["sampling_rates"])
    lines.append(f"| {r['method']} | {r['seconds']:.3f} | {r['speedup_vs_baseline']:.1f}x "
                 f"| {r['sigma']:.6f} | {q} | {r['expected_clients_per_round']:.3f} |")
  return "\n".join(lines)


def main() -> None:
  report = run()
  print(markdown(report))
  RESULTS.parent.mkdir(parents=True, exist_ok=True)
  RESULTS.write_text(json.dumps(report, indent=2) + "\n")
  print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
  main()
