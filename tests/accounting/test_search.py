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


_CURVES = [  # (g increasing, lo, hi, target, the exact root g(root) = target)
    (lambda v: v * v, 0.1, 10.0, 4.0, 2.0),
    (math.exp, 0.01, 50.0, 1e6, math.log(1e6)),
    (math.log1p, 1e-3, 1e3, 2.0, math.expm1(2.0)),
    (lambda v: v if v < 3 else math.inf, 0.1, 10.0, 2.5, 2.5),  # jumps to inf (bisection)
    (lambda v: 1 - math.exp(-v), 1e-4, 100.0, 0.5, math.log(2.0)),
    (lambda v: v ** 3, 1e-4, 1.0, 1e-3, 0.1),  # a small target: f_rtol is relative to it
]


@pytest.mark.parametrize("case", range(len(_CURVES)))
def test_largest_feasible_is_feasible_tight_and_needs_few_evaluations(case):
  """The returned x satisfies g(x) <= target, is within tolerance of the root, in <= 40 calls.

  Property: on smooth, steep, concave and jumping increasing curves, the
  search returns a feasible point whose log-distance to the exact root is at
  most x_rtol (or whose gap target − g(x) is at most f_rtol·target), using
  at most 40 evaluations of g: each evaluation is an accountant call in
  SAMPLE, and the issue-32 bound on accountant calls depends on it (the
  current code needs 10 to 30 here). Bugs caught: a broken regula falsi or
  Illinois step (wrong sign, wrong slope, no halving of the stale end, the
  bisection schedule or clamp changed), which either stops short of the
  root or spends up to max_evals calls, and a stopping test that ends early.
  """
  g, lo, hi, target, root = _CURVES[case]
  calls = []

  def counted(v):
    calls.append(v)
    return g(v)

  x = search.largest_feasible(counted, lo, hi, target)
  assert g(x) <= target
  assert math.log(root) - math.log(x) <= 1e-6 or target - g(x) <= 1e-6 * target
  assert len(calls) <= 40, len(calls)


def test_largest_feasible_checks_its_bracket_exactly():
  """The bracket must satisfy g(lo) <= target < g(hi), with both edges exact.

  g(lo) == target is accepted (lo is returned: it is feasible and no point
  above it can be shown feasible); g(lo) a little above target, g(hi) == target
  are refused; g(hi) a little above target is accepted. Bugs caught: the
  edge tests off by one (``>=``/``<`` for ``>``/``<=``, or against 1 instead of 0),
  which accept an infeasible lo (a calibration returned over budget) or
  refuse a valid bracket.
  """
  ident = lambda v: v
  assert search.largest_feasible(ident, 2.0, 8.0, 2.0) == pytest.approx(2.0, rel=1e-12)
  with pytest.raises(ValueError, match="g\\(lo\\) <= target < g\\(hi\\)"):
    search.largest_feasible(ident, 2.5, 8.0, 2.0)
  with pytest.raises(ValueError, match="g\\(lo\\) <= target < g\\(hi\\)"):
    search.largest_feasible(ident, 1.0, 2.0, 2.0)
  x = search.largest_feasible(ident, 1.0, 2.5, 2.0)
  assert 2.0 * (1 - 1e-6) <= x <= 2.0
