"""fast_rdp against dp-accounting, recomputed independently (no tff_idp.accounting.exact)."""
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp

from tff_idp.accounting import fast_rdp

# The integer members of dp-accounting's default orders, derived here rather
# than taken from fast_rdp.
DP_INTEGER_ORDERS = [o for o in dp_rdp.DEFAULT_RDP_ORDERS if float(o).is_integer()]


def dp_rdp_epsilon(q, sigma, rounds, delta):
  """ε from a fresh dp-accounting RdpAccountant (default orders)."""
  acc = dp_accounting.rdp.RdpAccountant()
  acc.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
      rounds))
  return acc.get_epsilon(delta)


def dp_integer_order_epsilon(q, sigma, rounds, delta):
  """ε from dp-accounting's own RDP and conversion, restricted to integer orders."""
  rdp = rounds * np.asarray(
      dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, DP_INTEGER_ORDERS))
  return dp_rdp.compute_epsilon(DP_INTEGER_ORDERS, rdp, delta)[0]


def test_integer_orders_are_dp_accountings_integer_orders():
  assert list(fast_rdp.INTEGER_ORDERS) == DP_INTEGER_ORDERS


# q = 1 (no subsampling), moderate q, the FMNIST rate c/N, and tiny q.
RDP_CASES = ([(q, s) for q in (1.0, 0.5, 0.1, 30 / 3383, 1e-3, 1e-4)
              for s in (0.3, 0.7, 1.0, 3.0, 30.0)]
             + [(q, s) for q in (1e-6, 1e-8) for s in (0.3, 0.7, 1.0, 3.0)])


@pytest.mark.parametrize("q,sigma", RDP_CASES)
def test_rdp_vector_matches_dp_accounting(q, sigma):
  ours = fast_rdp.rdp_poisson_subsampled_gaussian(q, sigma)
  ref = np.asarray(dp_rdp._compute_rdp_poisson_subsampled_gaussian(
      q, sigma, DP_INTEGER_ORDERS))
  assert ours.shape == (len(DP_INTEGER_ORDERS),)
  # rtol 1e-9. The atol floor is float64 rounding of log A_α with A_α = 1 + x,
  # x < 1e-15 (both codes sum terms near 1; at q=1e-8 dp-accounting even
  # returns slightly negative RDP there); it is far below anything that moves ε.
  np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-15)
  # The comparison is not vacuous: the top orders are large in every case.
  assert ref[-1] > 1e-9


def test_rdp_at_q1_is_the_gaussian_closed_form():
  sigma = 1.7
  np.testing.assert_allclose(fast_rdp.rdp_poisson_subsampled_gaussian(1.0, sigma),
                             np.asarray(DP_INTEGER_ORDERS) / (2 * sigma**2), rtol=1e-12)


def test_rdp_vectorised_over_q_matches_rowwise():
  qs = np.array([0.0, 1e-5, 0.01, 0.3, 1.0])
  sigma = 0.9
  out = fast_rdp.rdp_poisson_subsampled_gaussian(qs, sigma)
  assert out.shape == (qs.size, len(DP_INTEGER_ORDERS))
  assert np.all(out[0] == 0.0)
  for row, q in zip(out[1:], qs[1:]):
    np.testing.assert_allclose(
        row, dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, DP_INTEGER_ORDERS),
        rtol=1e-9, atol=1e-15)


def test_rdp_rejects_orders_below_two():
  with pytest.raises(ValueError, match=">= 2"):
    fast_rdp._OrderTable([1, 2, 3])


EPS_CASES = [(q, s, t, d)
             for q in (1e-4, 30 / 3383, 0.05, 1.0)
             for s in (0.4, 0.8, 1.0, 3.0)
             for t in (1, 420)
             for d in (1e-7, 1e-4)]


