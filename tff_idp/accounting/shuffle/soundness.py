"""Checks of shuffle-amplification bounds against the true shuffled mechanism.

Target user u holds x0 = −C or x1 = +C (the worst pair for Clip-Laplace: its
log density ratio reaches ε_u there); every other user j holds a fixed y_j and
reports CLap(y_j, 2C/ε_j, C). The analyst sees the multiset of the n reports
of one coordinate. Two ways to get the *true* δ(ε) of that multiset:

* :func:`shuffled_delta` — exact up to quadrature for n ≤ 3: the density of
  the shuffled tuple is the permanent (1/n!)·Σ_π Π_i f_{π(i)}(z_i), and
  δ(ε) = max(∫(P − e^ε Q)_+, ∫(Q − e^ε P)_+) is integrated with composite
  Gauss–Legendre rules on [−C, 0] and [0, C].
* :func:`binned_lower_bound` — a rigorous *lower* bound for any n when the
  other users are identical (same ε, same y): the statistic
  D = #reports in [C−w, C] − #reports in [−C, −C+w] is a post-processing of
  the multiset, so its hockey-stick divergence (computed exactly from
  binomial pmfs and the closed-form Clip-Laplace CDF) is ≤ the true δ(ε).

:func:`clone_count` and :func:`reduction_delta` give the δ(ε) that each
clone-reduction rule claims (see ``reduction``), so the two can be compared.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np
from scipy import stats

from tff_idp.accounting.shuffle import clip_laplace_reference as clap
from tff_idp.accounting.shuffle import echoes
from tff_idp.accounting.shuffle import reduction

__all__ = ["RULES", "shuffled_delta", "binned_lower_bound", "clone_count",
           "reduction_delta"]

RULES = ("per_user", "lemma4_column", "eon_literal", "eon_average", "fmt22_max")


def _nodes(panels: int, order: int, clip: float):
  x, w = np.polynomial.legendre.leggauss(order)
  edges = np.concatenate([np.linspace(-clip, 0.0, panels + 1)[:-1],
                          np.linspace(0.0, clip, panels + 1)])
  lo, hi = edges[:-1, None], edges[1:, None]
  return ((hi - lo) / 2 * x + (hi + lo) / 2).ravel(), ((hi - lo) / 2 * w).ravel()


def shuffled_delta(target_epsilon: float, other_epsilons: Sequence[float],
                   other_inputs: Sequence[float], epsilons, clip: float = 1.0,
                   panels: int = 40, order: int = 10) -> np.ndarray:
  """True δ(ε) of the shuffled reports of 1 target + ≤ 2 others (module doc).

  ``other_inputs`` must lie in {−C, 0, C} so that every density kink is on a
  panel edge. Quadrature error is ~1e-4 at the defaults for n = 3 with
  panels=8; use more panels for n ≤ 2.
  """
  others = list(zip(other_epsilons, other_inputs))
  n = 1 + len(others)
  if n > 3:
    raise ValueError("shuffled_delta integrates over [−C, C]^n; use n ≤ 3.")
  for _, y in others:
    if min(abs(y), abs(abs(y) - clip)) > 1e-12:
      raise ValueError("other_inputs must be −C, 0 or C (kinks on panel edges).")
  z, w = _nodes(panels, order, clip)
  rows0 = [clap.density(z, -clip, target_epsilon, clip)]
  rows1 = [clap.density(z, clip, target_epsilon, clip)]
  rest = [clap.density(z, y, e, clip) for e, y in others]

  def axis(v, i):
    shape = [1] * n
    shape[i] = -1
    return v.reshape(shape)

  def permanent(rows):
    total = 0.0
    for perm in itertools.permutations(range(n)):
      term = 1.0
      for i, k in enumerate(perm):
        term = term * axis(rows[k], i)
      total = total + term
    return total / math.factorial(n)

  p = permanent(rows0 + rest)
  q = permanent(rows1 + rest)
  weight = 1.0
  for i in range(n):
    weight = weight * axis(w, i)
  out = []
  for e in np.atleast_1d(np.asarray(epsilons, dtype=np.float64)):
    k = math.exp(e)
    out.append(max(float((np.maximum(p - k * q, 0.0) * weight).sum()),
                   float((np.maximum(q - k * p, 0.0) * weight).sum())))
  return np.array(out)


def _count_difference_pmf(m: int, r_plus: float, r_minus: float) -> np.ndarray:
  """pmf of Σ_{i≤m} (+1 w.p. r₊, −1 w.p. r₋, 0 otherwise) on −m..m."""
  out = np.zeros(2 * m + 1)
  r = r_plus + r_minus
  if r <= 0.0:
    out[m] = 1.0
    return out
  tot = stats.binom(m, r)
  lo = int(max(0, tot.ppf(1e-30) - 1))
  hi = int(min(m, tot.isf(1e-30) + 1))
  share = r_plus / r
  for j in range(lo, hi + 1):
    k = np.arange(j + 1)
    out[2 * k - j + m] += tot.pmf(j) * stats.binom.pmf(k, j, share)
  return out


def binned_lower_bound(n: int, target_epsilon: float, other_epsilon: float,
                       epsilons, widths: Sequence[float] = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7),
                       other_input: float = 0.0, clip: float = 1.0) -> np.ndarray:
  """A lower bound on the true δ(ε) for n−1 identical others (module doc).

  Maximized over the band widths w (as fractions of C).
  """
  epsilons = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
  best = np.zeros(epsilons.size)
  for frac in widths:
    t = clip * (1.0 - frac)

    def band(x, e):
      top = 1.0 - clap.cdf(t, x, e, clip)
      bottom = clap.cdf(-t, x, e, clip)
      return float(top), float(bottom)

    q_top, q_bot = band(clip, target_epsilon)  # target at +C; mirrored at −C
    r_top, r_bot = band(other_input, other_epsilon)
    base = _count_difference_pmf(n - 1, r_top, r_bot)
    up = np.concatenate([[0.0], base[:-1]])     # D_others = d − 1
    down = np.concatenate([base[1:], [0.0]])    # D_others = d + 1
    mid = 1.0 - q_top - q_bot
    p = q_top * up + q_bot * down + mid * base
    q = q_bot * up + q_top * down + mid * base
    for i, e in enumerate(epsilons):
      k = math.exp(e)
      d = max(np.maximum(p - k * q, 0.0).sum(), np.maximum(q - k * p, 0.0).sum())
      best[i] = max(best[i], d)
  return best


def clone_count(epsilons, target_index: int, rule: str,
                tail: float = 1e-30) -> reduction.CloneCount:
  """The clone count C each rule uses for target ``target_index``.

  per_user: Σ_{j≠u} Bern(exact infimum p_{j,u}); lemma4_column: the same with
  Lemma 4's p; eon_literal: Σ_{i≠u} Σ_j Bern(p_ij/n) (Lemma 6's |T|, n(n−1)
  terms); eon_average: Σ_{i≠u} Bern((1/n)Σ_j p_ij) (the averaged echo
  probability); fmt22_max: Bin(n−1, e^{−ε_max}).
  """
  e = np.asarray(epsilons, dtype=np.float64).ravel()
  u = int(target_index)
  n = e.size
  others = np.delete(e, u)
  if rule == "per_user":
    return reduction.poisson_binomial_count(echoes.column(e, u, "exact").probabilities, tail)
  if rule == "lemma4_column":
    return reduction.poisson_binomial_count(echoes.column(e, u, "lemma4").probabilities, tail)
  if rule == "eon_literal":
    return reduction.poisson_binomial_count(
        (echoes.lemma4(others[:, None], e[None, :]) / n).ravel(), tail)
  if rule == "eon_average":
    return reduction.poisson_binomial_count(
        echoes.lemma4(others[:, None], e[None, :]).mean(axis=1), tail)
  if rule == "fmt22_max":
    return reduction.binomial_count(n - 1, math.exp(-e.max()), tail)
  raise ValueError(f"rule={rule!r}: choose one of {RULES}.")


def reduction_delta(epsilons, target_index: int, rule: str, eval_epsilons) -> np.ndarray:
  """δ(ε) claimed by ``rule`` (α from the target's ε; ε_max for EoN/FMT22 rules)."""
  e = np.asarray(epsilons, dtype=np.float64).ravel()
  count = clone_count(e, target_index, rule)
  eps_t = e[int(target_index)] if rule in ("per_user", "lemma4_column") else e.max()
  alpha = reduction.alpha_for_epsilon(eps_t)
  return np.array([reduction.hockey_stick(count, x, alpha)
                   for x in np.atleast_1d(eval_epsilons)])
