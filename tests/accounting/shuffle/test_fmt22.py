"""FMT22 closed form, Eq. (2) and numerical bounds; notes §2.3, §2.6, §2.8 D4."""
import math
from typing import Sequence

import numpy as np
import pytest
from scipy import stats

from tff_idp.accounting.shuffle import fmt22


@pytest.mark.parametrize("n,e0,d,closed,eq2", [
    (10_000, 1.0, 1e-8, 0.264230, 0.240805),
    (10_000, 0.5, 1e-8, 0.119926, 0.106422),
    (100_000, 4.0, 1e-6, 0.537804, None),
])
def test_closed_forms(n, e0, d, closed, eq2):
  assert fmt22.closed_form_valid(n, e0, d)
  assert fmt22.closed_form(n, e0, d) == pytest.approx(closed, abs=5e-7)
  if eq2 is not None:
    assert fmt22.eq2(n, e0, d) == pytest.approx(eq2, abs=5e-7)


def test_closed_form_outside_regime_returns_eps0():
  assert not fmt22.closed_form_valid(1000, 3.0, 1e-8)
  assert fmt22.closed_form(1000, 3.0, 1e-8) == 3.0


def test_apes_copy_as_shipped():
  # privAmp/computeamplification.py with 10 halvings, step 100, typo.
  assert fmt22.numeric_apple(10_000, 1.0, 1e-8, 10, fix_typo=False) == pytest.approx(0.069670, abs=5e-7)
  assert fmt22.numeric_apple(10_000, 0.5, 1e-8, 10, fix_typo=False) == pytest.approx(0.027522, abs=5e-7)


def test_apple_first_release_loop_reproduces_notes():
  assert fmt22.numeric_apple(10_000, 1.0, 1e-8, loop="half") == pytest.approx(0.07050, abs=5e-6)
  assert fmt22.numeric_apple(10_000, 0.5, 1e-8, loop="half") == pytest.approx(0.02736, abs=5e-6)


@pytest.mark.slow
def test_apple_first_release_loop_large_n():
  assert fmt22.numeric_apple(100_000, 4.0, 1e-6, loop="half") == pytest.approx(0.17248, abs=5e-6)


def test_deltaqadd_typo_is_harmless():
  # P_c and Q_c are mirror images, so the q-side never exceeds the p-side.
  for loop in ("expectation", "half"):
    a = fmt22.numeric_apple(10_000, 1.0, 1e-8, 20, fix_typo=True, loop=loop)
    b = fmt22.numeric_apple(10_000, 1.0, 1e-8, 20, fix_typo=False, loop=loop)
    assert a == b
  assert fmt22.numeric_apple(10_000, 1.0, 1e-8, 20) == pytest.approx(0.069537, abs=5e-6)


@pytest.mark.parametrize("n,e0,d,exact,apple", [
    (10_000, 1.0, 1e-8, 0.068880, 0.069537),
    (10_000, 0.5, 1e-8, 0.027238, 0.027464),
    (100_000, 4.0, 1e-6, 0.169770, 0.175078),
])
def test_exact_numeric_is_below_blocked_loops(n, e0, d, exact, apple):
  got = fmt22.numeric(n, e0, d)
  assert got == pytest.approx(exact, abs=5e-6)
  assert got <= apple
  assert got <= fmt22.closed_form(n, e0, d)


def test_errors():
  with pytest.raises(ValueError, match="n="):
    fmt22.closed_form(1, 1.0, 1e-8)
  with pytest.raises(ValueError, match="epsilon0"):
    fmt22.numeric(100, 0.0, 1e-8)
  with pytest.raises(ValueError, match="delta"):
    fmt22.eq2(100, 1.0, 1.0)
  with pytest.raises(ValueError, match="loop"):
    fmt22.numeric_apple(100, 1.0, 1e-8, loop="mid")


# --- Small n against the clone reduction summed here ---------------------------------------


def _pair(c: int, eps: float, alpha: float):
  """(D_{e^ε}(P_c‖Q_c), D_{e^ε}(Q_c‖P_c)) from the two shifted Bin(c, ½) pmfs."""
  k = np.arange(c + 2)
  b, bm = stats.binom.pmf(k, c, 0.5), stats.binom.pmf(k - 1, c, 0.5)
  p = alpha * bm + (1 - alpha) * b
  q = (1 - alpha) * bm + alpha * b
  return (float(np.maximum(p - math.exp(eps) * q, 0).sum()),
          float(np.maximum(q - math.exp(eps) * p, 0).sum()))


