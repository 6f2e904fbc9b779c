"""Simulation-CurveFitting (rPDP-FL Alg. 2): fit quality, the inverse F, and robustness."""
import math
import warnings

import numpy as np
import pytest
from scipy import optimize

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record import scf
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams

FIG5 = dict(noise_multiplier=1.0, local_steps=5, rounds=20, client_rate=0.5, delta=1e-3)


def params(**overrides):
  return TwoStageParams(**dict(FIG5, **overrides))


@pytest.fixture(scope="module")
def fig5_fit():
  return scf.fit_scf(params())


def r_squared(pred, y):
  return 1.0 - np.sum((pred - y) ** 2) / np.sum((y - y.mean()) ** 2)


def test_simulation_is_theorem1_on_the_grid():
  q, eps = scf.simulate(params())
  np.testing.assert_array_equal(q, scf.default_q_grid())
  np.testing.assert_array_equal(eps, rdp_two_stage.epsilon(q, params()))
  assert q[0] > 0 and q[-1] == 1.0 and np.all(np.diff(q) > 0)
  assert np.all(np.diff(eps) >= 0)


def test_r_squared_above_099_at_fig5(fig5_fit):
  """The paper's claim (Fig. 5 right, R² > 99%) at T=20, τ=5, λ=0.5, σ=1, δ=1e-3."""
  assert fig5_fit.r_squared > 0.99
  assert fig5_fit.r_squared == pytest.approx(
      r_squared(fig5_fit.predict(fig5_fit.q_grid), fig5_fit.epsilon_grid), rel=1e-12)
  assert fig5_fit.a > 0
  assert fig5_fit.epsilon_at_one == pytest.approx(rdp_two_stage.epsilon(1.0, params()), rel=1e-12)


def test_fit_predicts_the_simulated_points(fig5_fit):
  q, eps = fig5_fit.q_grid, fig5_fit.epsilon_grid
  pred = fig5_fit.predict(q)
  # Within 5% of the curve's range everywhere (max 3.7 of 91.8 here), and
  # within 5% of ε*(q) itself on the upper half q >= 0.5 (max 4.1%). The
  # relative error at small q is large: that is what the exact re-check in
  # record_calibration is for.
  assert np.max(np.abs(pred - eps)) < 0.05 * fig5_fit.epsilon_at_one
  upper = q >= 0.5
  np.testing.assert_allclose(pred[upper], eps[upper], rtol=0.05)
  # On fresh rates between the grid points too.
  fresh = np.linspace(0.013, 0.987, 37)
  assert np.max(np.abs(fig5_fit.predict(fresh) - rdp_two_stage.epsilon(fresh, params()))) \
      < 0.05 * fig5_fit.epsilon_at_one
  # The exponential is a real model: a straight line fits clearly worse.
  line = np.polyval(np.polyfit(q, eps, 1), q)
  assert 1 - fig5_fit.r_squared < 0.5 * (1 - r_squared(line, eps))


@pytest.mark.parametrize("sigma", [1.0, 2.0, 5.0])
def test_fig6_fits_for_several_sigmas(sigma):
  fit = scf.fit_scf(params(noise_multiplier=sigma))
  assert fit.r_squared > 0.99


def test_fit_is_at_least_as_good_as_a_direct_curve_fit():
  """Where SciPy's curve_fit from a log-linear start converges, ours is no worse."""
  compared = 0
  for sigma in (0.7, 1.0, 2.0, 5.0, 10.0):
    for tau, t in ((5, 20), (50, 15)):
      p = params(noise_multiplier=sigma, local_steps=tau, rounds=t)
      q, eps = scf.simulate(p)
      slope, intercept = np.polyfit(q[eps > 0], np.log(eps[eps > 0]), 1)
      try:
        with warnings.catch_warnings(), np.errstate(over="ignore"):
          warnings.simplefilter("ignore", optimize.OptimizeWarning)
          direct, _ = optimize.curve_fit(lambda x, a, b, c: np.exp(a * x + b) + c, q, eps,
                                         p0=[slope, intercept, 0.0], maxfev=5000)
      except RuntimeError:
        continue
      fit = scf.fit_scf(p)
      ours = np.sum((fit.predict(q) - eps) ** 2)
      theirs = np.sum((np.exp(direct[0] * q + direct[1]) + direct[2] - eps) ** 2)
      assert ours <= theirs * (1 + 1e-6), (sigma, tau, t)
      compared += 1
  assert compared >= 5


