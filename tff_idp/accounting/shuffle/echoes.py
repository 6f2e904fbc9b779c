"""Echo ("clone") probabilities of Clip-Laplace reports (APES Lemma 4, Thm 4).

For Clip-Laplace with A = C (Δf = 2C, λ = 2C/ε) write
a(ε) = ε/(1−e^{−ε}) and b(ε) = (1−e^{−ε})/ε. Two forms of the probability
that user i's report can be read as an echo of target j's report:

* Lemma 4 (as published): p_ij = a(ε_i)·b(ε_j)·e^{−max(ε_i, ε_j)}
  (reference code computeamplification_perS.py:218; i = the other user,
  j = the target; notes §2.3). For equal budgets this is e^{−ε}.
* :func:`exact_clone_probability`: the exact infimum
  inf_{y, x, z ∈ [−C, C]} R_i(y)(z) / R_j(x)(z) = a(ε_i)·b(ε_j)·e^{−ε_i}.
  Derivation: for fixed z the target density e^{−|z−x|/λ_j}/(2λ_j S_j(x)) is
  maximal at x = z (it increases as x moves toward z from either side) and the
  other density is minimal at y = ∓C (the far end), giving
  ratio(z) = (ε_i/ε_j)·e^{−(C+|z|)/λ_i}·S_j(z)/S_i(C); it decreases in |z|,
  so the infimum is at |z| = C. Since e^{−ε_i} ≥ e^{−max}, Lemma 4's value is
  ≤ the exact one (sound, conservative when the target has the larger ε).

EoN's count (Thm 4, i* = argmax ε): S = Σ_{i≠i*} Σ_j p_ij / n with variance
term Σ_{i≠i*} Σ_j (p_ij/n)(1 − p_ij/n) (``probEoN``). It is O(n²) in the
reference code (defect D14); here O(n log n): after sorting,
Σ_j b_j e^{−max(ε_i,ε_j)} = e^{−ε_i}·Σ_{ε_j≤ε_i} b_j + Σ_{ε_j>ε_i} b_j e^{−ε_j},
both prefix/suffix sums, and the same with squared factors for Σ p_ij².
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

import numpy as np

from tff_idp.accounting.shuffle import clip_laplace_reference as clap

__all__ = [
    "a_factor", "b_factor", "lemma4", "lemma4_matrix", "exact_clone_probability",
    "EonSums", "eon_sums", "eon_sums_quadratic", "column", "ColumnSums",
    "grid_infimum",
]


def _eps(epsilons) -> np.ndarray:
  e = np.asarray(epsilons, dtype=np.float64)
  if e.size == 0:
    raise ValueError("epsilons is empty: pass one budget per user.")
  if not np.all(np.isfinite(e)) or np.any(e <= 0):
    raise ValueError("every ε must be finite and > 0 (Clip-Laplace needs λ = 2C/ε).")
  return e


def a_factor(epsilon) -> np.ndarray:
  """a(ε) = ε / (1 − e^{−ε})."""
  e = _eps(epsilon)
  return e / -np.expm1(-e)


def b_factor(epsilon) -> np.ndarray:
  """b(ε) = (1 − e^{−ε}) / ε = 1/a(ε)."""
  e = _eps(epsilon)
  return -np.expm1(-e) / e


def lemma4(eps_other, eps_target) -> np.ndarray:
  """Lemma 4 (A = C): p = a(ε_other)·b(ε_target)·e^{−max}; broadcasts."""
  eo, et = _eps(eps_other), _eps(eps_target)
  return a_factor(eo) * b_factor(et) * np.exp(-np.maximum(eo, et))


def exact_clone_probability(eps_other, eps_target) -> np.ndarray:
  """inf_{y,x,z} R_other(y)(z) / R_target(x)(z) = a(ε_o) b(ε_t) e^{−ε_o} (module doc)."""
  eo, et = _eps(eps_other), _eps(eps_target)
  return a_factor(eo) * b_factor(et) * np.exp(-eo)


def lemma4_matrix(epsilons) -> np.ndarray:
  """P[i, j] = Lemma 4 p_ij (i = other user, j = target budget), O(n²)."""
  e = _eps(epsilons).ravel()
  return lemma4(e[:, None], e[None, :])


@dataclasses.dataclass(frozen=True)
class EonSums:
  """EoN's echo count: ``mean`` = S, ``variance`` = Σ (p/n)(1−p/n), i* = argmax."""
  mean: float
  variance: float
  target_index: int
  n: int


