"""Per-user shuffle amplification bound for heterogeneous Clip-Laplace reports.

The bound (default of the APES ledger)
--------------------------------------
Target user u with budget ε_u, neighbouring inputs x0, x1 ∈ [−C, C]; every
other user j reports R_j(y_j) = CLap(y_j, 2C/ε_j, C) with y_j arbitrary.

1. Clones. If R_j(y) ≥ p_{j,u}·½(R_u(x0) + R_u(x1)) as measures, R_j(y) is a
   p_{j,u}-mixture of the target's "clone" distribution and a leftover, with an
   independent coin per user. We take
   p_{j,u} = inf_{y,x,z} R_j(y)(z)/R_u(x)(z) = a(ε_j)·b(ε_u)·e^{−ε_j}
   (``echoes.exact_clone_probability``; the test suite checks it against a
   grid minimum). Lemma 4's a(ε_j)b(ε_u)e^{−max(ε_j,ε_u)} is never larger.
2. Target. (R_u(x0), R_u(x1)) is ε_u-DP, so R_u(x_b) = α Q_b + (1−α) Q_{1−b}
   with α = e^{ε_u}/(1+e^{ε_u}) and ½(Q_0+Q_1) = ½(R_u(x0)+R_u(x1)) (Lemma 3 /
   Kairouz et al.).
3. Reduction. Conditioned on which users are clones (independent of the
   target's bit), the shuffled output is a post-processing of the number of
   Q_0- vs Q_1-draws among the C+1 clone-or-target reports, exactly as in
   FMT22 (Feldman, McMillan, Talwar, FOCS 2021) and its variation-ratio
   generalization (Feldman, McMillan, Talwar, SODA 2023); here C is the exact
   Poisson-binomial Σ_{j≠u} Bern(p_{j,u}) (``reduction.poisson_binomial_count``,
   with trimmed tail mass charged to δ) and δ(ε) is the exact hockey-stick sum
   (``reduction.hockey_stick``). There is no S ≥ 16 ln(4/δ) condition and no
   Normal approximation; the answer never exceeds ε_u.

Population bound. Users with the same ε share a bound. With more than
``max_levels`` distinct budgets, the sorted budgets are cut into ``max_levels``
contiguous groups of about equal user count; a group with largest budget ε_hi
uses α(ε_hi) and the clone probabilities q_j = a(ε_j)b(ε_hi)e^{−ε_j} of *all*
users minus the single largest q_j. That is sound for every member u of the
group: q_j ≤ p_{j,u} (b is decreasing), and removing the largest q leaves a
vector that is, after sorting, entry-wise ≤ the vector with u removed — a
smaller clone probability is still a valid decomposition, so no monotonicity
of δ in C is needed. The reported population ε^c is the maximum over groups.

What the checks found (tests/accounting/shuffle/test_soundness.py)
------------------------------------------------------------------
* Per-user bound ≥ true δ(ε) on every configuration tried: exact quadrature
  of the shuffled multiset for n = 2, 3 (e.g. ε_u = 10 vs one other at 0.01:
  true δ(0) = 0.8004, bound 0.9502) and rigorous lower bounds (band-count
  statistic, identical others) for n = 300 and n = 1000.
* FMT22 at ε_max (UniS) is sound for Clip-Laplace with A = C: every exact
  p_{j,u} ≥ e^{−ε_max} (a(ε) increasing, ε/(e^ε−1) decreasing) and
  α_u ≤ α_max, so its decomposition is valid for every user. With Lemma 4's
  smaller p this would *not* follow (ε_j → 0 gives b(ε_u)e^{−ε_u} < e^{−ε_u}).
* EoN's step is unsound. Using the averaged echo probability
  (1/n)Σ_j p_ij with the target at ε* = max ε, the reduction claims less than
  the true δ:
  - n = 2, ε = (10, 0.01): true δ(0) = 0.8004, EoN reduction 0.7524;
  - n = 3, ε = (8, 0.05, 0.05): true δ(0) = 0.6330, EoN 0.5665 (averaged) /
    0.5962 (Lemma 6's n(n−1) Bernoullis);
  - n = 300, ε = (10, 0.01 × 299): a lower bound on the true δ(0.3) is
    2.6e-3 against EoN's 2e-4.
  The published numeric bound itself (Normal count, blocks of 100) is
  violated where Thm 4 applies: n = 1000, ε = (10, 0.01 × 999), δ_s = 1e-3:
  S = 988 ≥ 16 ln(4/δ_s) = 133, EoN ε^c = 0.107, yet the true δ(0.107) ≥
  5.4e-3 > 1e-3; n = 10⁴, same budgets, δ_s = 1e-8: EoN ε^c = 0.092 with true
  δ(0.092) ≥ 4.8e-6. (Our bound: 0.467 and 0.309.) For the paper's budget
  ranges (ε ∈ [0.05, 1]) the lower bounds we can compute stay far below δ_s,
  so no violation is shown there — but nothing certifies those numbers either.
* Both EoN and Apple's numeric loops return ~0 when n ≤ step (100): the block
  loop ``range(1, ceil(n/step))`` is empty, δ(ε) evaluates to 0.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

import numpy as np

from tff_idp.accounting.shuffle import echoes
from tff_idp.accounting.shuffle import reduction

__all__ = ["PerUserBound", "PopulationBound", "clone_count", "bound",
           "group_bound", "population_bound"]


def _check(epsilons, delta) -> np.ndarray:
  e = np.asarray(epsilons, dtype=np.float64).ravel()
  if e.size < 2:
    raise ValueError(f"need n >= 2 users for shuffling; got {e.size}.")
  if not np.all(np.isfinite(e)) or np.any(e <= 0):
    raise ValueError("every ε must be finite and > 0.")
  if not 0.0 < delta < 1.0:
    raise ValueError(f"delta={delta!r} must lie strictly between 0 and 1.")
  return e


@dataclasses.dataclass(frozen=True)
class PerUserBound:
  """ε^c at δ for targets with budget ≤ ``target_epsilon`` (or exactly it)."""
  target_epsilon: float
  epsilon: float
  delta: float
  clone_mean: float
  users: int

  @property
  def amplified(self) -> bool:
    return self.epsilon < self.target_epsilon


def clone_count(epsilons, target_index: int) -> reduction.CloneCount:
  """Σ_{j≠u} Bern(p_{j,u}) with the exact Clip-Laplace clone probabilities."""
  e = np.asarray(epsilons, dtype=np.float64).ravel()
  return reduction.poisson_binomial_count(echoes.column(e, target_index, "exact").probabilities)


def _solve(count: reduction.CloneCount, eps_t: float, delta: float,
           iterations: int) -> float:
  return reduction.numeric_epsilon(count, reduction.alpha_for_epsilon(eps_t),
                                   delta, eps_t, iterations)


def bound(epsilons, target_index: int, delta: float, iterations: int = 40) -> PerUserBound:
  """The per-user bound (module doc) for the user at ``target_index``."""
  e = _check(epsilons, delta)
  count = clone_count(e, target_index)
  eps_t = float(e[int(target_index)])
  return PerUserBound(eps_t, _solve(count, eps_t, delta, iterations), float(delta),
                      count.mean, int(np.sum(e == eps_t)))


def group_bound(epsilons, epsilon_hi: float, delta: float,
                iterations: int = 40) -> PerUserBound:
  """Sound for every user with ε ≤ ``epsilon_hi`` (module doc: q_j, drop the max)."""
  e = _check(epsilons, delta)
  q = echoes.exact_clone_probability(e, epsilon_hi)
  q = np.delete(q, int(np.argmax(q)))
  count = reduction.poisson_binomial_count(q)
  return PerUserBound(float(epsilon_hi), _solve(count, float(epsilon_hi), delta, iterations),
                      float(delta), count.mean, int(np.sum(e <= epsilon_hi)))


@dataclasses.dataclass(frozen=True)
class PopulationBound:
  """Max over budget groups; ``levels`` are (ε_lo, ε_hi, users, ε^c) per group."""
  epsilon: float
  delta: float
  method: str  # "distinct" or "groups"
  levels: Tuple[Tuple[float, float, int, float], ...]

  def epsilon_for(self, budget: float) -> float:
    """ε^c of a user with this budget (the group whose range holds it)."""
    for lo, hi, _, eps_c in self.levels:
      if lo <= budget <= hi:
        return eps_c
    raise ValueError(f"budget {budget} is not one of the population's budgets.")

  def to_dict(self) -> Dict:
    return {"epsilon": self.epsilon, "delta": self.delta, "method": self.method,
            "levels": [dict(zip(("epsilon_lo", "epsilon_hi", "users", "epsilon_c"), lv))
                       for lv in self.levels]}


def population_bound(epsilons, delta: float, max_levels: int = 32,
                     iterations: int = 40) -> PopulationBound:
  """Per-user bounds for every budget, grouped (module doc); max is the population ε^c."""
  e = _check(epsilons, delta)
  if int(max_levels) < 1:
    raise ValueError("max_levels must be >= 1.")
  values, counts = np.unique(e, return_counts=True)
  levels: List[Tuple[float, float, int, float]] = []
  if values.size <= max_levels:
    for v, k in zip(values, counts):
      u = int(np.flatnonzero(e == v)[0])
      levels.append((float(v), float(v), int(k), bound(e, u, delta, iterations).epsilon))
    method = "distinct"
  else:
    cum = np.cumsum(counts)
    cuts = np.searchsorted(cum, np.linspace(0, e.size, int(max_levels) + 1)[1:-1], side="left")
    starts = np.unique(np.concatenate([[0], cuts + 1]))
    starts = starts[starts < values.size]
    ends = np.concatenate([starts[1:], [values.size]])
    for s, t in zip(starts, ends):
      lo, hi = float(values[s]), float(values[t - 1])
      gb = group_bound(e, hi, delta, iterations)
      levels.append((lo, hi, int(counts[s:t].sum()), gb.epsilon))
    method = "groups"
  return PopulationBound(max(lv[3] for lv in levels), float(delta), method, tuple(levels))
