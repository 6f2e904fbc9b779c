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


@pytest.mark.parametrize("trials,p,tail", [(200, 0.3, 1e-10), (1000, 0.05, 1e-18)])
def test_binomial_count_trims_exactly_the_allowed_tails(trials, p, tail):
  """``binomial_count`` drops from each side the longest run of outcomes whose mass is ≤
  tail/2 (scipy's cdf/sf decide here), records that mass, and keeps the rest unchanged.

  Catches: trimming one outcome too many (mass over the allowed tail, δ under-charged) or
  too few, the dropped mass not recorded.
  """
  b = stats.binom(trials, p)
  cdf = b.cdf(np.arange(trials + 1))
  sf_incl = b.sf(np.arange(trials + 1) - 1)  # Pr[C ≥ k]
  lo = int(np.sum(cdf <= tail / 2))
  hi = trials + 1 - int(np.sum(sf_incl <= tail / 2))
  cc = reduction.binomial_count(trials, p, tail)
  assert cc.offset == lo and cc.offset + cc.pmf.size == hi
  np.testing.assert_allclose(cc.pmf, b.pmf(np.arange(lo, hi)), rtol=1e-12)
  outside = (cdf[lo - 1] if lo else 0.0) + (sf_incl[hi] if hi <= trials else 0.0)
  assert cc.tail_mass == pytest.approx(outside, rel=1e-6, abs=1e-300)
  assert cc.tail_mass <= tail
  np.testing.assert_array_equal(cc.support, np.arange(lo, hi))


def test_trim_degenerate_keeps_the_mode():
  """When the allowed tails would swallow everything, the mode is kept and the rest is
  charged: Bin(2, 0.9) with tail 1.9 keeps c = 2 (0.81), tail mass 0.19.

  Catches: keeping the least likely count, or losing the dropped mass.
  """
  cc = reduction.binomial_count(2, 0.9, tail=1.9)
  assert cc.offset == 2 and cc.pmf.tolist() == pytest.approx([0.81])
  assert cc.tail_mass == pytest.approx(0.19)
  mid = reduction.binomial_count(3, 0.5, tail=1.9)  # pmf ⅛ ⅜ ⅜ ⅛: the first mode, c = 1
  assert mid.offset == 1 and mid.pmf.tolist() == pytest.approx([0.375])
  assert mid.tail_mass == pytest.approx(0.625)


def test_trim_drops_a_tail_of_exactly_the_allowed_mass():
  """A tail whose mass equals tail/2 may be dropped ("mass ≤ tol"): Bin(2, ½) with
  tail ½ drops c = 0 and c = 2 (¼ each), keeps c = 1 and records ½.

  Catches: a strict comparison at the tolerance (``searchsorted`` on the left side).
  """
  cc = reduction.binomial_count(2, 0.5, tail=0.5)
  assert cc.offset == 1 and cc.pmf.tolist() == pytest.approx([0.5])
  assert cc.tail_mass == pytest.approx(0.5)


def test_clone_count_support_and_mean():
  """``support`` starts at ``offset``; ``mean`` is the mean of the kept pmf, renormalised.

  Catches: support off by one, mean not divided by the kept mass.
  """
  cc = reduction.CloneCount(5, np.array([0.2, 0.6]), tail_mass=0.2)
  assert cc.support.tolist() == [5, 6]
  assert cc.mean == pytest.approx((5 * 0.2 + 6 * 0.6) / 0.8)


def test_poisson_binomial_trims_its_window_and_charges_the_tails():
  """For 2000 users the recursion keeps a narrow window (its reason to trim), the mass
  outside it (from a full convolution here) equals ``tail_mass`` ≤ tail, and the kept pmf
  matches the convolution.

  Catches: trimming disabled or done at the wrong cadence (a window of n+1), tails dropped
  without being recorded, or more than ``tail`` dropped.
  """
  p = np.random.default_rng(7).uniform(0.2, 0.7, 2000)
  ref = np.array([1.0])
  for pj in p:
    ref = np.convolve(ref, [1 - pj, pj])
  cc = reduction.poisson_binomial_count(p, tail=1e-12)
  assert cc.pmf.size < 500
  inside = ref[cc.offset:cc.offset + cc.pmf.size]
  # Mass trimmed early would partly have flowed into the window: the kept entries are at
  # most the true ones, short by no more than the recorded tail mass.
  assert np.all(cc.pmf <= inside * (1 + 1e-9) + 1e-300)
  assert np.all(inside - cc.pmf <= cc.tail_mass * (1 + 1e-6))
  np.testing.assert_allclose(cc.pmf, inside, rtol=1e-9, atol=1e-12)
  outside = ref[:cc.offset].sum() + ref[cc.offset + cc.pmf.size:].sum()
  assert 0.0 < outside <= cc.tail_mass * (1 + 1e-6) and cc.tail_mass <= 1e-12
  assert cc.pmf.sum() + cc.tail_mass == pytest.approx(1.0, abs=1e-13)


def test_poisson_binomial_final_trim_is_charged():
  """Below ``trim_every`` users only the final trim runs; the mass it drops (2·(1+20)/2^20
  here, from the binomial pmf by hand) is recorded as ``tail_mass``, and pmf + tail sum to 1.

  Catches: the final trim's mass subtracted or lost (δ under-charged).
  """
  cc = reduction.poisson_binomial_count(np.full(20, 0.5), tail=1e-4)
  ref = stats.binom.pmf(np.arange(21), 20, 0.5)
  outside = ref[:cc.offset].sum() + ref[cc.offset + cc.pmf.size:].sum()
  assert cc.offset == 2 and cc.pmf.size == 17
  assert cc.tail_mass == pytest.approx(outside, rel=1e-12) and outside == pytest.approx(42 / 2**20)
  assert cc.pmf.sum() + cc.tail_mass == pytest.approx(1.0, abs=1e-15)