@pytest.mark.parametrize("overrides", [
    dict(noise_multiplier=0.5),                      # Fig. 6's smallest σ: ε*(q) is concave
    dict(noise_multiplier=0.3, client_rate=1.0),
    dict(local_steps=1, rounds=1),
    dict(noise_multiplier=5.0, local_steps=1, rounds=1, client_rate=1.0),
    dict(threat_model="type1", noise_multiplier=0.5),
])
def test_fit_never_raises_on_concave_curves(overrides):
  """Regression: an unbounded curve_fit chased the linear limit a → 0 and raised."""
  p = params(**overrides)
  fit = scf.fit_scf(p)
  q, eps = fit.q_grid, fit.epsilon_grid
  assert scf.A_MIN <= fit.a <= scf.A_MAX
  assert np.all(np.isfinite([fit.a, fit.b, fit.c, fit.r_squared]))
  # As good as the best straight line (the a → 0 limit of the family), up to
  # the slight convexity left at a = A_MIN (R² 0.96825 vs 0.96830 at σ = 0.5).
  line = np.polyval(np.polyfit(q, eps, 1), q)
  assert fit.r_squared >= r_squared(line, eps) - 1e-4
  inv = fit.invert(np.linspace(0.05, 2 * fit.epsilon_at_one, 200))
  defined = inv[~np.isnan(inv)]
  assert defined.size > 100 and np.all(np.diff(defined) >= 0)


# ---------------------------------------------------------------------------
# The inverse F (Alg. 2 line 8)
# ---------------------------------------------------------------------------

def test_invert_is_monotone_and_in_unit_interval(fig5_fit):
  eps = np.concatenate([np.geomspace(1e-3, 1.0, 200), np.linspace(1.0, 200.0, 2000)])
  q = fig5_fit.invert(eps)
  defined = ~np.isnan(q)
  assert defined.sum() > 2000
  # NaN only on a prefix (small budgets), defined from some ε on.
  first = int(np.argmax(defined))
  assert np.all(defined[first:]) and not np.any(defined[:first])
  assert np.all(np.diff(q[defined]) >= 0)
  assert np.all((q[defined] > 0) & (q[defined] <= 1))


def test_invert_projects_to_one_at_and_above_eps_star_one(fig5_fit):
  e1 = fig5_fit.epsilon_at_one
  above = np.array([e1, e1 * (1 + 1e-9), e1 + 1, 10 * e1, 1e6, math.inf])
  np.testing.assert_array_equal(fig5_fit.invert(above), np.ones(above.size))
  assert fig5_fit.invert(e1 * (1 - 1e-3)) < 1.0 or fig5_fit.predict(1.0) < e1 * (1 - 1e-3)
  assert fig5_fit.invert(0.5 * e1) < 1.0


def test_invert_is_nan_where_undefined(fig5_fit):
  """Below f(0) (q ≤ 0) and at or below the asymptote c there is no answer."""
  f0 = float(fig5_fit.predict(0.0))
  # At Fig. 5, f(0) = -0.66 < 0: every positive budget has an answer ...
  assert fig5_fit.c < f0 < 0
  assert not np.any(np.isnan(fig5_fit.invert(np.geomspace(1e-9, 1e3, 50))))
  # ... and the values below f(0) (or c) have none.
  assert np.all(np.isnan(fig5_fit.invert(np.array([f0 - 1e-6, f0 - 1, fig5_fit.c, fig5_fit.c - 5]))))
  fit = scf.ScfFit(a=1.0, b=0.0, c=2.0, r_squared=1.0, epsilon_at_one=10.0,
                   q_grid=np.zeros(0), epsilon_grid=np.zeros(0))
  out = fit.invert(np.array([1.0, 2.0, 2.5, 3.0, 4.0, 12.0]))
  assert np.isnan(out[0]) and np.isnan(out[1]) and np.isnan(out[2])  # ε ≤ c, and q < 0
  assert out[3] == 0.0 or np.isnan(out[3])  # f(0) = 3 exactly: q = 0 is no rate
  assert out[4] == pytest.approx(math.log(2.0))
  assert out[5] == 1.0


