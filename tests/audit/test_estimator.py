"""The one-shot ε estimator, against independent numbers (no TensorFlow)."""
import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats

from tff_idp.audit import estimator


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_equal_variances_are_the_gaussian_mechanism(sigma, delta):
  """Independent: dp-accounting's PLD ε of GaussianDpEvent(σ) (sensitivity 1)."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from dp_accounting.pld import pld_privacy_accountant  # pylint: disable=g-import-not-at-top
  accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
  accountant.compose(dp_accounting.GaussianDpEvent(sigma))
  expected = accountant.get_epsilon(delta)
  # Location and scale do not matter, only μ = shift / std.
  got = float(estimator.gaussian_pair_epsilon(0.3, 2.0, 0.3 + 2.0 / sigma, 2.0, delta))
  assert got == pytest.approx(expected, rel=2e-3, abs=2e-3)


@pytest.mark.parametrize("params", [(0.0, 1.0, 0.7, 1.5), (0.0, 1.5, 0.4, 1.0),
                                    (1.0, 0.5, 1.2, 0.6), (0.0, 1.0, 0.0, 1.3)])
@pytest.mark.parametrize("eps", [0.0, 0.5, 2.0])
def test_hockey_stick_matches_numerical_integration(params, eps):
  """H_{e^ε}(P‖Q) = ∫ (p − e^ε q)₊, integrated numerically on a fine grid."""
  mp, sp, mq, sq = params
  p, q = stats.norm(mp, sp), stats.norm(mq, sq)
  lo, hi = min(mp, mq) - 12 * max(sp, sq), max(mp, mq) + 12 * max(sp, sq)
  breaks = np.linspace(lo, hi, 41)
  numeric = sum(integrate.quad(lambda x: max(p.pdf(x) - math.exp(eps) * q.pdf(x), 0.0),
                               a, b, limit=200)[0] for a, b in zip(breaks[:-1], breaks[1:]))
  got = float(estimator.hockey_stick(eps, mp, sp, mq, sq))
  assert got == pytest.approx(numeric, abs=1e-7)


def test_profile_is_monotone_and_solved_at_delta():
  eps = np.linspace(0, 10, 101)
  profile = estimator.privacy_profile(eps, 0.0, 1.0, 0.8, 1.3)
  assert np.all(np.diff(profile) <= 1e-15)
  e = float(estimator.gaussian_pair_epsilon(0.0, 1.0, 0.8, 1.3, 1e-4))
  assert float(estimator.privacy_profile(e, 0.0, 1.0, 0.8, 1.3)) <= 1e-4
  assert float(estimator.privacy_profile(e * 0.99, 0.0, 1.0, 0.8, 1.3)) > 1e-4


def test_identical_distributions_give_zero_and_far_apart_saturate():
  assert float(estimator.gaussian_pair_epsilon(0, 1, 0, 1, 1e-5)) == 0.0
  assert float(estimator.gaussian_pair_epsilon(0, 1, 100, 1, 1e-5)) == estimator.EPSILON_CAP
  rng = np.random.default_rng(0)
  est = estimator.estimate_epsilon(rng.normal(0, 0.01, 50), rng.normal(1.0, 0.01, 50), 1e-5,
                                   bound=1.0, bootstrap=200)
  assert est.saturated and est.flagged
  assert est.format().startswith("≥ 100")


def test_estimate_is_deterministic_and_ci_brackets_the_point():
  rng = np.random.default_rng(1)
  null, ins = rng.normal(0, 1, 300), rng.normal(0.5, 1, 300)
  a = estimator.estimate_epsilon(null, ins, 1e-4, bound=3.0, seed=5, bootstrap=300)
  b = estimator.estimate_epsilon(null, ins, 1e-4, bound=3.0, seed=5, bootstrap=300)
  assert a == b
  assert a.ci_low <= a.epsilon <= a.ci_high
  assert a.tightness == pytest.approx(a.epsilon / 3.0)
  # μ̂ ≈ 0.5: ε of the 0.5-GDP mechanism at δ = 1e-4 is about 1.7.
  assert 1.0 < a.epsilon < 2.6


def test_ci_coverage_of_the_gdp_fit():
  """95% interval covers the true ε in ≥ 85% of 60 seeded draws (flake rate < 1e-3)."""
  mu, delta = 0.6, 1e-4
  true = float(estimator.gaussian_pair_epsilon(0, 1, mu, 1, delta))
  covered = 0
  for seed in range(60):
    rng = np.random.default_rng(seed)
    est = estimator.estimate_epsilon(rng.normal(0, 1, 300), rng.normal(mu, 1, 150), delta,
                                     seed=seed, bootstrap=300)
    covered += est.ci_low <= true <= est.ci_high
  # Binomial(60, 0.95): P(X < 51) ≈ 2e-4.
  assert covered >= 51


@pytest.mark.parametrize("kwargs,match", [
    (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"),
    (dict(confidence=1.0), "confidence"), (dict(bootstrap=10), "bootstrap"),
    (dict(method="magic"), "method"), (dict(bound=-1.0), "bound")])
def test_bad_arguments_say_what_to_change(kwargs, match):
  args = dict(delta=1e-5)
  args.update(kwargs)
  delta = args.pop("delta")
  with pytest.raises(ValueError, match=match):
    estimator.estimate_epsilon([0.1, 0.2, 0.3], [0.2, 0.3, 0.4], delta, **args)


def test_too_few_or_non_finite_cosines_are_refused():
  with pytest.raises(ValueError, match="at least 2"):
    estimator.estimate_epsilon([0.1], [0.2, 0.3], 1e-5)
  with pytest.raises(ValueError, match="non-finite"):
    estimator.estimate_epsilon([0.1, np.nan], [0.2, 0.3], 1e-5)


def test_gaussian_pair_method_sees_variance_differences():
  rng = np.random.default_rng(2)
  null, ins = rng.normal(0, 1, 2000), rng.normal(0, 1.5, 2000)
  gdp = estimator.estimate_epsilon(null, ins, 1e-4, method="gdp", bootstrap=200)
  pair = estimator.estimate_epsilon(null, ins, 1e-4, method="gaussian_pair", bootstrap=200)
  assert gdp.epsilon < 0.3 < pair.epsilon


def test_plot_accepts_intervals_that_exclude_the_point(tmp_path):
  """A percentile CI may lie above ε̂ (e.g. ε̂ = 0): the plot must still draw it."""
  from tff_idp.audit import report  # pylint: disable=g-import-not-at-top
  row = dict(group="eps1", epsilon=0.0, ci_low=0.2, ci_high=1.5, bound=1.0, flagged=False,
             confidence=0.95, method="gdp", tightness=0.0, num_inserted=20, num_held_out=20)
  high = dict(row, group="eps2", epsilon=3.0, ci_low=3.2, ci_high=4.0, bound=2.0, flagged=True)
  path = tmp_path / "audit.png"
  assert report.plot_audit([{"run": "r", "audit": [row, high]}], str(path))
  assert path.stat().st_size > 1000
  assert "VIOLATION" in report.format_audit_table([{"run": "r", "audit": [row, high]}])
