"""The clone reduction of shuffled LDP: exact hockey-stick divergence and ε(δ).

Feldman, McMillan and Talwar ("Hiding among the clones", FOCS 2021; here
FMT22) reduce n shuffled ε0-LDP reports to a two-count problem: with C clones
of the target (C ~ Bin(n−1, e^{−ε0})), A ~ Bin(C, ½) and Δ ~ Bern(α),
α = e^{ε0}/(1+e^{ε0}), the shuffled output on neighbours x0/x1 is a
post-processing of P = (A+Δ, C−A+1−Δ) resp. Q = (A+1−Δ, C−A+Δ). Their later
"variation-ratio reduction" (Feldman, McMillan, Talwar, "Stronger privacy
amplification by shuffling for Rényi and approximate differential privacy",
SODA 2023) makes the same step for any randomizers whose outputs dominate
p_j·½(R(x0)+R(x1)): then C is Poisson-binomial with the per-user p_j.

Given C, the first count is K = A + Δ; so P_c = α·(Bin(c,½)+1) + (1−α)·Bin(c,½)
and Q_c is the same with α and 1−α swapped. Because the C-marginal is the same
under P and Q and C can be read off the output (the counts sum to C+1):

    δ(ε) = D_{e^ε}(P‖Q) = Σ_c Pr[C=c] · d_c(ε),
    d_c(ε) = Σ_k max(0, P_c(k) − e^ε Q_c(k)).

The ratio P_c(k)/Q_c(k) = (α r + 1−α)/((1−α) r + α) with r = k/(c−k+1) is
monotone in k, so the positive part is a prefix k ≤ t_c with
t_c = ⌊β(c+1)⌋, β = ρ/(1+ρ), ρ = (α − e^ε(1−α))/(e^ε α − (1−α)); then

    d_c(ε) = α F_c(t) + (1−α) F_c(t−1) − e^ε[(1−α) F_c(t) + α F_c(t−1)]

with F_c the Bin(c, ½) CDF (Apple's ``onestep``). Mirroring k ↦ c+1−k maps
P_c onto Q_c, so D(Q‖P) = D(P‖Q) and one direction suffices. The sum over c
is evaluated exactly for every c in the (trimmed) support of the pmf; mass
trimmed from the tails is added to δ in full (each d_c ≤ 1), so the result is
an upper bound up to float64 rounding (~1e-15 absolute per term).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
from scipy import stats

__all__ = [
    "CloneCount", "binomial_count", "poisson_binomial_count", "pair_divergence",
    "hockey_stick", "epsilon_for_delta", "numeric_epsilon", "alpha_for_epsilon",
]

DEFAULT_TAIL = 1e-18


@dataclasses.dataclass(frozen=True)
class CloneCount:
  """Distribution of the clone count C: Pr[C = offset + k] = pmf[k].

  ``tail_mass`` is probability trimmed from the tails (not in ``pmf``); it is
  charged to δ in full by :func:`hockey_stick`.
  """
  offset: int
  pmf: np.ndarray
  tail_mass: float = 0.0

  @property
  def support(self) -> np.ndarray:
    return self.offset + np.arange(self.pmf.size)

  @property
  def mean(self) -> float:
    return float(np.dot(self.support, self.pmf) / self.pmf.sum())


def alpha_for_epsilon(epsilon: float) -> float:
  """α = e^ε/(1+e^ε): the randomized-response weight of an ε-DP pair (Lemma 3)."""
  return 1.0 / (1.0 + math.exp(-float(epsilon)))


def _trim(pmf: np.ndarray, tol: float):
  """Drop tails of total mass ≤ tol on each side; return (lo, hi, dropped)."""
  cs = np.cumsum(pmf)
  lo = int(np.searchsorted(cs, tol, side="right"))
  dropped = float(cs[lo - 1]) if lo > 0 else 0.0
  rs = np.cumsum(pmf[::-1])
  k = int(np.searchsorted(rs, tol, side="right"))
  hi = pmf.size - k
  dropped += float(rs[k - 1]) if k > 0 else 0.0
  if hi <= lo:  # degenerate: keep the mode
    lo = int(np.argmax(pmf)); hi = lo + 1
    dropped = float(1.0 - pmf[lo])
  return lo, hi, dropped


def binomial_count(trials: int, p: float, tail: float = DEFAULT_TAIL) -> CloneCount:
  """C ~ Bin(trials, p) (FMT22: trials = n−1, p = e^{−ε0}), exact pmf, trimmed."""
  trials = int(trials)
  if trials < 0 or not 0.0 <= p <= 1.0:
    raise ValueError(f"need trials >= 0 and p in [0, 1]; got {trials}, {p}.")
  k = np.arange(trials + 1)
  pmf = stats.binom.pmf(k, trials, p)
  lo, hi, dropped = _trim(pmf, tail / 2)
  return CloneCount(lo, pmf[lo:hi].copy(), dropped)


def poisson_binomial_count(probs, tail: float = DEFAULT_TAIL,
                           trim_every: int = 32) -> CloneCount:
  """C = Σ_j Bern(p_j), independent: exact pmf by the O(n·width) recursion.

  pmf_{j}(k) = (1−p_j) pmf_{j−1}(k) + p_j pmf_{j−1}(k−1) — all terms are
  non-negative, so there is no cancellation. Every ``trim_every`` steps, and
  once at the end, each tail below tol = tail·trim_every/(2n) is dropped:
  at most n/trim_every + 1 trims of ≤ 2·tol, so ≤ tail·(1 + trim_every/n) in
  total (more only when a trim keeps just the mode). The dropped mass is
  recorded in ``tail_mass`` and ``hockey_stick`` adds it to δ, so δ stays an
  upper bound whatever was dropped. The live window is ~mean ± 40 sd, so
  n = 10⁴ takes about 0.1 s and n = 10⁵ a few seconds.
  """
  p = np.asarray(probs, dtype=np.float64).ravel()
  if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
    raise ValueError("clone probabilities must lie in [0, 1].")
  n = p.size
  if n == 0:
    return CloneCount(0, np.array([1.0]), 0.0)
  pmf = np.zeros(n + 1)
  pmf[0] = 1.0
  lo, hi = 0, 1  # live window [lo, hi)
  dropped = 0.0
  tol = tail * trim_every / (2.0 * n)
  for j, pj in enumerate(p):
    seg = pmf[lo:hi]
    moved = seg * pj
    seg *= 1.0 - pj
    pmf[lo + 1:hi + 1] += moved
    hi += 1
    if (j + 1) % trim_every == 0 and hi - lo > 64:
      a, b, d = _trim(pmf[lo:hi], tol)
      if d > 0.0:
        pmf[lo:lo + a] = 0.0
        pmf[lo + b:hi] = 0.0
        dropped += d
        lo, hi = lo + a, lo + b
  a, b, d = _trim(pmf[lo:hi], tol)
  return CloneCount(lo + a, pmf[lo + a:lo + b].copy(), dropped + d)


def pair_divergence(c, epsilon: float, alpha: float) -> np.ndarray:
  """d_c(ε) = D_{e^ε}(P_c‖Q_c) for an array of clone counts c (module doc)."""
  c = np.asarray(c)
  e = math.exp(epsilon)
  num = alpha - e * (1.0 - alpha)
  if num <= 0.0:
    return np.zeros(c.shape)
  den = e * alpha - (1.0 - alpha)
  beta = num / (num + den)  # ρ/(1+ρ)
  t = np.floor(beta * (c + 1))
  f_t = stats.binom.cdf(t, c, 0.5)
  f_tm1 = stats.binom.cdf(t - 1, c, 0.5)
  d = f_t * num - f_tm1 * den  # = P(K≤t) − e^ε Q(K≤t)
  return np.maximum(d, 0.0)


def hockey_stick(count: CloneCount, epsilon: float, alpha: float) -> float:
  """δ(ε) = Σ_c Pr[C=c] d_c(ε) + trimmed tail mass (an upper bound)."""
  if epsilon < 0:
    raise ValueError("epsilon must be >= 0.")
  d = pair_divergence(count.support, epsilon, alpha)
  return float(np.dot(count.pmf, d) + count.tail_mass)


def epsilon_for_delta(delta_fn: Callable[[float], float], delta: float,
                      eps_hi: float, iterations: int = 40,
                      eps_lo: float = 0.0) -> float:
  """Smallest ε in [eps_lo, eps_hi] (to 2^-iterations·width) with δ(ε) ≤ delta.

  Bisection on the non-increasing δ(ε); returns the *upper* end of the last
  bracket, so the answer always satisfies δ(ε) ≤ delta when δ(eps_hi) ≤ delta.
  If δ(eps_hi) > delta, returns ``math.inf``.
  """
  if delta_fn(eps_hi) > delta:
    return math.inf
  lo, hi = eps_lo, eps_hi
  for _ in range(int(iterations)):
    mid = 0.5 * (lo + hi)
    if delta_fn(mid) <= delta:
      hi = mid
    else:
      lo = mid
  return hi


def numeric_epsilon(count: CloneCount, alpha: float, delta: float,
                    eps_hi: float, iterations: int = 40) -> float:
  """ε(δ) of the generalized clone reduction for a given C and target α."""
  return epsilon_for_delta(lambda e: hockey_stick(count, e, alpha), delta,
                           eps_hi, iterations)


