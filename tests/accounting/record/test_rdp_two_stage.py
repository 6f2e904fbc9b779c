"""Two-stage RDP of rPDP-FL (Lemma 6, Theorem 1) against dp-accounting and an independent mpmath sum.

No TensorFlow (tests/accounting/test_validation.py checks the imports). The
expected values are recomputed here: with dp-accounting's own primitives
(RdpAccountant, _compute_rdp_poisson_subsampled_gaussian, compute_epsilon),
and with this file's own high-precision implementation of Lemma 6's binomial
sum, never with tff_idp's code under test.
"""
import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

from tff_idp.accounting import fast_rdp
from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams

# The integer orders of the two-stage bound, written out here rather than
# taken from the module (a change to them must change this file too).
ORDERS = list(range(2, 65)) + [80, 96, 112, 128, 160, 192, 256, 320, 384, 512, 768, 1024]
FIG5 = dict(noise_multiplier=1.0, local_steps=5, rounds=20, client_rate=0.5, delta=1e-3)


def params(**overrides):
  return TwoStageParams(**dict(FIG5, **overrides))


def test_orders_are_the_documented_integers():
  assert rdp_two_stage.ORDERS.tolist() == ORDERS


# ---------------------------------------------------------------------------
# The vectorised RDP equals dp-accounting's, order by order
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("sigma", [0.4, 0.8, 1.0, 2.0, 5.0])
def test_rdp_many_matches_dp_accounting_at_orders(sigma):
  qs = np.array([1e-5, 1e-3, 0.01, 0.07, 0.3, 0.5, 0.9, 0.999])
  table = fast_rdp._OrderTable(ORDERS)  # pylint: disable=protected-access
  ours = fast_rdp.rdp_poisson_subsampled_gaussian_many(qs, sigma, table, chunk_rows=3)
  assert ours.shape == (qs.size, len(ORDERS))
  for row, q in zip(ours, qs):
    ref = np.asarray(dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, ORDERS))  # pylint: disable=protected-access
    # atol: float64 rounding of log(1 + x) for x < 1e-15 at tiny q (see test_fast_rdp).
    np.testing.assert_allclose(row, ref, rtol=1e-9, atol=1e-15)
    assert ref[-1] > 1e-6  # not vacuous


def test_rdp_many_endpoints_and_bad_rates():
  table = fast_rdp._OrderTable(ORDERS)  # pylint: disable=protected-access
  out = fast_rdp.rdp_poisson_subsampled_gaussian_many(np.array([0.0, 1.0]), 0.7, table)
  assert np.all(out[0] == 0.0)
  np.testing.assert_allclose(out[1], np.asarray(ORDERS) / (2 * 0.7**2), rtol=1e-14)
  for bad in ([-0.1], [1.5], [math.nan]):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
      fast_rdp.rdp_poisson_subsampled_gaussian_many(np.array(bad), 1.0, table)


# ---------------------------------------------------------------------------
# Vectorised epsilon == epsilon_reference (dp-accounting's primitives)
# ---------------------------------------------------------------------------

GRID = [(s, tau, t, lam, d)
        for s in (0.6, 1.0, 3.0)
        for tau, t, d in ((1, 1, 1e-5), (5, 20, 1e-3), (50, 15, 1e-5))
        for lam in (0.1, 0.5, 1.0)]