def test_invert_round_trips_predict(fig5_fit):
  q = np.linspace(0.05, 0.95, 19)
  pred = fig5_fit.predict(q)
  ok = pred < fig5_fit.epsilon_at_one
  np.testing.assert_allclose(fig5_fit.invert(pred[ok]), q[ok], rtol=1e-9)


def test_invert_alone_can_overspend_small_budgets(fig5_fit):
  """Why calibration re-checks F exactly: some fitted rates exceed their budget."""
  budgets = np.linspace(1.0, 80.0, 80)
  q = fig5_fit.invert(budgets)
  eps = rdp_two_stage.epsilon(q, params())
  assert np.any(eps > budgets * 1.001)


# ---------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------

def test_simulate_rejects_bad_grids():
  with pytest.raises(ValueError, match="at least 4"):
    scf.simulate(params(), np.array([0.1, 0.5, 1.0]))
  with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
    scf.simulate(params(), np.array([0.1, 0.2, 0.5, 1.2]))
  with pytest.raises(ValueError, match="at least 4"):
    scf.simulate(params(), np.ones((2, 3)))


def test_fit_rejects_a_curve_that_is_zero():
  # At σ = 50 with one step, ε*(q) is 0 (KL bound) on the whole small grid.
  p = TwoStageParams(50.0, 1, 1, 1.0, 0.5)
  with pytest.raises(ValueError, match="nothing to fit"):
    scf.fit_scf(p, np.array([1e-4, 2e-4, 3e-4, 4e-4, 5e-4]))


# ---------------------------------------------------------------------------
# Added for the mutation run (issue 32)
# ---------------------------------------------------------------------------

def test_default_grid_is_the_documented_pi():
  """Π = 100 evenly spaced rates on [0.01, 1] plus 20 log-spaced ones on [1e-4, 1e-2).

  Catches a grid that loses its small-q part (where the relative fit error is
  largest), duplicates 0.01, or is not evenly spaced.
  """
  grid = scf.default_q_grid()
  assert grid.size == 120 and np.all(np.diff(grid) > 0)
  small, large = grid[:20], grid[20:]
  assert small[0] == pytest.approx(1e-4, rel=1e-12) and small[-1] < 1e-2
  np.testing.assert_allclose(np.diff(np.log(small)), math.log(10.0) / 10, rtol=1e-9)
  assert large[0] == pytest.approx(0.01, rel=1e-12) and large[-1] == 1.0
  np.testing.assert_allclose(np.diff(large), 0.01, rtol=1e-9)


def test_fit_uses_the_given_grid():
  """fit_scf simulates ε*(q) on the caller's Π, not on the default one.

  Catches a q_grid that is dropped on the way to the simulation.
  """
  grid = np.linspace(0.05, 1.0, 20)
  fit = scf.fit_scf(params(), grid)
  np.testing.assert_array_equal(fit.q_grid, grid)
  np.testing.assert_array_equal(fit.epsilon_grid, rdp_two_stage.epsilon(grid, params()))