def _clone_delta(pmf: Sequence[float], eps_target: float, eps: float) -> float:
  """Σ_c pmf[c]·D_{e^ε}(P_c‖Q_c): the exact δ(ε) of the clone reduction (terms with
  pmf[c] < 1e-18 skipped: together they move δ by < 1e-15)."""
  alpha = math.exp(eps_target) / (1 + math.exp(eps_target))
  return sum(w * _pair(c, eps, alpha)[0] for c, w in enumerate(pmf) if w > 1e-18)


def _alpha(eps0: float) -> float:
  return math.exp(eps0) / (1 + math.exp(eps0))


@pytest.mark.parametrize("c", [0, 1, 5, 40])
@pytest.mark.parametrize("eps", [0.0, 0.3, 0.9])
def test_onestep_is_the_pair_divergence(c, eps):
  """Apple's ``onestep`` (CDF cut-off form) equals both hockey-stick divergences summed
  over the two shifted Bin(c, ½) pmfs, for ε below the pair's ε0 = 1.

  Catches: a wrong cut-off β(c+1), α and 1−α swapped in P or Q, the Q‖P side computed
  from the P‖Q terms.
  """
  a = _alpha(1.0)
  pq, qp = _pair(c, eps, a)
  assert fmt22.onestep(c, eps, a, True) == pytest.approx(pq, rel=1e-9, abs=1e-15)
  assert fmt22.onestep(c, eps, a, False) == pytest.approx(qp, rel=1e-9, abs=1e-15)
  # P_c and Q_c are mirror images (k ↦ c + 1 − k), so the two directions are equal: the
  # blocked loops' p- and q-side sums differ only by rounding (and the shipped typo).
  assert pq == pytest.approx(qp, rel=1e-12, abs=1e-15)


def test_binary_search_by_hand():
  """The reference bisection halves [0, eps_upper] ``num_iterations`` times keeping δ < δ
  target at the upper end: δ(ε) = e^{−ε}, target e^{−0.3}, 3 halvings → 0.375
  (0.5 ok, 0.25 not, 0.375 ok); 30 halvings land within 2^-30 above 0.3.

  Catches: the halves swapped, the lower end returned, iterations off by one.
  """
  fn = lambda e: math.exp(-e)
  assert fmt22.binary_search(fn, math.exp(-0.3), 3, 1.0) == 0.375
  got = fmt22.binary_search(fn, math.exp(-0.3), 30, 1.0)
  assert 0.3 <= got <= 0.3 + 2**-30
  assert fmt22.binary_search(fn, math.exp(-0.3), 0, 0.7) == 0.7


def test_closed_form_regime_boundary():
  """FMT22's regime is ε0 ≤ ln(n/(16 ln(4/δ))), boundary included.

  Catches: ``<`` for ``≤`` at the edge, a constant other than 16 or 4.
  """
  n, d = 5000, 1e-6
  edge = math.log(n / (16 * math.log(4 / d)))
  assert fmt22.closed_form_valid(n, edge, d)
  assert not fmt22.closed_form_valid(n, math.nextafter(edge, 10.0), d)
  assert fmt22.closed_form_valid(n, edge * (1 - 1e-9), d)
  assert fmt22.closed_form(n, math.nextafter(edge, 10.0), d) == math.nextafter(edge, 10.0)
  a = 8 * math.sqrt(math.exp(edge) * math.log(4 / d) / n)
  c = 8 * math.exp(edge) / n
  e = math.log(1 + a + c)
  assert fmt22.closed_form(n, edge, d) == pytest.approx(
      math.log(1 + (1 - math.exp(-edge)) / (1 + math.exp(-edge - e)) * (a + c)), rel=1e-12)


