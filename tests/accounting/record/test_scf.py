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