@pytest.mark.parametrize("threat_model", ["type2", "type1"])
def test_vectorised_epsilon_equals_reference(threat_model):
  qs = np.array([0.0, 1e-4, 3e-3, 0.02, 0.1, 0.35, 0.8, 1.0])
  rng = np.random.default_rng(7)
  # Every setting of GRID is checked at one q in (0, 1), drawn seeded, and at
  # q = 1; the whole q row is checked at the paper's Fig. 5 setting.
  checked = 0
  for s, tau, t, lam, d in GRID:
    p = TwoStageParams(s, tau, t, lam, d, threat_model)
    pick = np.array([rng.choice(qs[1:-1]), 1.0])
    ours = rdp_two_stage.epsilon(pick, p)
    for q, e in zip(pick, ours):
      ref = rdp_two_stage.epsilon_reference(q, p)
      assert e == pytest.approx(ref, rel=1e-9, abs=1e-12), (p, q)
      checked += ref > 0
  p = params(threat_model=threat_model)
  ours = rdp_two_stage.epsilon(qs, p)
  assert ours[0] == 0.0
  for q, e in zip(qs, ours):
    assert e == pytest.approx(rdp_two_stage.epsilon_reference(q, p), rel=1e-9, abs=1e-12)
  assert checked >= 50


def test_scalar_and_vector_epsilon_agree():
  p = params()
  qs = np.linspace(0.0, 1.0, 11)
  vec = rdp_two_stage.epsilon(qs, p)
  assert isinstance(rdp_two_stage.epsilon(0.3, p), float)
  np.testing.assert_allclose([rdp_two_stage.epsilon(float(q), p) for q in qs], vec,
                             rtol=1e-13)


# ---------------------------------------------------------------------------
# λ = 1: Type II is DP-SGD, i.e. τ·T compositions of PoissonSampled(Gaussian)
# ---------------------------------------------------------------------------

def dp_accountant_epsilon(q, sigma, count, delta, orders=None):
  acc = (dp_accounting.rdp.RdpAccountant(orders=orders) if orders is not None
         else dp_accounting.rdp.RdpAccountant())
  acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
              count)
  return acc.get_epsilon(delta)


LAMBDA1_CASES = [(q, s, tau, t, d)
                 for q in (1e-3, 0.05, 0.5, 1.0)
                 for s in (0.5, 1.0, 5.0)
                 for tau, t, d in ((1, 1, 1e-5), (5, 20, 1e-3))]


def test_lambda_one_reduces_to_dp_accounting():
  """At λ = 1 (both threat models) the bound is τ·T Poisson-subsampled Gaussian steps."""
  default_integers = [o for o in dp_rdp.DEFAULT_RDP_ORDERS if float(o).is_integer()]
  assert set(default_integers) <= set(ORDERS)
  below_default = 0
  for q, s, tau, t, d in LAMBDA1_CASES:
    p = TwoStageParams(s, tau, t, 1.0, d)
    ours = rdp_two_stage.epsilon(q, p)
    assert rdp_two_stage.epsilon(q, TwoStageParams(s, tau, t, 1.0, d, "type1")) == ours
    same_orders = dp_accountant_epsilon(q, s, tau * t, d, orders=ORDERS)
    assert ours == pytest.approx(same_orders, rel=1e-9), (q, s, tau, t, d)
    # dp-accounting's default orders are its fractional orders 1.1..10.9 plus
    # integers that are all in ORDERS. So ours never exceeds the ε over those
    # integers, and is >= the default-orders ε whenever our optimal order is
    # one dp-accounting also tries. (Our extra orders 64, 80, ..., 768 can make
    # ours *tighter* than the default, e.g. for σ = 5: counted below.)
    rdp = tau * t * np.asarray(dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, s, ORDERS))  # pylint: disable=protected-access
    subset = np.isin(ORDERS, default_integers)
    eps_default_integers, _ = dp_rdp.compute_epsilon(
        np.asarray(ORDERS)[subset], rdp[subset], d)
    assert ours <= eps_default_integers + 1e-12
    default = dp_accountant_epsilon(q, s, tau * t, d)
    _, best_order = dp_rdp.compute_epsilon(ORDERS, rdp, d)
    if best_order in dp_rdp.DEFAULT_RDP_ORDERS or ours == 0:
      assert ours >= default - 1e-12, (q, s, tau, t, d)
    else:
      below_default += ours < default
  assert below_default >= 1  # the exception above really occurs