@pytest.mark.parametrize("q,sigma,rounds,delta", EPS_CASES)
def test_epsilon_equals_dp_accounting_on_integer_orders(q, sigma, rounds, delta):
  """Same RDP orders -> same ε as dp-accounting's compute_epsilon."""
  np.testing.assert_allclose(fast_rdp.epsilon(q, sigma, rounds, delta),
                             dp_integer_order_epsilon(q, sigma, rounds, delta),
                             rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("q,sigma,rounds,delta", EPS_CASES)
def test_epsilon_is_conservative_against_rdp_accountant(q, sigma, rounds, delta):
  ours = fast_rdp.epsilon(q, sigma, rounds, delta)
  ref = dp_rdp_epsilon(q, sigma, rounds, delta)
  # fast_rdp minimises over a subset of the orders: never below dp-accounting
  # (up to float rounding in the log-sum-exp).
  assert ours >= ref * (1 - 1e-9) - 1e-12


# Realistic DP-FedAvg settings (σ >= 1, ε <= 20), where the missing fractional
# orders cost only a few % (2.2% at the pinned FMNIST point below, up to ~7%
# here). The gap is larger at smaller σ: ~10% at σ = 0.8, and above 50% at
# σ around 0.35 with tiny q, where the optimal order drops below 2.
CLOSE_CASES = [(q, s, t, d)
               for q in (1e-3, 30 / 3383, 0.05)
               for s in (1.0, 1.5, 3.0)
               for t in (50, 420)
               for d in (1e-5, 1e-4)]


@pytest.mark.parametrize("q,sigma,rounds,delta", CLOSE_CASES)
def test_epsilon_within_a_few_percent_of_rdp_accountant(q, sigma, rounds, delta):
  ref = dp_rdp_epsilon(q, sigma, rounds, delta)
  if not 0.1 <= ref <= 20:
    pytest.skip(f"ε={ref:.3g} outside the range this claim is about")
  ours = fast_rdp.epsilon(q, sigma, rounds, delta)
  assert ref <= ours * (1 + 1e-9) <= ref * 1.08


def test_pinned_regression_value():
  """FMNIST uniform rate c/N = 30/3383, σ = 1, 420 rounds, δ = 1e-4."""
  q, sigma, rounds, delta = 30 / 3383, 1.0, 420, 1e-4
  pinned_integer_orders = 1.1651666946854  # dp-accounting 0.4.3, integer orders
  pinned_rdp_accountant = 1.1398236581787  # dp-accounting 0.4.3, RdpAccountant
  # The pinned literals are what dp-accounting itself says...
  assert dp_integer_order_epsilon(q, sigma, rounds, delta) == pytest.approx(
      pinned_integer_orders, rel=1e-10)
  assert dp_rdp_epsilon(q, sigma, rounds, delta) == pytest.approx(
      pinned_rdp_accountant, rel=1e-10)
  # ...and fast_rdp reproduces the integer-order one.
  assert fast_rdp.epsilon(q, sigma, rounds, delta) == pytest.approx(
      pinned_integer_orders, rel=1e-9)


def test_rdp_to_epsilon_matches_compute_epsilon_including_kl_branch():
  orders = np.asarray(DP_INTEGER_ORDERS, dtype=float)
  for rdp in (np.full(orders.shape, 1e-12),            # KL bound: ε = 0
              orders / (2 * 0.9**2),                     # q = 1, σ = 0.9
              37 * fast_rdp.rdp_poisson_subsampled_gaussian(0.02, 1.3)):
    for delta in (1e-8, 1e-5, 0.5):
      ref = dp_rdp.compute_epsilon(list(orders), list(rdp), delta)[0]
      assert float(fast_rdp.rdp_to_epsilon(orders, rdp, delta)) == pytest.approx(
          ref, rel=1e-12, abs=1e-15)


def test_epsilon_is_monotone_in_q_and_sigma():
  qs = np.geomspace(1e-4, 1.0, 25)
  eps_q = [fast_rdp.epsilon(q, 1.0, 100, 1e-5) for q in qs]
  assert np.all(np.diff(eps_q) > 0)
  sigmas = np.geomspace(0.5, 20.0, 25)
  eps_s = [fast_rdp.epsilon(0.01, s, 100, 1e-5) for s in sigmas]
  assert np.all(np.diff(eps_s) < 0)
  assert math.isfinite(eps_q[-1])


# dp-accounting's integer orders as it holds them (a float array), and a
# custom subset with a small, a middle and a large order.
DP_INTEGER_ORDERS_FLOAT = np.asarray(DP_INTEGER_ORDERS, dtype=float)
CUSTOM_ORDERS = [3, 7, 40, 256]


@pytest.mark.parametrize("orders", [DP_INTEGER_ORDERS_FLOAT, CUSTOM_ORDERS],
                         ids=["dp_integer_orders_as_floats", "custom"])
@pytest.mark.parametrize("q,sigma", [(0.02, 0.8), (0.3, 2.0), (1e-4, 0.5)])
def test_a_fresh_order_table_matches_dp_accounting(orders, q, sigma):
  """A table built for any integer orders gives dp-accounting's RDP at exactly those orders.

  The module's default table is built at import time, so only a table built
  in the test exercises the construction: catches a wrong segment layout
  (sizes, starts, segment ids), a wrong binomial coefficient or i² − i term,
  and a table that rejects integer orders given as floats.
  """
  table = fast_rdp._OrderTable(orders)  # pylint: disable=protected-access
  ref = np.asarray(dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, list(orders)))
  one = fast_rdp.rdp_poisson_subsampled_gaussian(q, sigma, table)
  assert one.shape == (len(orders),)
  np.testing.assert_allclose(one, ref, rtol=1e-9, atol=1e-15)
  many = fast_rdp.rdp_poisson_subsampled_gaussian_many(np.array([q, 0.0, 1.0]), sigma, table)
  np.testing.assert_allclose(many[0], ref, rtol=1e-9, atol=1e-15)
  np.testing.assert_array_equal(many[1], 0.0)
  np.testing.assert_allclose(many[2], np.asarray(orders, float) / (2 * sigma**2), rtol=1e-12)