@pytest.mark.parametrize("n", [1000, 999])
def test_blocked_loops_over_approximate_the_exact_delta(n):
  """Apple's blocked δ(ε) (both block layouts, n even and odd) is ≥ the exact clone
  reduction δ(ε) summed here, and its ``upper_bound=False`` form is ≤ it; with a small
  ``delta_upper`` it stops at that value.

  Catches: block endpoints charged with the smaller divergence (an under-estimate), a
  block's mass miscounted, the unexplored mass not added, the early-stop value wrong.
  """
  eps0, p = 1.0, math.exp(-1.0)
  a = _alpha(eps0)
  binom = stats.binom(n - 1, p)
  pmf = binom.pmf(np.arange(n))
  mass = lambda lo, hi: float(binom.cdf(hi) - binom.cdf(lo) + binom.pmf(lo))
  for eps in (0.05, 0.12, 0.3):
    exact = _clone_delta(pmf, eps0, eps)
    up = fmt22.apple_deltacomp(n, (n - 1) * p, mass, a, eps, 1.0, 100)
    lo = fmt22.apple_deltacomp(n, (n - 1) * p, mass, a, eps, 1.0, 100, upper_bound=False)
    half = fmt22.apple_deltacomp_half(n, eps0, eps, 1.0, 100)
    assert lo <= exact * (1 + 1e-9) and exact <= up * (1 + 1e-9) and exact <= half * (1 + 1e-9)
    assert up <= exact + 0.05 and half <= exact + 0.05  # blocks of 100 are not too coarse
  assert fmt22.apple_deltacomp(n, (n - 1) * p, mass, a, 0.01, 1e-6, 100) == 1e-6
  assert fmt22.apple_deltacomp_half(n, eps0, 0.01, 1e-6, 100) == 1e-6


@pytest.mark.parametrize("loop", ["expectation", "half"])
def test_numeric_apple_certifies_delta(loop):
  """Apple's numeric ε at n = 1000, ε0 = 1, δ = 1e-4 certifies δ for the exact reduction
  (its δ(ε) summed here ≤ 1e-4), is above the exact ε (``numeric``: also checked here to
  be the smallest certified ε) and below ε0 and the closed form.

  Catches: an answer below the true ε (unsound), the search started above the closed form.
  """
  n, eps0, d = 1000, 1.0, 1e-4
  pmf = stats.binom(n - 1, math.exp(-eps0)).pmf(np.arange(n))
  got = fmt22.numeric_apple(n, eps0, d, loop=loop)
  exact = fmt22.numeric(n, eps0, d)
  assert _clone_delta(pmf, eps0, got) <= d
  assert _clone_delta(pmf, eps0, exact) <= d * (1 + 1e-9)
  assert _clone_delta(pmf, eps0, exact - 1e-6) > d
  assert exact < got < fmt22.closed_form(n, eps0, d) < eps0


def test_numeric_apple_outside_regime_searches_below_eps0():
  """Outside the closed form's regime (n = 250, ε0 = 1, δ = 1e-4) the search runs on
  [0, ε0]; the answer never exceeds ε0.

  Catches: the closed form (= ε0 there) or ε0 swapped for another upper end.
  """
  assert not fmt22.closed_form_valid(250, 1.0, 1e-4)
  for loop in ("expectation", "half"):
    got = fmt22.numeric_apple(250, 1.0, 1e-4, loop=loop)
    assert fmt22.numeric(250, 1.0, 1e-4) <= got <= 1.0


def test_numeric_generalized_count_and_target():
  """``numeric`` with a given clone count and target ε: the smallest ε at which that count's
  reduction with α(target) is ≤ δ (summed here); never above the target.

  Catches: the count or the target ignored (ε0's binomial or α used instead), the search
  not run on [0, target] with the given number of halvings.
  """
  from tff_idp.accounting.shuffle import reduction
  probs = np.linspace(0.2, 0.6, 299)
  pmf = np.array([1.0])
  for q in probs:
    pmf = np.convolve(pmf, [1 - q, q])
  count = reduction.poisson_binomial_count(probs)
  got = fmt22.numeric(300, 2.0, 1e-3, count=count, target_epsilon=0.7)
  assert _clone_delta(pmf, 0.7, got) <= 1e-3 * (1 + 1e-9)
  assert _clone_delta(pmf, 0.7, got - 1e-6) > 1e-3
  assert got < 0.7
  # ``iterations`` halvings of [0, target]: 4 give a multiple of 0.7/16 that certifies δ,
  # one grid step less does not.
  coarse = fmt22.numeric(300, 2.0, 1e-3, count=count, target_epsilon=0.7, iterations=4)
  assert coarse / (0.7 / 16) == pytest.approx(round(coarse / (0.7 / 16)), abs=1e-9)
  assert _clone_delta(pmf, 0.7, coarse) <= 1e-3 < _clone_delta(pmf, 0.7, coarse - 0.7 / 16)
  assert fmt22.numeric(300, 0.7, 1e-3, iterations=4) / (0.7 / 16) == pytest.approx(
      round(fmt22.numeric(300, 0.7, 1e-3, iterations=4) / (0.7 / 16)), abs=1e-9)


