"""Clone reduction: exact pair divergence, clone-count pmfs, bisection."""
import math

import numpy as np
import pytest
from scipy import stats

from tff_idp.accounting.shuffle import reduction


def brute_pair(c, eps, alpha):
  k = np.arange(c + 2)
  b, bm = stats.binom.pmf(k, c, 0.5), stats.binom.pmf(k - 1, c, 0.5)
  p = alpha * bm + (1 - alpha) * b
  q = (1 - alpha) * bm + alpha * b
  return (np.maximum(p - math.exp(eps) * q, 0).sum(),
          np.maximum(q - math.exp(eps) * p, 0).sum())


@pytest.mark.parametrize("c", [0, 1, 2, 7, 40])
@pytest.mark.parametrize("alpha", [0.55, 0.73, 0.95])
@pytest.mark.parametrize("eps", [0.0, 0.05, 0.4, 3.0])
def test_pair_divergence_brute_force_and_symmetric(c, alpha, eps):
  pq, qp = brute_pair(c, eps, alpha)
  assert pq == pytest.approx(qp, abs=1e-15)  # mirror symmetry k -> c+1-k
  assert reduction.pair_divergence(c, eps, alpha) == pytest.approx(pq, abs=1e-14)


def test_pair_divergence_decreasing_in_c():
  d = reduction.pair_divergence(np.arange(0, 3000), 0.05, reduction.alpha_for_epsilon(1.0))
  assert np.all(np.diff(d) <= 1e-16)


def test_poisson_binomial_matches_convolution():
  rng = np.random.default_rng(3)
  p = rng.uniform(0, 1, 300)
  ref = np.array([1.0])
  for pj in p:
    ref = np.convolve(ref, [1 - pj, pj])
  cc = reduction.poisson_binomial_count(p, tail=1e-30)
  full = np.zeros(p.size + 1)
  full[cc.support] = cc.pmf
  assert np.all(np.abs(full - ref) <= 1e-30 + 1e-12 * ref)
  assert cc.tail_mass <= 1e-30


def test_poisson_binomial_equal_probabilities_is_binomial():
  cc = reduction.poisson_binomial_count(np.full(2000, 0.3))
  bc = reduction.binomial_count(2000, 0.3)
  lo = max(cc.offset, bc.offset)
  hi = min(cc.offset + cc.pmf.size, bc.offset + bc.pmf.size)
  np.testing.assert_allclose(cc.pmf[lo - cc.offset:hi - cc.offset],
                             bc.pmf[lo - bc.offset:hi - bc.offset], rtol=1e-9,
                             atol=1e-17)  # entries next to trimmed tails lose <= tail
  assert cc.tail_mass <= 1e-18 and bc.tail_mass <= 1e-18
  assert cc.mean == pytest.approx(600, rel=1e-12)


def test_poisson_binomial_ten_thousand_fast():
  p = np.random.default_rng(0).uniform(0.2, 0.7, 10_000)
  cc = reduction.poisson_binomial_count(p)
  assert cc.pmf.sum() + cc.tail_mass == pytest.approx(1.0, abs=1e-12)
  assert cc.tail_mass <= 1e-18
  assert cc.mean == pytest.approx(p.sum(), rel=1e-12)


def test_hockey_stick_counts_tail_and_bisection():
  alpha = reduction.alpha_for_epsilon(1.0)
  cc = reduction.CloneCount(10, np.array([0.5, 0.5]), tail_mass=1e-3)
  assert reduction.hockey_stick(cc, 5.0, alpha) == pytest.approx(1e-3)
  eps = reduction.numeric_epsilon(reduction.binomial_count(9999, math.exp(-1)), alpha, 1e-8, 1.0)
  assert eps == pytest.approx(0.068880, abs=5e-6)
  # The answer certifies its δ; a hair less ε does not.
  bc = reduction.binomial_count(9999, math.exp(-1))
  assert reduction.hockey_stick(bc, eps, alpha) <= 1e-8
  assert reduction.hockey_stick(bc, eps - 1e-6, alpha) > 1e-8
  assert reduction.epsilon_for_delta(lambda e: 1.0, 1e-8, 1.0) == math.inf


def test_errors():
  with pytest.raises(ValueError, match=r"\[0, 1\]"):
    reduction.poisson_binomial_count([0.5, 1.5])
  with pytest.raises(ValueError):
    reduction.binomial_count(10, 1.5)