def test_order_two_is_a_valid_order():
  """Order 2 is the smallest integer order dp-accounting uses; a table must accept it.

  Catches a bound that rejects α = 2 (the optimal order at small σ).
  """
  table = fast_rdp._OrderTable([2])  # pylint: disable=protected-access
  ref = dp_rdp._compute_rdp_poisson_subsampled_gaussian(0.1, 0.6, [2])
  np.testing.assert_allclose(fast_rdp.rdp_poisson_subsampled_gaussian(0.1, 0.6, table), ref,
                             rtol=1e-12)


@pytest.mark.parametrize("chunk_rows", [1, 3, 256])
def test_rdp_many_matches_dp_accounting_in_every_chunk(chunk_rows):
  """rdp_poisson_subsampled_gaussian_many equals dp-accounting row by row, whatever the chunking.

  Catches rows written to the wrong place, a chunk that is skipped or cut
  short, the q = 0 / q = 1 special rows, and a scalar q that is not made a row.
  """
  qs = np.array([0.5, 0.0, 1e-5, 1.0, 0.01, 0.3, 0.999, 1e-3])
  sigma = 0.9
  out = fast_rdp.rdp_poisson_subsampled_gaussian_many(qs, sigma, chunk_rows=chunk_rows)
  assert out.shape == (qs.size, len(DP_INTEGER_ORDERS))
  for row, q in zip(out, qs):
    ref = np.asarray(dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, DP_INTEGER_ORDERS))
    np.testing.assert_allclose(row, ref, rtol=1e-9, atol=1e-15)
  # A scalar rate is one row.
  scalar = fast_rdp.rdp_poisson_subsampled_gaussian_many(0.3, sigma, chunk_rows=chunk_rows)
  assert scalar.shape == (1, len(DP_INTEGER_ORDERS))
  np.testing.assert_array_equal(scalar[0], out[5])


@pytest.mark.parametrize("bad", [[-1e-9], [1.0 + 1e-9], [0.5, np.nan]])
def test_rdp_many_rejects_rates_outside_unit_interval(bad):
  """Rates outside [0, 1] (or NaN) are refused, not turned into a meaningless RDP.

  Catches a range check that lets a negative rate, a rate above 1 or NaN through.
  """
  with pytest.raises(ValueError, match=r"\[0, 1\]"):
    fast_rdp.rdp_poisson_subsampled_gaussian_many(np.array(bad), 1.0)


def refined_reference(q, sigma, rounds, delta):
  """dp-accounting's ε over its integer orders plus its fractional default orders
  (1.1, ..., 10.9) within 0.65 of the best integer order, as epsilon_refined documents."""
  rdp_int = rounds * np.asarray(
      dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, DP_INTEGER_ORDERS))
  _, best = dp_rdp.compute_epsilon(DP_INTEGER_ORDERS, rdp_int, delta)
  fractional = [o for o in dp_rdp.DEFAULT_RDP_ORDERS
                if not float(o).is_integer() and abs(o - best) < 0.65]
  orders = DP_INTEGER_ORDERS + fractional
  rdp = rounds * np.asarray(dp_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders))
  return dp_rdp.compute_epsilon(orders, rdp, delta)[0], len(fractional)


# Optimal integer order 2 to 6 (fractional neighbours used) and 53 (none).
REFINED_CASES = [(0.01, 0.5, 100, 1e-5), (1e-3, 0.35, 1000, 1e-5), (0.05, 1.0, 50, 1e-5),
                 (0.3, 0.6, 10, 1e-3), (0.01, 3.0, 420, 1e-5)]


@pytest.mark.parametrize("q,sigma,rounds,delta", REFINED_CASES)
def test_epsilon_refined_equals_dp_accounting_on_its_documented_orders(q, sigma, rounds, delta):
  """epsilon_refined is dp-accounting's ε over the integer orders plus the fractional
  orders within ±0.65 of the best integer one; it lies between RdpAccountant's ε and
  the integer-only ε.

  Catches a refinement that uses the wrong neighbourhood, drops the rounds or
  σ from the fractional RDP, or does not take the minimum of the two.
  """
  ref, n_fractional = refined_reference(q, sigma, rounds, delta)
  ours = fast_rdp.epsilon_refined(q, sigma, rounds, delta)
  assert ours == pytest.approx(ref, rel=1e-9, abs=1e-12)
  assert dp_rdp_epsilon(q, sigma, rounds, delta) * (1 - 1e-9) <= ours
  assert ours <= fast_rdp.epsilon(q, sigma, rounds, delta) * (1 + 1e-12)
  if n_fractional:  # where fractional orders are used they must help here
    assert ours < fast_rdp.epsilon(q, sigma, rounds, delta) * (1 - 1e-4)