@pytest.mark.parametrize("args,match", [
    ((2.5, 1.0, 1e-8), "n="),
    ((100, math.inf, 1e-8), "epsilon0"),
    ((100, -1.0, 1e-8), "epsilon0"),
    ((100, 1.0, 0.0), "delta"),
])
def test_more_errors(args, match):
  """Non-integer n, non-finite or negative ε0, δ ≤ 0 are refused.

  Catches: a weakened input check.
  """
  with pytest.raises(ValueError, match=match):
    fmt22.eq2(*args)
  with pytest.raises(ValueError, match=match):
    fmt22.closed_form_valid(*args)


def test_eq2_by_hand_and_valid_edges():
  """Eq. (2) of the APES paper: ln(1 + (e^ε−1)/(e^ε+1)·(8√(e^ε ln(4/δ))/√n + 8e^ε/n)), by hand
  at a point off the notes' table; n = 2 and δ just below 1 are valid inputs.

  Catches: a wrong constant or power in Eq. (2), a settings check that refuses n = 2.
  """
  n, e, d = 3000, 0.7, 1e-5
  em = math.exp(e)
  want = math.log(1 + (em - 1) / (em + 1) * (8 * math.sqrt(em * math.log(4 / d)) / math.sqrt(n)
                                              + 8 * em / n))
  assert fmt22.eq2(n, e, d) == pytest.approx(want, rel=1e-13)
  assert fmt22.eq2(2, 0.1, 0.999) > 0
  assert 0 < fmt22.numeric(2, 0.5, 0.3) <= 0.5
  assert isinstance(fmt22.closed_form(1000, 3.0, 1e-8), float)


def test_apple_blocked_loop_fixes_the_q_side_typo_by_default():
  """Property: by default the blocked loop charges the q-side block the larger of its two
  endpoint divergences (``fix_typo=True``). At n = 2,000, ε0 = 1, ε = 0.12 the shipped
  typo (``max(upper, upper)``) gives about half that δ (3.7e-6 against 6.7e-6; the exact
  clone reduction's is 2.0e-6), so the typo is not harmless at every (n, ε) even where
  ``numeric_apple``'s ε is unchanged. Bug caught: the typo's form as the default (of the
  loops or of ``numeric_apple``)."""
  n, eps0, eps = 2000, 1.0, 0.12
  p = math.exp(-eps0)
  binom = stats.binom(n - 1, p)
  mass = lambda lo, hi: float(binom.cdf(hi) - binom.cdf(lo) + binom.pmf(lo))
  args = (n, (n - 1) * p, mass, _alpha(eps0), eps, 1.0, 100)
  fixed = fmt22.apple_deltacomp(*args, fix_typo=True)
  typo = fmt22.apple_deltacomp(*args, fix_typo=False)
  assert fmt22.apple_deltacomp(*args) == fixed
  assert typo < 0.75 * fixed
  assert _clone_delta(binom.pmf(np.arange(n)), eps0, eps) <= fixed * (1 + 1e-9)
  # The first release's loop too (there the typo moves δ only in the last digits: n odd).
  half = lambda **kw: fmt22.apple_deltacomp_half(n + 1, eps0, eps, 1.0, 100, **kw)
  assert half() == half(fix_typo=True) != half(fix_typo=False)
  # And the reported ε: at n = 5,000, δ = 1e-8 the typo lowers it (0.10163 against 0.10285;
  # both above the exact 0.09903), so numeric_apple's default is the fixed form too.
  fixed_eps = fmt22.numeric_apple(5000, 1.0, 1e-8, fix_typo=True)
  assert fmt22.numeric_apple(5000, 1.0, 1e-8) == fixed_eps
  assert fmt22.numeric_apple(5000, 1.0, 1e-8, fix_typo=False) < fixed_eps


# --- Apple's blocked loops on a small n, blocks laid out by hand ---------------------------