def test_lambda_one_pinned_against_accountant_fig5_sigma():
  p = params(client_rate=1.0)
  for q in (0.01, 0.1, 0.5):
    assert rdp_two_stage.epsilon(q, p) == pytest.approx(
        dp_accountant_epsilon(q, 1.0, 100, 1e-3, orders=ORDERS), rel=1e-9)


# ---------------------------------------------------------------------------
# Pinned Theorem 1 at the paper's Fig. 5 setting, computed independently
# ---------------------------------------------------------------------------

def lemma6_log_moment(alpha: int, q: float, sigma: float) -> mpmath.mpf:
  """log of Lemma 6's binomial sum at integer α, in 40-digit arithmetic:

  (1-q)^{α-1}(αq - q + 1) + Σ_{ℓ=2..α} C(α,ℓ)(1-q)^{α-ℓ} q^ℓ e^{(ℓ-1)ρ_G(ℓ)},
  ρ_G(ℓ) = ℓ / (2σ²).
  """
  with mpmath.workdps(40):
    q, s2 = mpmath.mpf(q), mpmath.mpf(sigma) ** 2
    total = (1 - q) ** (alpha - 1) * (alpha * q - q + 1)
    for ell in range(2, alpha + 1):
      total += (mpmath.binomial(alpha, ell) * (1 - q) ** (alpha - ell) * q ** ell
                * mpmath.exp((ell - 1) * ell / (2 * s2)))
    return mpmath.log(total)


def independent_theorem1(q, sigma, tau, rounds, lam, delta, threat_model="type2",
                         orders=ORDERS):
  """Theorem 1 from scratch: returns (ε via dp-accounting's conversion, Eq. (8) ε)."""
  rdp = []
  with mpmath.workdps(40):
    for alpha in orders:
      rho_tau = tau * lemma6_log_moment(alpha, q, sigma) / (alpha - 1)  # Lemma 7
      if threat_model == "type2":
        lam_ = mpmath.mpf(lam)
        rho = rounds * mpmath.log(1 - lam_ + lam_ * mpmath.exp((alpha - 1) * rho_tau)) / (alpha - 1)
      else:
        rho = lam * rounds * rho_tau
      rdp.append(float(rho))
  eps, _ = dp_rdp.compute_epsilon(orders, rdp, delta)
  eq8 = min(r + math.log(1 / delta) / (a - 1) for a, r in zip(orders, rdp))
  return float(eps), eq8


# Literal values (tff_idp at commit time; they also equal the independent
# computation above to 1e-12). A change here is a change of the bound.
PINNED_TYPE2 = {0.01: 0.5617032282737653, 0.1: 4.209906899600016,
                0.5: 30.492931794161812, 1.0: 91.7928242764457}
PINNED_TYPE1 = {0.1: 4.084721402217669}


@pytest.mark.parametrize("q", sorted(PINNED_TYPE2))
def test_theorem1_pinned_at_fig5_type2(q):
  p = params()
  ours = rdp_two_stage.epsilon(q, p)
  expected, eq8 = independent_theorem1(q, 1.0, 5, 20, 0.5, 1e-3)
  assert ours == pytest.approx(expected, rel=1e-12)
  assert ours == pytest.approx(PINNED_TYPE2[q], rel=1e-12)
  # dp-accounting's conversion is never looser than the paper's Eq. (8).
  assert ours <= eq8
  assert eq8 - ours > 1e-3  # and strictly tighter here


def test_theorem1_pinned_at_fig5_type1():
  p = params(threat_model="type1")
  ours = rdp_two_stage.epsilon(0.1, p)
  expected, _ = independent_theorem1(0.1, 1.0, 5, 20, 0.5, 1e-3, "type1")
  assert ours == pytest.approx(expected, rel=1e-12)
  assert ours == pytest.approx(PINNED_TYPE1[0.1], rel=1e-12)


