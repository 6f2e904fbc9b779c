"""FMT22 "hiding among the clones" bounds for n shuffled ε0-LDP reports.

Feldman, McMillan, Talwar, "Hiding among the clones: a simple and nearly
optimal analysis of privacy amplification by shuffling" (FOCS 2021), and the
reference code apple/ml-shuffling-amplification (copied into the APES repo as
privAmp/computeamplification.py). Three forms:

* :func:`closed_form`: the refined closed form of that code,
  ε = ln(1 + (1−e^{−ε0})/(1+e^{−ε0−e})·(a+c)), a = 8√(e^{ε0} ln(4/δ)/n),
  c = 8e^{ε0}/n, e = ln(1+a+c); valid for ε0 ≤ ln(n/(16 ln(4/δ))).
* :func:`eq2`: the APES paper's Eq. (2) (UniS), the unrefined variant
  ln(1 + (e^{ε0}−1)/(e^{ε0}+1)·(a + c)).
* numerical bounds on the clone reduction (``reduction`` module doc):
  :func:`numeric_apple` is Apple's blocked algorithm (Bin(n−1, e^{−ε0}) mass
  in blocks of ``step``, each block charged its worse endpoint, binary search
  with ``num_iterations`` halvings started at the closed form), with the
  ``deltaqadd = max(deltaq_upperc, deltaq_upperc)`` typo fixed unless
  ``fix_typo=False`` (notes §2.8 D4). P_c and Q_c are mirror images
  (k ↦ c+1−k), so the typo never raises the q-side sum, but that sum enters the
  loop's early stop, so δ(ε) moves: at n = 2,000, ε0 = 1, ε = 0.12
  :func:`apple_deltacomp` gives 6.7e-6 fixed and 3.7e-6 with the typo (the
  exact reduction: 2.0e-6). The reported ε is identical at n = 10⁴ but not
  everywhere: at n = 5,000, ε0 = 1, δ = 1e-8 it is 0.10285 fixed and 0.10163
  with the typo (exact: 0.09903). The fixed form is the default. What moves the
  reported ε is the block layout: Apple's first release (``loop="half"``, blocks
  around n/2) gives the notes' 0.07050 / 0.02736 / 0.17248, the later one
  (``loop="expectation"``, blocks around (n−1)e^{−ε0}, also in the APES copy)
  0.069537 / 0.027464 / 0.175078 at 20 halvings. :func:`numeric` evaluates the same
  hockey-stick divergence exactly, term by term, for any clone-count pmf and
  any target ε (the generalized form used by ``per_user``).

All of these assume every report comes from an ε0-LDP randomizer applied to
that report's own datum (FMT22 Thm 3.1 allows the randomizer to depend on the
position after shuffling, not on the user). See ``per_user`` for the
heterogeneous, user-tied case.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from tff_idp.accounting.shuffle import binomial
from tff_idp.accounting.shuffle import reduction

__all__ = [
    "closed_form", "closed_form_valid", "eq2", "numeric", "numeric_apple",
    "apple_deltacomp", "apple_deltacomp_half", "onestep", "binary_search",
]


def _check(n, epsilon0, delta):
  if int(n) != n or n < 2:
    raise ValueError(f"n={n!r} must be an integer >= 2 (number of shuffled reports).")
  if not math.isfinite(epsilon0) or epsilon0 <= 0:
    raise ValueError(f"epsilon0={epsilon0!r} must be finite and > 0.")
  if not 0.0 < delta < 1.0:
    raise ValueError(f"delta={delta!r} must lie strictly between 0 and 1.")


def closed_form_valid(n: int, epsilon0: float, delta: float) -> bool:
  """FMT22's regime: ε0 ≤ ln(n / (16 ln(4/δ)))."""
  _check(n, epsilon0, delta)
  return epsilon0 <= math.log(n / (16.0 * math.log(4.0 / delta)))