def _spec_blocked_delta(blocks, mass_of, divergence, delta_upper=1.0, upper_bound=True,
                        q_side=None, charge_unexplored=True):
  """The blocked loop's specification, block list given: charge each block
  ``mass·max(d(lower), d(upper))`` (``min`` for the lower bound), return ``delta_upper``
  once a running sum exceeds it, and stop once the unexplored mass is below both sums
  (adding it to each for the upper bound); a block reaching below c = 0 is charged from
  c = 0, and after the last block the upper bound adds the mass no block reached
  (``charge_unexplored``; Apple's shipped loop does not).
  ``q_side`` charges the q sum differently (the shipped typo). Returns (δ, number of
  blocks whose mass was asked for)."""
  pick = max if upper_bound else min
  unclamped = divergence
  divergence = lambda c: unclamped(max(0, c))
  q_side = q_side or (lambda lo, hi: pick(divergence(hi), divergence(lo)))
  dp = dq = used = 0.0
  for asked, (lo, hi) in enumerate(blocks, start=1):
    m = mass_of(lo, hi)
    if max(dp, dq) > delta_upper:
      return delta_upper, asked
    if 1 - used < dp and 1 - used < dq:
      return (max(dp, dq) + 1 - used if upper_bound else max(dp, dq)), asked
    dp += m * pick(divergence(hi), divergence(lo))
    dq += m * q_side(lo, hi)
    used += m
  unexplored = max(0.0, 1.0 - used) if upper_bound and charge_unexplored else 0.0
  return max(dp, dq) + unexplored, len(blocks)


# n = 7, step 2, blocks stepping out from 2.3: ceil(4.3) = 5 → [3, 5] (the first block
# spans step + 1), ceil(0.3) = 1 → [1, 2], ceil(6.3) = 7 clamped to n − 1 → [6, 6],
# ceil(−1.7) = −1 clamped to 0 → [0, 0]; the third round's blocks [8, 9] and [−3, −2] are
# out of scope.
_N7_BLOCKS = [(3, 5), (1, 2), (6, 6), (0, 0)]
_W7 = [0.05, 0.10, 0.20, 0.30, 0.20, 0.10, 0.05]


def _recording(weights):
  calls = []

  def mass(lo, hi):
    calls.append((lo, hi))
    return float(sum(weights[lo:hi + 1]))
  return mass, calls


@pytest.mark.parametrize("charge", [False, True])
@pytest.mark.parametrize("upper_bound,fix_typo", [(True, True), (False, True), (True, False)])
def test_apple_deltacomp_blocks_by_hand_to_the_final_return(upper_bound, fix_typo, charge):
  """Property: on n = 7, step 2, expectation 2.3 the loop asks for the masses of exactly
  the blocks laid out by hand above (each clone count once, clamped at 0 and n − 1) and,
  with half the mass outside them (so no early stop), returns Σ_b m_b·max(d(lo), d(hi))
  (``min`` for the lower bound) from its final return: the larger of the two sums, which
  under the shipped typo (q side charged d(hi) only) is the p sum; with
  ``charge_unexplored`` the upper bound adds the 0.5 of mass no block reached (the
  shipped loop, the default, leaves it out).

  Bugs caught: a block range check off by one at n − 1 or 0, a clamp dropped, the first
  block's extra count moved, the endpoints' divergences combined wrongly, the final
  return replaced or returning one side's sum, the unreached mass not charged."""
  a, eps = _alpha(1.0), 0.1
  d = lambda c: fmt22.onestep(c, eps, a, True)
  half = [w / 2 for w in _W7]
  mass, calls = _recording(half)
  got = fmt22.apple_deltacomp(7, 2.3, mass, a, eps, 1.0, 2, upper_bound=upper_bound,
                              fix_typo=fix_typo, charge_unexplored=charge)
  assert calls == _N7_BLOCKS
  pick = max if upper_bound else min
  masses = [0.30, 0.15, 0.025, 0.025]
  p_sum = sum(m * pick(d(lo), d(hi)) for (lo, hi), m in zip(_N7_BLOCKS, masses))
  q_sum = sum(m * d(hi) for (lo, hi), m in zip(_N7_BLOCKS, masses))
  assert fix_typo or q_sum < 0.9 * p_sum  # the typo's q sum is visibly the smaller
  want, asked = _spec_blocked_delta(
      _N7_BLOCKS, _recording(half)[0], d, upper_bound=upper_bound,
      q_side=None if fix_typo else (lambda lo, hi: d(hi)), charge_unexplored=charge)
  assert asked == 4
  assert want == pytest.approx(p_sum + (0.5 if upper_bound and charge else 0.0), rel=1e-12)
  assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("upper_bound", [True, False])