def test_poisson_binomial_edges():
  """No users: C = 0 surely; probabilities 0 and 1 are valid (C shifts by the 1s).

  Catches: the empty case or the [0, 1] range check mishandled.
  """
  e = reduction.poisson_binomial_count([])
  assert e.offset == 0 and e.pmf.tolist() == [1.0] and e.tail_mass == 0.0
  one = reduction.poisson_binomial_count([0.25])
  assert one.offset == 0 and one.pmf.tolist() == [0.75, 0.25] and one.tail_mass == 0.0
  cc = reduction.poisson_binomial_count([1.0, 0.0, 1.0, 0.5])
  assert cc.support.tolist() == [2, 3] and cc.pmf.tolist() == [0.5, 0.5]
  for bad in ([-0.1], [np.nan], [np.inf]):
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
      reduction.poisson_binomial_count(bad)
  with pytest.raises(ValueError):
    reduction.binomial_count(-1, 0.5)
  with pytest.raises(ValueError):
    reduction.binomial_count(3, -0.1)
  assert reduction.binomial_count(0, 0.3).pmf.tolist() == [1.0]
  none = reduction.binomial_count(5, 0.0)  # every other report a non-clone
  assert none.offset == 0 and none.pmf.tolist() == [1.0] and none.tail_mass == 0.0
  every = reduction.binomial_count(5, 1.0)
  assert every.offset == 5 and every.pmf.tolist() == [1.0] and every.tail_mass == 0.0


def test_pair_divergence_zero_at_and_above_the_pair_epsilon():
  """At ε ≥ ε0 the pair (P_c, Q_c) has no divergence left (likelihood ratio ≤ e^{ε0}):
  d_c = 0 for every c, arrays keep their shape.

  Catches: a negative or non-zero value at ε = ε0, or a scalar for an array input.
  """
  a = reduction.alpha_for_epsilon(0.7)
  c = np.arange(6).reshape(2, 3)
  for eps in (0.7 + 1e-12, 1.5):
    d = reduction.pair_divergence(c, eps, a)
    assert d.shape == (2, 3) and np.all(d == 0.0)
  assert brute_pair(3, 0.7, a)[0] == pytest.approx(0.0, abs=1e-15)
  assert reduction.pair_divergence(np.array([0, 4]), 0.2, a).shape == (2,)
  assert reduction.alpha_for_epsilon(0.0) == 0.5
  assert reduction.alpha_for_epsilon(math.log(3.0)) == pytest.approx(0.75)


def test_hockey_stick_sums_pmf_times_pair_divergence():
  """δ(ε) = Σ_c Pr[C=c]·d_c(ε) + tail mass, each d_c from the brute-force pmfs; ε < 0 is
  refused.

  Catches: weights and counts misaligned (offset ignored), the tail not added.
  """
  a = reduction.alpha_for_epsilon(1.0)
  cc = reduction.CloneCount(3, np.array([0.25, 0.5, 0.25]), tail_mass=1e-6)
  want = sum(w * brute_pair(c, 0.2, a)[0] for c, w in zip((3, 4, 5), (0.25, 0.5, 0.25)))
  assert reduction.hockey_stick(cc, 0.2, a) == pytest.approx(want + 1e-6, rel=1e-12)
  assert reduction.hockey_stick(cc, 0.0, a) > reduction.hockey_stick(cc, 0.2, a)
  with pytest.raises(ValueError, match="epsilon"):
    reduction.hockey_stick(cc, -1e-9, a)


def test_epsilon_for_delta_by_hand():
  """Bisection on δ(ε) = e^{−ε} for δ = e^{−0.3}: 3 halvings of [0, 1] give 0.375, 40
  give 0.3 from above; a lower end ``eps_lo`` is respected; δ(ε) equal to the target
  counts as certified (the smallest ε with δ(ε) ≤ δ), also at ``eps_hi``.

  Catches: the halves swapped, the lower end returned, ``<`` for ``≤`` in either test,
  ``eps_lo`` ignored.
  """
  fn = lambda e: math.exp(-e)
  t = math.exp(-0.3)
  assert reduction.epsilon_for_delta(fn, t, 1.0, iterations=3) == 0.375
  got = reduction.epsilon_for_delta(fn, t, 1.0)
  assert 0.3 <= got <= 0.3 + 2**-39
  assert reduction.epsilon_for_delta(fn, t, 1.0, iterations=2, eps_lo=0.25) == 0.4375
  step = lambda e: 0.1 if e >= 0.5 else 0.2
  assert 0.5 <= reduction.epsilon_for_delta(step, 0.1, 1.0) <= 0.5 + 2**-39
  assert reduction.epsilon_for_delta(step, 0.1, 0.5) == 0.5
  assert reduction.epsilon_for_delta(step, 0.1, 0.4) == math.inf
  bc = reduction.binomial_count(99, math.exp(-1.0))
  coarse = reduction.numeric_epsilon(bc, reduction.alpha_for_epsilon(1.0), 1e-2, 1.0,
                                     iterations=4)
  assert coarse * 16 == int(coarse * 16)  # 4 halvings of [0, 1]: a multiple of 1/16