def closed_form(n: int, epsilon0: float, delta: float) -> float:
  """FMT22 refined closed form as in the reference code; ε0 outside its regime."""
  if not closed_form_valid(n, epsilon0, delta):
    return float(epsilon0)
  a = 8.0 * math.sqrt(math.exp(epsilon0) * math.log(4.0 / delta) / n)
  c = 8.0 * math.exp(epsilon0) / n
  e = math.log(1.0 + a + c)
  return math.log(1.0 + (1.0 - math.exp(-epsilon0)) / (1.0 + math.exp(-epsilon0 - e))
                  * (a + c))


def eq2(n: int, epsilon_max: float, delta: float) -> float:
  """APES paper Eq. (2) (UniS baseline): FMT22 at ε_max, unrefined constant."""
  _check(n, epsilon_max, delta)
  em = math.exp(epsilon_max)
  return math.log(1.0 + (em - 1.0) / (em + 1.0)
                  * (8.0 * math.sqrt(em * math.log(4.0 / delta)) / math.sqrt(n)
                     + 8.0 * em / n))


def onestep(c: int, epsilon: float, alpha: float, p_minus_q: bool) -> float:
  """Apple's ``onestep``: D_{e^ε}(P_c‖Q_c) (or Q‖P) via the Bin(c,½) CDF cutoff.

  Kept literally (including no clamp at 0) for parity with the published loop;
  :func:`reduction.pair_divergence` is the vectorized, clamped equivalent.
  """
  e = math.exp(epsilon)
  effeps = math.log(((e + 1) * alpha - 1) / ((1 + e) * alpha - e))
  beta = 1 / (math.exp(effeps) + 1) if p_minus_q else 1 / (math.exp(-effeps) + 1)
  cutoff = beta * (c + 1)
  at, below = binomial.cdf(cutoff, c, 0.5), binomial.cdf(cutoff - 1, c, 0.5)
  p_c = alpha * at + (1 - alpha) * below
  q_c = (1 - alpha) * at + alpha * below
  if p_minus_q:
    return p_c - e * q_c
  return (1 - q_c) - e * (1 - p_c)


def apple_deltacomp(n: int, expectation: float,
                    interval_mass: Callable[[int, int], float],
                    alpha: float, epsilon: float, delta_upper: float, step: int,
                    upper_bound: bool = True, fix_typo: bool = True,
                    charge_unexplored: bool = False) -> float:
  """Apple's blocked δ(ε) loop (computeamplification.py ``deltacomp``).

  Blocks of ``step`` clone counts stepping outward from ``expectation``; each
  block's mass ``interval_mass(lowerc, upperc)`` is charged the larger
  endpoint divergence (monotonicity in c is assumed by the reference code);
  stops once the unexplored mass is below both running sums. With
  ``fix_typo=False`` the q-side uses ``max(upper, upper)`` as shipped.

  As shipped, running out of blocks returns the bare sums, which is not an upper
  bound: with n ≤ step there is no block and δ = 0 for every ε (EoN's published
  numeric keeps this; ``soundness`` shows where it fails). With
  ``charge_unexplored=True`` (what :func:`numeric_apple` uses) the upper bound
  also charges the mass no block reached (:func:`_unexplored`).
  """
  deltap = deltaq = probused = 0.0
  for blk in range(1, int(np.ceil(n / step))):
    for s in range(2):
      if s == 0:
        upperc = int(np.ceil(expectation + blk * step))
        lowerc = upperc - step if blk == 1 else upperc - step + 1
        inscope = lowerc <= n - 1
        if inscope:
          upperc = min(upperc, n - 1)
      else:
        lowerc = int(np.ceil(expectation - blk * step))
        upperc = lowerc + step - 1
        inscope = upperc >= 0
        if inscope:
          lowerc = max(0, lowerc)
      if not inscope:
        continue
      mass = interval_mass(lowerc, upperc)
      if max(deltap, deltaq) > delta_upper:
        return delta_upper
      if 1 - probused < deltap and 1 - probused < deltaq:
        if upper_bound:
          return max(deltap + 1 - probused, deltaq + 1 - probused)
        return max(deltap, deltaq)
      dp_u = onestep(upperc, epsilon, alpha, True)
      dp_l = onestep(lowerc, epsilon, alpha, True)
      dq_u = onestep(upperc, epsilon, alpha, False)
      dq_l = onestep(lowerc, epsilon, alpha, False)
      if upper_bound:
        dpadd = max(dp_u, dp_l)
        dqadd = max(dq_u, dq_l) if fix_typo else max(dq_u, dq_u)
      else:
        dpadd = min(dp_u, dp_l)
        dqadd = min(dq_u, dq_l)
      deltap += mass * dpadd
      deltaq += mass * dqadd
      probused += mass
  if upper_bound and charge_unexplored:
    return max(deltap, deltaq) + _unexplored(probused)
  return max(deltap, deltaq)