def test_q1_is_the_gaussian_closed_form():
  """At q = 1, ρ^τ = τα/(2σ²), and Lemma 6 mixes it with λ in closed form."""
  p = params()
  alpha = np.asarray(ORDERS, dtype=float)
  rho_tau = 5 * alpha / 2.0
  rho = 20 * (np.log(0.5) + np.logaddexp(0.0, (alpha - 1) * rho_tau)) / (alpha - 1)
  np.testing.assert_allclose(rdp_two_stage.total_rdp(1.0, p), rho, rtol=1e-12)
  assert rdp_two_stage.epsilon(1.0, p) == pytest.approx(
      dp_rdp.compute_epsilon(ORDERS, rho, 1e-3)[0], rel=1e-12)


# ---------------------------------------------------------------------------
# Structure: monotonicity and the Type I / Type II relations
# ---------------------------------------------------------------------------

def test_epsilon_increases_with_q():
  qs = np.concatenate([[0.0], np.geomspace(1e-6, 1.0, 400)])
  for s in (0.5, 1.0, 4.0):
    for tm in ("type2", "type1"):
      e = rdp_two_stage.epsilon(qs, params(noise_multiplier=s, threat_model=tm))
      assert np.all(np.diff(e) >= -1e-12 * e[1:]), (s, tm)
      assert e[-1] > e[len(e) // 2] > 0


@pytest.mark.parametrize("tm", ["type2", "type1"])
def test_epsilon_monotone_in_rounds_steps_and_client_rate(tm):
  for q in (0.005, 0.05, 0.4, 1.0):
    by_t = [rdp_two_stage.epsilon(q, params(rounds=t, threat_model=tm)) for t in (1, 5, 20, 100)]
    by_tau = [rdp_two_stage.epsilon(q, params(local_steps=k, threat_model=tm)) for k in (1, 2, 5, 50)]
    by_lam = [rdp_two_stage.epsilon(q, params(client_rate=lam, threat_model=tm))
              for lam in (0.01, 0.1, 0.5, 1.0)]
    by_sigma = [rdp_two_stage.epsilon(q, params(noise_multiplier=s, threat_model=tm))
                for s in (0.5, 1.0, 2.0, 8.0)]
    by_delta = [rdp_two_stage.epsilon(q, params(delta=d, threat_model=tm))
                for d in (1e-8, 1e-5, 1e-3, 0.1)]
    for seq in (by_t, by_tau, by_lam):
      assert all(b > a for a, b in zip(seq, seq[1:])), (q, seq)
    for seq in (by_sigma, by_delta):
      assert all(b < a for a, b in zip(seq, seq[1:])), (q, seq)


def test_type1_never_exceeds_type2_and_they_meet_at_lambda_one():
  """log(1 − λ + λe^x) ≥ λx (concavity of log), so ρ_II ≥ ρ_I at every order."""
  qs = np.geomspace(1e-4, 1.0, 60)
  for lam in (0.05, 0.3, 0.5, 0.9):
    for s in (0.7, 1.0, 3.0):
      p2 = params(client_rate=lam, noise_multiplier=s)
      p1 = params(client_rate=lam, noise_multiplier=s, threat_model="type1")
      r2, r1 = rdp_two_stage.total_rdp(qs, p2), rdp_two_stage.total_rdp(qs, p1)
      # rtol 1e-9: log(1 − λ + λe^x) is computed as a logaddexp, whose result
      # near 0 (RDP ~1e-7 at q ~1e-4) carries ~1e-10 relative rounding.
      assert np.all(r1 <= r2 * (1 + 1e-9))
      e2, e1 = rdp_two_stage.epsilon(qs, p2), rdp_two_stage.epsilon(qs, p1)
      assert np.all(e1 <= e2 + 1e-12)
      assert np.any(e1 < 0.99 * e2)  # a real gap, not equality
  p2, p1 = params(client_rate=1.0), params(client_rate=1.0, threat_model="type1")
  np.testing.assert_array_equal(rdp_two_stage.epsilon(qs, p1), rdp_two_stage.epsilon(qs, p2))


def test_type1_is_lambda_t_rounds_without_amplification():
  """Type I at (λ, T) is the λ = 1 bound over λ·T rounds (the expected participations)."""
  qs = np.geomspace(1e-3, 1.0, 20)
  p1 = params(client_rate=0.25, rounds=40, threat_model="type1")
  full = params(client_rate=1.0, rounds=10)
  np.testing.assert_allclose(rdp_two_stage.epsilon(qs, p1), rdp_two_stage.epsilon(qs, full),
                             rtol=1e-12)


def test_type2_client_sampling_amplifies():
  """Type II at λ < 1 is below the unamplified T·ρ^τ (λ = 1) and above Type I."""
  qs = np.geomspace(1e-3, 1.0, 20)
  lam = params()
  none = params(client_rate=1.0)
  assert np.all(rdp_two_stage.epsilon(qs, lam) < rdp_two_stage.epsilon(qs, none))


def test_round_rdp_composes_to_total():
  qs = np.array([0.01, 0.2, 1.0])
  for tm in ("type2", "type1"):
    p = params(threat_model=tm)
    per_round = rdp_two_stage.round_rdp(qs, p)
    factor = 20 if tm == "type2" else 0.5 * 20
    np.testing.assert_allclose(rdp_two_stage.total_rdp(qs, p), factor * per_round, rtol=1e-14)
    np.testing.assert_allclose(rdp_two_stage.local_rdp(qs, p),
                               5 * fast_rdp.rdp_poisson_subsampled_gaussian_many(
                                   qs, 1.0, fast_rdp._OrderTable(ORDERS)), rtol=1e-14)  # pylint: disable=protected-access


def test_epsilon_curve_minimum_is_epsilon():
  """Alg. 2 line 5-6: the min over α of the plotted curve is ε*(q)."""
  p = params()
  best = []
  for q in (0.001, 0.01, 0.1, 0.6):
    orders, curve = rdp_two_stage.epsilon_curve(q, p)
    assert orders.tolist() == ORDERS
    assert curve.shape == (len(ORDERS),) and np.all(curve >= 0)
    assert curve.min() == pytest.approx(rdp_two_stage.epsilon(q, p), rel=1e-12)
    best.append(int(np.argmin(curve)))
  # Fig. 5 (left): the optimal order moves down as q grows; small q have an
  # interior optimum (the curve is U-shaped), q = 0.6 is optimal at α = 2.
  assert best == sorted(best, reverse=True) and best[0] > best[-1]
  assert 0 < best[0] < len(ORDERS) - 1 and best[-1] == 0


# ---------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("field,bad,match", [
    ("noise_multiplier", 0.0, r"noise_multiplier=0\.0 must be a finite number > 0"),
    ("noise_multiplier", -1.0, "must be a finite number > 0"),
    ("noise_multiplier", math.nan, "must be a finite number > 0"),
    ("noise_multiplier", math.inf, "must be a finite number > 0"),
    ("client_rate", 0.0, r"client_rate \(λ\)=0\.0 must lie in \(0, 1\]"),
    ("client_rate", 1.5, r"must lie in \(0, 1\]"),
    ("client_rate", -0.1, r"must lie in \(0, 1\]"),
    ("client_rate", math.nan, r"must lie in \(0, 1\]"),
    ("delta", 0.0, "must lie strictly between 0 and 1"),
    ("delta", 1.0, "must lie strictly between 0 and 1"),
    ("delta", -1e-5, "must lie strictly between 0 and 1"),
    ("delta", math.nan, "must lie strictly between 0 and 1"),
    ("local_steps", 0, r"local_steps \(τ\)=0 must be a positive integer"),
    ("local_steps", -3, "must be a positive integer"),
    ("local_steps", 2.5, "must be a positive integer"),
    ("local_steps", math.inf, "must be a positive integer"),
    ("local_steps", math.nan, "must be a positive integer"),
    ("rounds", 0, r"rounds=0 must be a positive integer"),
    ("rounds", -1, "must be a positive integer"),
    ("rounds", 1.5, "must be a positive integer"),
    ("rounds", math.inf, "must be a positive integer"),
    ("threat_model", "type3", "must be one of"),
])
def test_bad_params_raise_value_error(field, bad, match):
  with pytest.raises(ValueError, match=match):
    params(**{field: bad})


