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


def _counted(g):
  calls = []

  def f(v):
    calls.append(v)
    return g(v)

  return f, calls


def test_largest_feasible_stops_at_once_when_either_tolerance_already_holds():
  """The stopping rule is "bracket within x_rtol OR g(lo) within f_rtol of target", inclusive.

  Property: each accountant call is costly, so a bracket that already meets
  either tolerance (exactly at its edge, as documented: ``<=``) costs no call
  beyond the two bracket checks, and lo is returned. Bugs caught: the two
  tests joined by ``and`` (the search goes on although g(lo) is within
  f_rtol), and either edge made strict (``<``), which spends calls on a
  bracket that is already within tolerance.
  """
  ident = lambda v: v
  # g(lo) within f_rtol of target (exactly at the edge: 1 − 0.5 == 0.5·1), bracket wide.
  f, calls = _counted(ident)
  assert search.largest_feasible(f, 0.5, 100.0, 1.0, f_rtol=0.5) == 0.5
  assert len(calls) == 2
  # Bracket exactly x_rtol wide in log space, g(lo) far below target.
  lo, hi = 0.1, 0.1 * math.e ** 1e-3
  f, calls = _counted(lambda v: 0.0 if v < hi else 1.0)
  x_rtol = math.log(hi) - math.log(lo)
  assert search.largest_feasible(f, lo, hi, 0.5, x_rtol=x_rtol) == pytest.approx(lo, rel=1e-15)
  assert len(calls) == 2


def test_largest_feasible_counts_a_point_exactly_at_the_target_as_feasible():
  """g(x) == target is within budget (ε <= target), so the search keeps it as its lo.

  g is 0 below 1, exactly the target on [1, 4), and infinite from 4 on (the
  cliff of dp-accounting's ε = 0 regime). Property: the returned point
  satisfies g(x) <= target and is on the plateau (g(x) == target), not below
  it. Bug caught: ``fc < 0`` for ``fc <= 0``, which treats a point at the
  budget edge as over budget and returns a rate below 1 that wastes the
  whole plateau (here up to 4x the sampling rate).
  """
  target = 2.0
  g = lambda v: 0.0 if v < 1.0 else (target if v < 4.0 else math.inf)
  x = search.largest_feasible(g, 0.01, 100.0, target)
  assert g(x) == target
  assert 1.0 <= x < 4.0


def test_secant_on_log_steps_towards_the_target_from_above():
  """From a point above the target, the first step goes down (at most first_step).

  Property: f(x) = 3x from x0 = 1 (f0 = 3) towards 1.5: the first trial is
  x0 − 0.02, and the secant then lands on the root 0.5. Bugs caught: the first
  step forced upwards (``max(+first_step, ...)``) or its direction taken from
  target + f0 instead of target − f0, which walk away from the target.
  """
  x, trials = search.secant_on_log(lambda v: 3.0 * v, 1.0, 3.0, 1.5, max_steps=8, tol=1e-9)
  assert trials[0][0] == pytest.approx(0.98)
  assert x == pytest.approx(0.5)


def test_secant_on_log_stops_as_soon_as_it_is_within_tol():
  """Each evaluation is costly (a verified calibration in SAMPLE's stage 3): the loop stops
  at the first trial within tol of the target, the edge included (|f − target| == tol).

  Bugs caught: the convergence test joined to the stagnation test by ``and``
  or compared with target's sign flipped (one more, wasted evaluation at the
  root), or made strict (``<``) so a trial exactly tol away is not accepted.
  """
  _, trials = search.secant_on_log(lambda v: 3.0 * v, 0.0, 0.0, 1.5, max_steps=8, tol=1e-9,
                                   max_step=1.0)
  assert len(trials) == 2  # the first step, then the exact secant step onto the root
  tol = abs(3.0 * 0.02 - 1.5)  # the first trial's distance to the target, exactly
  _, trials = search.secant_on_log(lambda v: 3.0 * v, 0.0, 0.0, 1.5, max_steps=8, tol=tol)
  assert len(trials) == 1


def test_regula_falsi_is_exact_where_g_is_linear_in_log_x():
  """On g = log (a straight line in the search's log space) the first step lands on the root.

  Property: the regula falsi point of the bracket's two ends is the root of
  the chord, which is g's root when g is linear in log x, so the search
  needs one evaluation besides the two ends, and returns e^target to float
  precision. Bugs caught: a wrong secant formula (sign, slope, the end it
  starts from) or a bisection taken where a regula falsi step is due.
  """
  calls = []

  def counted(v):
    calls.append(v)
    return math.log(v)

  x = search.largest_feasible(counted, 1.0, 1e6, 5.0)
  assert len(calls) == 3
  assert x == pytest.approx(math.exp(5.0), rel=1e-12)


@pytest.mark.parametrize("power, hi, target", [(20, 1e4, 3.0), (50, 1e2, 7.0), (200, 10.0, 2.0)])
def test_the_bracket_shrinks_within_the_bisection_bound(power, hi, target):
  """With f_rtol = 0, the log-bracket reaches x_rtol within 3·⌈log2(width/x_rtol)⌉ steps.

  Property: every third step bisects, so however badly regula falsi does
  (here on x^power, which is steeply convex in log x, so its regula falsi
  points creep up from the feasible side), the bracket halves at least every
  three evaluations, and the result is within x_rtol of the root. Bugs
  caught: a bisection schedule that is sparser or never reached, a
  bisection that does not halve, a stopping test on the wrong quantity.
  """
  lo, x_rtol = 1e-3, 1e-9
  calls = []

  def counted(v):
    calls.append(v)
    return v ** power

  x = search.largest_feasible(counted, lo, hi, target, x_rtol=x_rtol, f_rtol=0.0)
  root = target ** (1.0 / power)
  assert x ** power <= target
  assert 0.0 <= math.log(root) - math.log(x) <= x_rtol
  assert len(calls) <= 2 + 3 * math.ceil(math.log2(math.log(hi / lo) / x_rtol))


def test_the_bisection_bound_holds_where_regula_falsi_makes_no_progress():
  """A plateau just under the target, then a cliff: only the bisections shrink the bracket.

  g = target − 1e-12 below the root and target + 10⁶ + (x − root) above it:
  every regula falsi point lands a hair above lo (fa ≈ 0, fb ≈ 10⁶), so the
  bracket shrinks only by its bisections, and the documented bound
  2 + 3·⌈log2(log(hi/lo)/x_rtol)⌉ evaluations is reached exactly (104 here).
  Bug caught: a sparser bisection schedule (every fourth step needs 137).
  """
  lo, hi, x_rtol, root = 1e-3, 1e3, 1e-9, 2.0
  calls = []

  def plateau_then_cliff(v):
    calls.append(v)
    return 1.0 - 1e-12 if v < root else 1.0 + 1e6 + (v - root)

  x = search.largest_feasible(plateau_then_cliff, lo, hi, 1.0, x_rtol=x_rtol, f_rtol=0.0)
  assert 0.0 <= math.log(root) - math.log(x) <= x_rtol
  assert len(calls) <= 2 + 3 * math.ceil(math.log2(math.log(hi / lo) / x_rtol))