@pytest.mark.parametrize("fix_typo", [True, False])
def test_apple_deltacomp_stops_once_the_unexplored_mass_is_below_both_sums(
    upper_bound, fix_typo):
  """Property: the loop stops at the second block once the unexplored mass (here 0.14)
  is below both running sums, adding it to the larger for the upper bound. Under the
  shipped q-side typo the q sum (0.86·d(5) ≈ 0.124), and for the lower bound both sums,
  are still below it, so those loops go on until no mass is left (the third block).

  Bugs caught: the early stop on either sum (``or`` for ``and``), the unexplored mass not
  added or added to the lower bound, the stop tested against the explored mass."""
  a, eps = _alpha(1.0), 0.0
  d = lambda c: fmt22.onestep(c, eps, a, True)
  weights = [0.0, 0.07, 0.07, 0.30, 0.26, 0.30, 0.0]  # [3, 5] holds 0.86
  typo_q = (None if fix_typo or not upper_bound
            else lambda lo, hi: d(hi))
  mass, calls = _recording(weights)
  got = fmt22.apple_deltacomp(7, 2.3, mass, a, eps, 1.0, 2, upper_bound=upper_bound,
                              fix_typo=fix_typo)
  want, asked = _spec_blocked_delta(_N7_BLOCKS, _recording(weights)[0], d,
                                    upper_bound=upper_bound, q_side=typo_q,
                                    charge_unexplored=False)
  assert 0.86 * d(5) < 0.14 < 0.86 * d(3)  # the setting separates the two sums
  stops_early = upper_bound and fix_typo  # else a sum stays at 0.86·d(5) < 0.14
  assert len(calls) == asked == (2 if stops_early else 3)
  if stops_early:
    assert want == pytest.approx(
        0.86 * (max if upper_bound else min)(d(3), d(5)) + (0.14 if upper_bound else 0.0),
        rel=1e-12)
  assert got == pytest.approx(want, rel=1e-12)


def test_apple_deltacomp_caps_at_delta_upper_after_a_block():
  """Property: once a running sum exceeds ``delta_upper`` the loop returns it at the next
  block (not before a block is charged, not with the sum). Bug caught: the cap tested on
  the wrong sum or returned as the sum."""
  a, eps = _alpha(1.0), 0.0
  mass, calls = _recording(_W7)
  cap = 0.05  # 0.8·max(d(3), d(5)) ≈ 0.14 exceeds it after the first block
  assert fmt22.apple_deltacomp(7, 2.3, mass, a, eps, cap, 2) == cap
  assert calls == _N7_BLOCKS[:2]


@pytest.mark.parametrize("n,blocks", [
    # n = 8: the centre c = 4 alone first; blk 1: max(round(5), round(7)) − 1 = 6 → [5, 6],
    # max(round(3), round(1)) = 3 → [2, 3]; blk 3: 9 − 1 = 8 → [7, 8], 1 → [0, 1].
    (8, [(4, 4), (5, 6), (2, 3), (7, 8), (0, 1)]),
    # n = 7 (odd: ± 0.1 shift): max(round(4.4), round(6.4)) − 1 = 5 → [4, 5],
    # max(round(2.6), round(0.6)) = 3 → [2, 3]; blk 3: 8 − 1 = 7 → [6, 7], 1 → [0, 1].
    (7, [(4, 5), (2, 3), (6, 7), (0, 1)]),
    # n = 9: max(round(5.4), round(7.4)) − 1 = 6 → [5, 6], max(round(3.6), round(1.6)) = 4
    # → [3, 4]; blk 3: [7, 8], [1, 2]; blk 5: [9, 10] (no mass), 0 → [−1, 0] (Bin's pmf(0)).
    (9, [(5, 6), (3, 4), (7, 8), (1, 2), (9, 10), (-1, 0)]),
    # n = 15: above, round(blk + 9.4) − 1 → [blk + 7, blk + 8]; below, round(7.6 − blk)
    # → [7 − blk, 8 − blk] (7.5 − blk alone would round half to even: 6, 4, 2, 0).
    (15, [(8, 9), (6, 7), (10, 11), (4, 5), (12, 13), (2, 3), (14, 15), (0, 1)]),
])
@pytest.mark.parametrize("eps0,eps", [(0.3, 0.0), (0.8, 0.1), (1.0, 0.3), (2.0, 0.0), (3.0, 0.5),
                                      (4.0, 0.2)])