def test_three_positive_points_are_enough_to_fit():
  """Three parameters need three points with ε > 0: a 4-point Π with ε*(0) = 0 is fitted.

  Catches a threshold that demands a fourth positive point.
  """
  grid = np.array([0.0, 0.3, 0.6, 1.0])
  fit = scf.fit_scf(params(), grid)
  assert fit.a > 0 and np.all(np.isfinite([fit.a, fit.b, fit.c]))
  eps = np.array([rdp_two_stage.epsilon_reference(q, params()) for q in grid])
  # Three parameters for four points: within 15% of dp-accounting's ε*(q), R² > 0.99.
  np.testing.assert_allclose(fit.predict(grid[1:]), eps[1:], rtol=0.15)
  assert r_squared(fit.predict(grid), eps) > 0.99


@pytest.mark.parametrize("overrides", [dict(noise_multiplier=8.0, local_steps=1, rounds=1),
                                       dict(noise_multiplier=4.0, local_steps=1, rounds=5)])
def test_small_epsilon_curves_fit_and_report_their_r_squared(overrides):
  """Curves with ε*(1) ≈ 0.3 and 1.4 (scale e^b < 1, total variance < 1) fit well, and
  R² is 1 − RSS/TSS recomputed here from the fitted curve.

  Catches a fit that refuses scales e^b ≤ 1 or reports R² = 1 whenever the
  total sum of squares is below 1.
  """
  fit = scf.fit_scf(params(**overrides))
  q, eps = fit.q_grid, fit.epsilon_grid
  pred = np.exp(fit.a * q + fit.b) + fit.c
  assert fit.r_squared == pytest.approx(r_squared(pred, eps), rel=1e-12)
  assert 0.99 < fit.r_squared < 1.0
  # The projected optimum over a fine grid of a, solved here by least squares.
  best = np.inf
  for a in np.geomspace(scf.A_MIN, scf.A_MAX, 4000):
    design = np.stack([np.exp(a * q), np.ones_like(q)], axis=1)
    coef, *_ = np.linalg.lstsq(design, eps, rcond=None)
    if coef[0] > 0:
      best = min(best, float(np.sum((design @ coef - eps) ** 2)))
  assert np.sum((pred - eps) ** 2) <= best * (1 + 1e-6)


@pytest.mark.parametrize("overrides", [dict(), dict(noise_multiplier=0.5),
                                       dict(noise_multiplier=5.0, local_steps=1, rounds=3)])
def test_fit_is_the_least_squares_optimum_of_the_family(overrides):
  """No a on a fine grid (with its exact e^b, c) fits the simulated points better.

  The fit must reach the optimum along a (to 1e-9 of the residual; measured:
  it beats the best of 20,000 grid points by 1e-12 to 3e-6). Catches a search
  over a that stops at the coarse grid, brackets the wrong interval, or
  refines too loosely.
  """
  fit = scf.fit_scf(params(**overrides))
  q, eps = fit.q_grid, fit.epsilon_grid
  ours = float(np.sum((fit.predict(q) - eps) ** 2))
  best = np.inf
  for a in np.geomspace(scf.A_MIN, scf.A_MAX, 4000):
    design = np.stack([np.exp(a * q), np.ones_like(q)], axis=1)
    coef, *_ = np.linalg.lstsq(design, eps, rcond=None)
    if coef[0] > 0:
      best = min(best, float(np.sum((design @ coef - eps) ** 2)))
  assert ours <= best * (1 + 1e-9)


def test_concave_curve_gets_an_increasing_member_of_the_family():
  """On a concave curve (√q) the fit is the near-linear limit with e^b > 0, never a
  decreasing-exponential shape −e^{aq} + c (which has no real b).

  Catches a projection that accepts a negative scale e^b.
  """
  q = np.linspace(0.01, 1.0, 50)
  a, b, c = scf._fit_exponential(q, np.sqrt(q))  # pylint: disable=protected-access
  assert np.all(np.isfinite([a, b, c]))
  assert a == pytest.approx(scf.A_MIN)