def test_epsilon_refined_at_q_zero_is_zero():
  """A rate of 0 spends nothing: ε = 0 (dp-accounting agrees).

  Catches a refinement that calls dp-accounting's fractional RDP at q = 0 and
  fails or returns a positive ε.
  """
  assert fast_rdp.epsilon_refined(0.0, 0.5, 100, 1e-5) == 0.0
  assert dp_rdp_epsilon(0.0, 0.5, 100, 1e-5) == 0.0


def _fractional_cases(n=40, seed=0):
  rng = np.random.default_rng(seed)
  fractional = [o for o in dp_rdp.DEFAULT_RDP_ORDERS if not float(o).is_integer()]
  cases = [(1e-4, 15.0, 1.7), (0.9, 0.3, 10.9), (1e-7, 0.5, 1.1)]  # long, large q, tiny q
  for _ in range(n):
    cases.append((float(10 ** rng.uniform(-7, -0.05)), float(10 ** rng.uniform(-0.5, 1.2)),
                  float(rng.choice(fractional))))
  return cases


def test_log_a_fractional_equals_dp_accountings_series():
  """log A_α at fractional orders is dp-accounting's ``_compute_log_a_frac`` (43 seeded cases).

  Catches a wrong term (σ, z₀, the binomial's sign, the mirror term j = α - i),
  a series stopped early, or orders evaluated at another order's row.
  """
  by_setting = {}
  for q, sigma, alpha in _fractional_cases():
    by_setting.setdefault((q, sigma), []).append(alpha)
  by_setting[(0.01, 0.7)] = [1.5, 1.1, 3.3, 10.9]  # several orders in one call, unsorted
  for (q, sigma), alphas in by_setting.items():
    ours = fast_rdp.log_a_fractional(q, sigma, np.array(alphas))
    theirs = np.array([dp_rdp._compute_log_a_frac(q, sigma, a) for a in alphas])
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-13, err_msg=f"{q} {sigma}")


def test_a_series_that_does_not_end_is_given_up_and_refined_epsilon_stays_integer(monkeypatch):
  """NaN terms never end dp-accounting's loop; here they give NaN, and epsilon_refined
  then keeps the integer-order ε (an upper bound) instead of hanging or using NaN.
  """
  q, sigma, rounds, delta = 0.01, 0.5, 100, 1e-5  # the fractional orders help here
  assert fast_rdp.epsilon_refined(q, sigma, rounds, delta) < fast_rdp.epsilon(
      q, sigma, rounds, delta)
  monkeypatch.setattr(fast_rdp, "_MAX_TERMS", 256)
  assert np.isnan(fast_rdp.log_a_fractional(0.1, float("nan"), np.array([1.5, 2.5]))).all()
  monkeypatch.setattr(fast_rdp, "log_a_fractional",
                      lambda q, s, alphas: np.full(len(alphas), np.nan))
  assert fast_rdp.epsilon_refined(q, sigma, rounds, delta) == fast_rdp.epsilon(
      q, sigma, rounds, delta)


def test_only_the_series_that_has_not_ended_is_given_up(monkeypatch):
  """At q = 0.01, σ = 0.5 the series at α = 1.1 runs past 448 terms, those at 2.5 and 5.5
  end within 192: with the cap at 192 only α = 1.1 is NaN, the others are dp-accounting's.

  Catches a give-up that stops the remaining orders too.
  """
  monkeypatch.setattr(fast_rdp, "_MAX_TERMS", 192)
  got = fast_rdp.log_a_fractional(0.01, 0.5, np.array([1.1, 2.5, 5.5]))
  assert np.isnan(got[0])
  theirs = [dp_rdp._compute_log_a_frac(0.01, 0.5, a) for a in (2.5, 5.5)]
  np.testing.assert_allclose(got[1:], theirs, rtol=1e-10)


@pytest.mark.parametrize("log_terms,signs,expected", [
    ([math.log(3.0), 0.0], [1.0, -1.0], math.log(2.0)),
    ([0.0, 0.0], [1.0, -1.0], math.nan),  # exactly 0
    ([0.0, math.log(2.0)], [1.0, -1.0], math.nan),  # negative
    ([700.0, 700.0], [1.0, 1.0], 700.0 + math.log(2.0)),  # summed around the peak: no overflow
])
def test_a_signed_sum_that_is_not_positive_is_nan(log_terms, signs, expected):
  got = fast_rdp._signed_log_sum(np.array(log_terms), np.array(signs))
  if math.isnan(expected):
    assert math.isnan(got)
  else:
    assert got == pytest.approx(expected, rel=1e-14)