def _unexplored(probused: float) -> float:
  """Mass no block reached, charged in full (divergence ≤ 1) by an upper bound.

  :func:`apple_deltacomp` as shipped returns the bare sums when it runs out of
  blocks. With n ≤ step it has no block at all (δ = 0 for every ε, so its ε ≈
  0), and for n up to a few steps its blocks can stop short of n − 1; charging
  what they missed keeps δ(ε) an upper bound (it moves δ by < 1e-15 where the
  blocks cover everything)."""
  return max(0.0, 1.0 - probused)


def apple_deltacomp_half(n: int, epsilon0: float, epsilon: float,
                         delta_upper: float, step: int,
                         fix_typo: bool = True) -> float:
  """Apple's first-release loop (before commit 993d285): blocks around n/2.

  Binomial(n−1, e^{−ε0}) masses; the c = n/2 term first when n is even, then
  blocks of ``step`` alternately above and below n/2, rounding as shipped (they
  reach c ≤ 0 and c ≥ n − 1, so every count is charged). One change keeps it an
  upper bound where the shipped loop is not (n up to about 2·step): a block
  reaching below c = 0 is charged the divergence at c = 0. The shipped loop
  evaluated ``onestep`` at a negative c, got NaN, and charged the block its
  upper end, the smallest divergence in it: at n = 150, ε0 = 1, δ = 1e-6 its ε
  was 0.426 against the exact reduction's 0.512. The notes' figures (n ≥ 10⁴)
  do not move.
  """
  p = math.exp(-epsilon0)
  alpha = reduction.alpha_for_epsilon(epsilon0)
  deltap = deltaq = probused = 0.0
  if n % 2 == 0:
    c = n // 2
    pc = binomial.pmf(c, n - 1, p)
    deltap += pc * onestep(c, epsilon, alpha, True)
    deltaq += pc * onestep(c, epsilon, alpha, False)
    probused = pc
  for blk in range(1, n // 2 + 1 + n % 2, step):
    for s in range(2):
      sign = (-1) ** s
      upperc = max(round(n / 2 + sign * (blk - (n % 2) * 0.1)),
                   round(n / 2 + sign * (blk + step - (n % 2) * 0.1)))
      if s == 0:
        upperc -= 1
      lowerc = upperc - step + 1
      mass = (binomial.cdf(upperc, n - 1, p) - binomial.cdf(lowerc, n - 1, p)
              + binomial.pmf(lowerc, n - 1, p))
      lowerc = max(0, lowerc)  # a block reaching below c = 0 holds mass from c = 0 up
      if max(deltap, deltaq) > delta_upper:
        return delta_upper
      if 1 - probused < deltap and 1 - probused < deltaq:
        return max(deltap + 1 - probused, deltaq + 1 - probused)
      dp_u = onestep(upperc, epsilon, alpha, True)
      dp_l = onestep(lowerc, epsilon, alpha, True)
      dq_u = onestep(upperc, epsilon, alpha, False)
      dq_l = onestep(lowerc, epsilon, alpha, False)
      deltap += mass * max(dp_u, dp_l)
      deltaq += mass * (max(dq_u, dq_l) if fix_typo else max(dq_u, dq_u))
      probused += mass
  return max(deltap, deltaq)


def binary_search(delta_fn: Callable[[float], float], delta: float,
                  num_iterations: int, eps_upper: float) -> float:
  """The reference code's bisection: ``num_iterations`` halvings of [0, eps_upper]."""
  lo, hi = 0.0, eps_upper
  for _ in range(int(num_iterations)):
    mid = (lo + hi) / 2
    if delta_fn(mid) < delta:
      hi = mid
    else:
      lo = mid
  return hi


def numeric_apple(n: int, epsilon0: float, delta: float, num_iterations: int = 20,
                  step: int = 100, fix_typo: bool = True,
                  upper_bound: bool = True, loop: str = "expectation") -> float:
  """Apple's numerical FMT22 bound with exact Binomial block masses.

  ``num_iterations=10, fix_typo=False`` is the APES repository's copy as used
  for the UniS column (0.069670 at n=1e4, ε0=1, δ=1e-8). ``loop="half"`` is
  Apple's first release (0.07050 at 20 halvings); ``loop="expectation"`` its
  current one (0.069537). Both over-approximate :func:`numeric` (0.068880), at
  every n: unlike the shipped code, the mass no block reached and the first
  release's blocks below c = 0 are charged (see the two loops). For n ≤
  ``step`` the loop has no block and the answer is ``eps_upper`` (no
  amplification; the shipped code reported ε ≈ 0 there): use :func:`numeric`.
  """
  if loop not in ("expectation", "half"):
    raise ValueError(f"loop={loop!r}: choose 'expectation' or 'half'.")
  _check(n, epsilon0, delta)
  p = math.exp(-epsilon0)
  alpha = reduction.alpha_for_epsilon(epsilon0)
  if epsilon0 < math.log(n / (16 * math.log(4 / delta))):
    eps_upper = closed_form(n, epsilon0, delta)
  else:
    eps_upper = epsilon0
  if loop == "half":
    return binary_search(
        lambda e: apple_deltacomp_half(n, epsilon0, e, delta, step, fix_typo),
        delta, num_iterations, eps_upper)
  def mass(lo: int, hi: int) -> float:
    return binomial.cdf(hi, n - 1, p) - binomial.cdf(lo, n - 1, p) + binomial.pmf(lo, n - 1, p)

  def delta_fn(eps: float) -> float:
    return apple_deltacomp(n, (n - 1) * p, mass, alpha, eps, delta, step,
                           upper_bound, fix_typo, charge_unexplored=True)

  return binary_search(delta_fn, delta, num_iterations, eps_upper)


def numeric(n: int, epsilon0: float, delta: float,
            count: Optional[reduction.CloneCount] = None,
            target_epsilon: Optional[float] = None,
            iterations: int = 40) -> float:
  """Exact clone-reduction bound: smallest ε with Σ_c Pr[C=c] d_c(ε) ≤ δ.

  Defaults to FMT22 (C ~ Bin(n−1, e^{−ε0}), target α from ε0). Pass ``count``
  (e.g. a Poisson-binomial pmf) and ``target_epsilon`` for the generalized
  reduction; the answer is at most the target's ε (no amplification).
  """
  _check(n, epsilon0, delta)
  if count is None:
    count = reduction.binomial_count(n - 1, math.exp(-epsilon0))
  eps_t = epsilon0 if target_epsilon is None else float(target_epsilon)
  alpha = reduction.alpha_for_epsilon(eps_t)
  return reduction.numeric_epsilon(count, alpha, delta, eps_t, iterations)