def test_apple_deltacomp_half_blocks_by_hand(n, blocks, eps0, eps):
  """Property: Apple's first-release loop on a small n equals the blocked specification
  over the blocks laid out by hand around n/2 (the centre term first for even n), with
  Bin(n−1, e^{−ε0}) masses; at ε0 = 3 most mass lies at small c, so the unexplored-mass
  stop decides. Bugs caught: the centre term dropped or charged on one side, the blocks'
  rounding or the upper side's −1 changed, the loop's range, the stop or its sums."""
  p = math.exp(-eps0)
  a = _alpha(eps0)
  binom = stats.binom(n - 1, p)
  mass = lambda lo, hi: float(binom.cdf(hi) - binom.cdf(lo) + binom.pmf(lo))
  d = lambda c: fmt22.onestep(c, eps, a, True)
  want, _ = _spec_blocked_delta(blocks, mass, d)
  got = fmt22.apple_deltacomp_half(n, eps0, eps, 1.0, 2)
  assert got == pytest.approx(want, rel=1e-12)
  typo, _ = _spec_blocked_delta(blocks, mass, d, q_side=lambda lo, hi: d(hi))
  assert fmt22.apple_deltacomp_half(n, eps0, eps, 1.0, 2, fix_typo=False) == pytest.approx(
      typo, rel=1e-12)


def test_apple_deltacomp_blocks_from_a_high_expectation():
  """Property: from expectation 4.7 on n = 7 (step 2) the upper side runs out first:
  [5, 6] (ceil(6.7) = 7 clamped to 6), then [3, 4], and once blocks above n − 1 are out
  of scope the lower side goes on alone: [1, 2], then [0, 0] (ceil(−1.3) = −1, clamped).
  Bug caught: an out-of-scope upper block ending the round (``break`` for ``continue``),
  which drops the lower side's remaining mass from the sums."""
  a, eps = _alpha(1.0), 0.1
  d = lambda c: fmt22.onestep(c, eps, a, True)
  half = [w / 2 for w in _W7]
  mass, calls = _recording(half)
  got = fmt22.apple_deltacomp(7, 4.7, mass, a, eps, 1.0, 2)
  layout = [(5, 6), (3, 4), (1, 2), (0, 0)]
  assert calls == layout
  want, _ = _spec_blocked_delta(layout, _recording(half)[0], d, charge_unexplored=False)
  assert got == pytest.approx(want, rel=1e-12)


def test_blocked_loops_cap_only_strictly_above_delta_upper():
  """Property: a running sum exactly equal to ``delta_upper`` does not stop either loop
  (the cap applies strictly above it). Apple's loop, n = 7 with 0.99 of the mass in the
  first block and the cap set to the sums after it: the next check stops on the
  unexplored mass and returns cap + 0.01. The first release, n = 2 (the centre c = 1,
  then [2, 3] with no mass and [−1, 0] holding Bin(1, p)'s pmf(0)), cap at the centre
  term's sums: the loop ends through its final, uncapped return, above the cap.
  Bug caught: ``>=`` for ``>`` in either cap."""
  a, eps = _alpha(1.0), 0.0
  weights = [0.0, 0.005, 0.005, 0.33, 0.33, 0.33, 0.0]
  m1 = float(sum(weights[3:6]))
  cap = max(m1 * max(fmt22.onestep(5, eps, a, True), fmt22.onestep(3, eps, a, True)),
            m1 * max(fmt22.onestep(5, eps, a, False), fmt22.onestep(3, eps, a, False)))
  got = fmt22.apple_deltacomp(7, 2.3, _recording(weights)[0], a, eps, cap, 2)
  want, asked = _spec_blocked_delta(_N7_BLOCKS, _recording(weights)[0],
                                    lambda c: fmt22.onestep(c, eps, a, True), cap,
                                    charge_unexplored=False)
  assert asked == 2 and want == pytest.approx(cap + 1 - m1, rel=1e-12)
  assert got == pytest.approx(want, rel=1e-12)
  n, eps0, eps = 2, 1.0, 0.3
  a = _alpha(eps0)
  binom = stats.binom(n - 1, math.exp(-eps0))
  pc = float(binom.pmf(1))
  cap = max(pc * fmt22.onestep(1, eps, a, True), pc * fmt22.onestep(1, eps, a, False))
  mass = lambda lo, hi: float(binom.cdf(hi) - binom.cdf(lo) + binom.pmf(lo))
  want, asked = _spec_blocked_delta([(1, 1), (2, 3), (-1, 0)], mass,
                                    lambda c: fmt22.onestep(c, eps, a, True), cap)
  got = fmt22.apple_deltacomp_half(n, eps0, eps, cap, 2)
  assert asked == 3 and want > cap
  assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("n", [20, 99, 100, 150, 250])