def test_invert_on_a_hand_made_curve():
  """F(ε) = (log(ε − c) − b)/a by hand for f(q) = e^q (a = 1, b = c = 0), ε*(1) = 5.

  F(1) = 0 is no rate (NaN); F(2) = log 2; F(4) = log 4 > 1 (the curve is
  below ε*(1) at q = 1) is clamped to 1; budgets at or above ε*(1) get 1.
  Catches keeping q = 0 as a rate and a clamp above 1.
  """
  fit = scf.ScfFit(a=1.0, b=0.0, c=0.0, r_squared=1.0, epsilon_at_one=5.0,
                   q_grid=np.zeros(0), epsilon_grid=np.zeros(0))
  out = fit.invert(np.array([1.0, 2.0, 4.0, 5.0, 7.0]))
  assert np.isnan(out[0])
  assert out[1] == pytest.approx(math.log(2.0), rel=1e-15)
  np.testing.assert_array_equal(out[2:], 1.0)
  np.testing.assert_allclose(fit.predict(np.array([0.0, 1.0])), [1.0, math.e], rtol=1e-15)


def test_fit_and_invert_emit_no_warnings():
  """Fitting (including concave curves) and inverting out-of-range budgets are silent:
  overflow in trial exponentials and log of negatives are expected there and handled.

  Catches a removed warning filter or error-state guard.
  """
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    for overrides in (dict(), dict(noise_multiplier=0.5),
                      dict(noise_multiplier=0.3, client_rate=1.0)):
      fit = scf.fit_scf(params(**overrides))
      out = fit.invert(np.array([-1.0, 0.0, fit.c, fit.c - 1.0, 1.0]))
      assert np.isnan(out[0])


def test_r_squared_of_a_grid_with_one_repeated_rate_is_one():
  """A Π of one repeated rate has no spread (TSS = 0); the exact fit reports R² = 1, not
  NaN or a value outside [0, 1].

  Catches dividing by a zero total sum of squares, and a wrong value for that case.
  """
  fit = scf.fit_scf(params(), np.full(4, 0.5))
  assert fit.r_squared == 1.0
  np.testing.assert_allclose(fit.predict(0.5), rdp_two_stage.epsilon_reference(0.5, params()),
                             rtol=1e-9)


_GRID = np.geomspace(scf.A_MIN, scf.A_MAX, 121)


@pytest.mark.parametrize("a_true", [float(np.sqrt(_GRID[0] * _GRID[1])), 0.002, 0.7, 1.0,
                                    float(np.sqrt(_GRID[119] * _GRID[120])), scf.A_MAX])
def test_exact_exponentials_are_recovered_across_the_range_of_a(a_true):
  """Points on f(q) = exp(a·q − 1) + ½ give back a (to 1e-7) and f (to 1e-7 of its largest value).

  Property: with (e^b, c) exact for each a, the search over a finds the
  generating a wherever it lies in [A_MIN, A_MAX]: between the first two
  grid points (the grid's best is then A_MIN itself), between two coarse grid
  points, between the last two, and at A_MAX itself.
  Bugs caught: a bracket that stops short of the grid's first or last
  interval or indexes past its end, a refinement with a loose tolerance (SciPy's default
  xatol is 1e-5 in log a), and a grid that reaches past A_MAX.
  """
  q = np.linspace(0.01, 1.0, 60)
  eps = np.exp(a_true * q - 1.0) + 0.5
  a, b, c = scf._fit_exponential(q, eps)  # pylint: disable=protected-access
  assert scf.A_MIN <= a <= scf.A_MAX
  assert a == pytest.approx(a_true, rel=1e-7)
  np.testing.assert_allclose(np.exp(a * q + b) + c, eps, rtol=1e-7, atol=1e-7 * eps.max())


def test_a_decreasing_curve_still_gets_an_increasing_member():
  """ε*(q) is never decreasing, but on 2 − q the fit must still be a member with e^b > 0.

  A negative scale −e^{aq} + c fits a decreasing curve almost exactly, and
  has no real b (log of a negative number). Bug caught: the projection
  accepting negative scales (the fit then fails with a math domain error).
  """
  q = np.linspace(0.01, 1.0, 60)
  a, b, c = scf._fit_exponential(q, 2.0 - q)  # pylint: disable=protected-access
  assert np.all(np.isfinite([a, b, c]))
