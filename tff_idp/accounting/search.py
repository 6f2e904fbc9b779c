"""Monotone root search that always returns the *feasible* side.

Calibration must never overshoot a budget, so a plain root finder (which may
land a hair on the wrong side of the target) is not enough. This module keeps a
bracket ``[lo, hi]`` with ``g(lo) <= target < g(hi)`` and returns ``lo``.
Steps are regula falsi (exact where g is linear in log x, fast on the smooth
ε curves) with a bisection every third step (robust where g jumps to inf or
regula falsi stalls on one side), in log space.
"""
from __future__ import annotations

import math
from typing import Callable


def largest_feasible(g: Callable[[float], float], lo: float, hi: float,
                     target: float, *, x_rtol: float = 1e-6,
                     f_rtol: float = 1e-6, max_evals: int = 200) -> float:
  """Largest x in [lo, hi] (up to tolerance) with g(x) <= target; g increasing.

  Every third step bisects the log-bracket, so it shrinks below ``x_rtol``
  within 3·⌈log2(log(hi/lo)/x_rtol)⌉ steps whatever g does. The Illinois
  modification and a clamp of the regula falsi point were measured not to
  save accountant calls on SAMPLE's searches (issue 32) and were removed.

  Args:
    g: increasing function of x > 0.
    lo: a point with g(lo) <= target.
    hi: a point with g(hi) > target, hi > lo.
    target: the bound that must hold at the returned point.
    x_rtol: stop when log(hi) − log(lo) <= x_rtol.
    f_rtol: stop when target − g(lo) <= f_rtol · |target|.
    max_evals: at most this many evaluations of g besides the two ends.
  """
  a, b = math.log(lo), math.log(hi)
  fa, fb = g(lo) - target, g(hi) - target
  if fa > 0 or fb <= 0:
    raise ValueError("largest_feasible needs g(lo) <= target < g(hi)")
  for step in range(max_evals):
    if b - a <= x_rtol or -fa <= f_rtol * abs(target):
      break
    if step % 3 == 2 or not math.isfinite(fb):
      c = 0.5 * (a + b)
    else:
      c = b - fb * (b - a) / (fb - fa)
    fc = g(math.exp(c)) - target
    if fc <= 0:
      a, fa = c, fc
    else:
      b, fb = c, fc
  return math.exp(a)


def secant_on_log(f: Callable[[float], "float | None"], x0: float, f0: float, target: float,
                  *, max_steps: int, tol: float, first_step: float = 0.02,
                  max_step: float = 0.3) -> tuple[float, list[tuple[float, float]]]:
  """Secant steps towards f(x) = target from a known point (x0, f0 = f(x0)).

  The one root-finding loop that SAMPLE's solver uses where each evaluation
  is costly (a refined search ε, or a fully verified set of rates): a first
  step of at most ``first_step`` gives the secant a local slope, later steps
  are clamped to ``max_step``, and the loop stops once |f − target| ≤ ``tol``,
  when f stops changing, after ``max_steps`` evaluations, or when ``f``
  returns None (the trial point is infeasible).

  Returns ``(x_next, trials)``: the point after the last step (the converged
  point on convergence) and every evaluated ``(x, f(x))``, in order.
  """
  x1 = x0 + max(-first_step, min(first_step, (target - f0) / 2.0))
  trials: list[tuple[float, float]] = []
  for _ in range(max_steps):
    f1 = f(x1)
    if f1 is None:
      break
    trials.append((x1, f1))
    if abs(f1 - target) <= tol or f1 == f0:
      break
    step = (target - f1) * (x1 - x0) / (f1 - f0)
    x0, f0, x1 = x1, f1, x1 + max(-max_step, min(max_step, step))
  return x1, trials