def _row_sums(e: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """Σ_j b_j e^{−max(ε_i,ε_j)} and Σ_j b_j² e^{−2max} for every i, O(n log n)."""
  order = np.argsort(e, kind="stable")
  s = e[order]
  b = b_factor(s)
  pre1 = np.concatenate([[0.0], np.cumsum(b)])
  pre2 = np.concatenate([[0.0], np.cumsum(b * b)])
  w1 = b * np.exp(-s)
  w2 = w1 * w1
  suf1 = np.concatenate([np.cumsum(w1[::-1])[::-1], [0.0]])
  suf2 = np.concatenate([np.cumsum(w2[::-1])[::-1], [0.0]])
  k = np.searchsorted(s, e, side="right")  # number of ε_j ≤ ε_i
  r1 = np.exp(-e) * pre1[k] + suf1[k]
  r2 = np.exp(-2.0 * e) * pre2[k] + suf2[k]
  return r1, r2


def eon_sums(epsilons) -> EonSums:
  """S and the variance term of EoN's echo count in O(n log n) (module doc)."""
  e = _eps(epsilons).ravel()
  n = e.size
  istar = int(np.argmax(e))
  a = a_factor(e)
  r1, r2 = _row_sums(e)
  rows1 = a * r1
  rows2 = a * a * r2
  s1 = float(rows1.sum() - rows1[istar])
  s2 = float(rows2.sum() - rows2[istar])
  mean = s1 / n
  return EonSums(mean, mean - s2 / (n * n), istar, n)


def eon_sums_quadratic(epsilons) -> EonSums:
  """Reference-code definition of :func:`eon_sums`, O(n²) memory: small n only."""
  e = _eps(epsilons).ravel()
  n = e.size
  istar = int(np.argmax(e))
  p = np.delete(lemma4_matrix(e), istar, axis=0) / n
  return EonSums(float(p.sum()), float((p * (1 - p)).sum()), istar, n)


@dataclasses.dataclass(frozen=True)
class ColumnSums:
  """Clone probabilities of every other user for one target: p, Σp, Σp(1−p)."""
  probabilities: np.ndarray
  total: float
  variance: float


def column(epsilons, target_index: int, form: str = "exact") -> ColumnSums:
  """p_{j,u} for j ≠ u = target_index; ``form`` 'exact' (infimum) or 'lemma4'."""
  e = _eps(epsilons).ravel()
  u = int(target_index)
  if not 0 <= u < e.size:
    raise ValueError(f"target_index={target_index} is out of range for {e.size} users.")
  others = np.delete(e, u)
  if form == "exact":
    p = exact_clone_probability(others, e[u])
  elif form == "lemma4":
    p = lemma4(others, e[u])
  else:
    raise ValueError(f"form={form!r}: choose 'exact' or 'lemma4'.")
  return ColumnSums(p, float(p.sum()), float((p * (1 - p)).sum()))


def grid_infimum(eps_other: float, eps_target: float, clip: float = 1.0,
                 points: int = 401) -> float:
  """min over a grid of y, x, z of R_other(y)(z)/R_target(x)(z) (a numeric check).

  A grid minimum is ≥ the true infimum; the grid contains the extremal points
  y = ±C, x = z = ±C, so here it equals :func:`exact_clone_probability`.
  """
  g = np.linspace(-clip, clip, int(points))
  other = clap.density(g[None, :], g[:, None], eps_other, clip)   # [y, z]
  target = clap.density(g[None, :], g[:, None], eps_target, clip)  # [x, z]
  return float((other.min(axis=0) / target.max(axis=0)).min())