def test_numeric_apple_never_under_reports_at_small_n(n):
  """Property (privacy): Apple's numeric ε is never below the exact clone reduction's,
  for cohorts of up to a few blocks too (step 100). The shipped loops were not: the
  expectation loop has no block at n ≤ step and reported ε ≈ 1e-6, and the first
  release charged a block reaching below c = 0 its smallest divergence (ε 0.426 against
  the exact 0.512 at n = 150). Their δ(ε) stays at or above the exact one at ε = 0.3.
  Bugs caught: the unreached mass not charged at the expectation loop's end (or
  ``numeric_apple`` not asking for it), a block below c = 0 charged by its upper end."""
  eps0, delta = 1.0, 1e-6
  exact = fmt22.numeric(n, eps0, delta)
  for loop in ("expectation", "half"):
    assert fmt22.numeric_apple(n, eps0, delta, loop=loop) >= exact * (1 - 1e-9), loop
  p = math.exp(-eps0)
  binom = stats.binom(n - 1, p)
  mass = lambda lo, hi: float(binom.cdf(hi) - binom.cdf(lo) + binom.pmf(lo))
  exact_delta = _clone_delta(binom.pmf(np.arange(n)), eps0, 0.3)
  args = (n, (n - 1) * p, mass, _alpha(eps0), 0.3, 1.0, 100)
  assert fmt22.apple_deltacomp(*args, charge_unexplored=True) >= exact_delta * (1 - 1e-9)
  if n <= 100:  # as shipped (EoN's published numeric keeps it): no block, δ = 0
    assert fmt22.apple_deltacomp(*args) == 0.0
  assert fmt22.apple_deltacomp_half(n, eps0, 0.3, 1.0, 100) >= exact_delta * (1 - 1e-9)


@pytest.mark.parametrize("fix_typo", [True, False])
@pytest.mark.parametrize("n,eps0,step", [
    (1000, 1.0, 10),  # the first release's typo moves its ε here
    (500, 1.0025736, 20),  # (n − 1)e^{−ε0} = 183.1: one trial less would start at 183
])
def test_numeric_apple_is_the_bisection_of_its_loop_with_binomial_block_masses(
    fix_typo, n, eps0, step):
  """Property (the definition): ``numeric_apple`` bisects [0, eps_upper] (the closed form
  inside FMT22's regime, else ε0) on Apple's loop with exact Bin(n − 1, e^{−ε0}) block
  masses stepping out from (n − 1)·e^{−ε0}, charging the unreached mass, with the
  caller's ``fix_typo``; ``loop="half"`` on the first release's loop the same way.
  Bugs caught: the binomial's trial count or the expectation off by one, ``fix_typo`` not
  passed on (either loop), the unreached mass not asked for."""
  delta, it = 1e-4, 25
  p = math.exp(-eps0)
  binom = stats.binom(n - 1, p)
  mass = lambda lo, hi: float(binom.cdf(hi) - binom.cdf(lo) + binom.pmf(lo))
  upper = fmt22.closed_form(n, eps0, delta)
  assert upper < eps0  # inside the regime
  want = fmt22.binary_search(
      lambda e: fmt22.apple_deltacomp(n, (n - 1) * p, mass, _alpha(eps0), e, delta, step,
                                      True, fix_typo, charge_unexplored=True),
      delta, it, upper)
  assert fmt22.numeric_apple(n, eps0, delta, it, step, fix_typo) == want
  half = fmt22.binary_search(
      lambda e: fmt22.apple_deltacomp_half(n, eps0, e, delta, step, fix_typo), delta, it,
      upper)
  assert fmt22.numeric_apple(n, eps0, delta, it, step, fix_typo, loop="half") == half


def test_numeric_apple_searches_below_the_closed_form_inside_its_regime():
  """Property: inside FMT22's regime, ε0 < ln(n/(16 ln(4/δ))), the bisection runs over
  [0, closed form], so the answer is a multiple of closed_form/2^iterations; just inside
  the boundary (n = 10⁴, δ = 1e-8: ε0 = 3.445 against 3.4528) too. Bugs caught: the
  regime's constants changed (17 for 16, 5/δ for 4/δ: the search then starts from ε0)."""
  n, delta, it = 10_000, 1e-8, 12
  for eps0 in (1.0, 3.445):
    upper = fmt22.closed_form(n, eps0, delta)
    assert upper < eps0
    got = fmt22.numeric_apple(n, eps0, delta, it)
    k = got / upper * 2**it
    assert k == pytest.approx(round(k), abs=1e-6), (eps0, k)
