"""The shared root-finding helpers of tff_idp.accounting.search."""
import math

import pytest

from tff_idp.accounting import search


def test_largest_feasible_stays_on_the_feasible_side():
  x = search.largest_feasible(lambda v: v * v, 0.1, 10.0, 4.0)
  assert x * x <= 4.0 and x == pytest.approx(2.0, rel=1e-5)


def test_secant_on_log_converges_on_a_smooth_function():
  # f(x) = 3x: from x0 = 0 towards 1.5, the secant is exact after its first step.
  x, trials = search.secant_on_log(lambda v: 3.0 * v, 0.0, 0.0, 1.5, max_steps=8, tol=1e-9)
  assert x == pytest.approx(0.5)
  assert trials[0] == (pytest.approx(0.02), pytest.approx(0.06))   # first step ≤ 0.02
  assert abs(trials[-1][1] - 1.5) <= 1e-9


def test_secant_on_log_clamps_steps_and_stops_after_max_steps():
  x, trials = search.secant_on_log(lambda v: math.exp(v), 0.0, 1.0, math.exp(5.0),
                                   max_steps=3, tol=1e-9)
  assert len(trials) == 3
  steps = [b[0] - a[0] for a, b in zip(trials, trials[1:])]
  assert all(abs(s) <= 0.3 + 1e-12 for s in steps)
  assert x <= trials[-1][0] + 0.3 + 1e-12


def test_secant_on_log_stops_when_the_function_reports_infeasible():
  calls = []

  def f(v):
    calls.append(v)
    return None if len(calls) == 2 else v

  _, trials = search.secant_on_log(f, 0.0, 0.0, 1.0, max_steps=8, tol=1e-9)
  assert len(calls) == 2 and len(trials) == 1