@pytest.mark.parametrize("bad", [-0.01, 1.0001, math.nan, math.inf, -math.inf])
def test_bad_rates_raise_value_error(bad):
  p = params()
  for fn in (rdp_two_stage.epsilon, rdp_two_stage.local_rdp, rdp_two_stage.round_rdp,
             rdp_two_stage.total_rdp, rdp_two_stage.epsilon_reference):
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
      fn(bad, p)
  with pytest.raises(ValueError, match=r"q=.* is outside \[0, 1\]"):
    rdp_two_stage.epsilon(np.array([0.1, bad, 0.2]), p)


def test_kl_cliff_is_taken_only_with_a_margin():
  """ε jumps from 0 to ~0.67 where ρ crosses ≈ δ² (dp-accounting's KL shortcut).

  Found by the never-over-budget property test: at this configuration our
  RDP and dp-accounting's differ by 3e-5 relative (floating point), which was
  enough for our ε to read 0 while dp-accounting's read 0.67. With the margin
  our ε is never below dp-accounting's near the cliff, and a rate calibrated
  for ε = 0.1 is within budget by dp-accounting's own numbers too.
  """
  from tff_idp.accounting.record.calibration import calibrate_record_rates
  params = rdp_two_stage.TwoStageParams(
      noise_multiplier=0.675797916994426, local_steps=10, rounds=3,
      client_rate=0.4378679364362637, delta=8.964309051893144e-06, threat_model="type1")
  q = 8.782199064901055e-07
  assert rdp_two_stage.epsilon_reference(q, params) > 0.5
  assert rdp_two_stage.epsilon(q, params) >= rdp_two_stage.epsilon_reference(q, params) - 1e-9
  for method in ("exact", "scf", "binary_search"):
    rate = float(calibrate_record_rates(np.array([0.1]), params, method=method).q[0])
    assert rdp_two_stage.epsilon_reference(rate, params) <= 0.1


def balle_epsilon(rdp, delta):
  """Balle et al. 2020 Prop. 12 without the KL shortcut, by hand over ORDERS."""
  return max(0.0, min(r + math.log1p(-1.0 / a) - math.log(delta * a) / (a - 1.0)
                      for a, r in zip(ORDERS, rdp)))


def test_epsilon_just_below_the_kl_cliff_is_the_conversion_without_the_shortcut():
  """Where dp-accounting's KL shortcut would read ε = 0 but ρ is within the margin of
  δ², ε is the plain Prop. 12 conversion, computed here by hand, row by row.

  Row ``cliff``: ρ = δ²/2 at every order (ε ≈ 0.006 without the shortcut). Row
  ``mixed``: ρ = δ²/2 at α = 2 only (the shortcut fires there), 1 elsewhere
  (ε ≈ 1.006). Catches a wrong conversion on that path (a sign, δ/α for δ·α,
  a wrong 1/(α − 1), a floor other than 0) and a minimum taken over the
  whole batch instead of each row.
  """
  delta = 1e-6
  cliff = np.full(len(ORDERS), 0.5 * delta**2)
  mixed = np.ones(len(ORDERS))
  mixed[0] = 0.5 * delta**2
  large = 3.0 * np.asarray(ORDERS, dtype=float) / (2 * 1.5**2)
  for row in (cliff, mixed):
    assert dp_rdp.compute_epsilon(ORDERS, row, delta)[0] == 0.0
  eps = rdp_two_stage.rdp_to_epsilon(np.stack([cliff, mixed, large]), delta)
  for got, row in zip(eps, (cliff, mixed, large)):
    assert got == pytest.approx(balle_epsilon(row, delta), rel=1e-12)
  assert 0.0 < eps[0] < 0.01 and 1.0 < eps[1] < 1.01
  assert eps[2] == pytest.approx(dp_rdp.compute_epsilon(ORDERS, large, delta)[0], rel=1e-12)


def test_epsilon_reference_uses_the_orders_it_is_given():
  """With λ = 1 and dp-accounting's default orders, epsilon_reference is a fresh
  RdpAccountant's ε for T·τ Poisson-subsampled Gaussian steps.

  Catches an ``orders`` argument that is ignored (ORDERS has no fractional orders,
  so its ε is larger here).
  """
  p = params(client_rate=1.0, noise_multiplier=0.7)
  acc = dp_accounting.rdp.RdpAccountant()
  acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
      0.05, dp_accounting.GaussianDpEvent(0.7)), p.local_steps * p.rounds))
  ours = rdp_two_stage.epsilon_reference(0.05, p, orders=dp_rdp.DEFAULT_RDP_ORDERS)
  assert ours == pytest.approx(acc.get_epsilon(p.delta), rel=1e-9)
  assert rdp_two_stage.epsilon_reference(0.05, p) > ours * (1 + 1e-3)


def test_kl_margin_inflates_rho():
  """The KL shortcut (ε = 0) needs ρ·(1 + 1e-3) + 1e-12 < δ², not just ρ < δ²: at
  ρ = δ²(1 − 5e-4) the plain shortcut would read 0, the margin gives the hand-computed
  Prop. 12 ε (δ = 1e-4, where it is > 0).

  Catches a margin applied in the wrong direction (ρ/(1 + m) or ρ(1 − m)), which
  would take the shortcut on the unsafe side of the cliff.
  """
  delta = 1e-4
  rho = np.full(len(ORDERS), delta**2 * (1 - 5e-4))
  assert dp_rdp.compute_epsilon(ORDERS, rho, delta)[0] == 0.0
  eps = rdp_two_stage.rdp_to_epsilon(rho, delta)
  assert eps == pytest.approx(balle_epsilon(rho, delta), rel=1e-12)
  assert eps > 1e-3


def test_client_sampling_amplification_is_exact_for_tiny_local_rdp():
  """Lemma 6 at ρ = 1e-9: log(1 − λ + λe^x)/(α − 1) with x = (α − 1)ρ equals its series
  λx + λ(1 − λ)x²/2 (exact to O(x³) ≈ 1e-21 relative) to 1e-12 relative.

  The log-sum-exp form loses about 1e-7 relative here (measured 8e-8) to
  cancellation; the log1p/expm1 form is exact. Bug caught: the small-x
  branch never taken (every x through the log-sum-exp form).
  """
  lam = 0.3
  rho = np.full(rdp_two_stage.ORDERS.shape, 1e-9)
  x = (rdp_two_stage.ORDERS - 1.0) * rho
  series = (lam * x + lam * (1 - lam) * x**2 / 2) / (rdp_two_stage.ORDERS - 1.0)
  np.testing.assert_allclose(rdp_two_stage.amplify_by_client_sampling(rho, lam), series,
                             rtol=1e-12)


def test_the_kl_shortcut_is_decided_row_by_row():
  """A batch with one row safely inside the KL shortcut (ρ = 1e-10 ≪ δ² = 1e-8: ε = 0) and
  one on the cliff (ρ = δ²(1 − 5e-4): ε > 0 by hand) gives each row its own ε.

  Bug caught: the robustness of the shortcut decided over the whole batch
  (``np.any`` without ``axis=-1``): the safe row then lets the cliff row read
  ε = 0, an under-reported ε.
  """
  delta = 1e-4
  safe = np.full(len(ORDERS), 1e-10)
  cliff = np.full(len(ORDERS), delta**2 * (1 - 5e-4))
  eps = rdp_two_stage.rdp_to_epsilon(np.stack([safe, cliff]), delta)
  assert eps[0] == 0.0
  assert eps[1] == pytest.approx(balle_epsilon(cliff, delta), rel=1e-12) and eps[1] > 1e-3
