"""Exact output density of the S-APES local randomizers (NumPy, no TensorFlow).

What a user releases under Alg. 2 (APES paper Sec. 3.3; TF implementation
:func:`tff_idp.apes.sparsify.sparsify_perturb`), for one update x ∈ [−C, C]^d,
b kept coordinates and the per-coordinate budget ε' (λ' = 2C/ε'), with f(z | x)
the Clip-Laplace density (Def. 4, :func:`clip_laplace_reference.density`):

* ``"random"`` (data-independent b-subset S, uniform over the C(d, b) subsets)

      p(r | x) = C(d, b)⁻¹ Σ_S  Π_{k∈S} f(r_k | x_k) · Π_{j∉S} f(r_j | 0);

* ``"top_b"`` (the paper's post-top-b: y ~ f(· | x) on every coordinate, S the
  b largest |y_k|, the rest replaced by fresh CLap(0) padding)

      p(r | x) = Σ_S  Π_{k∈S} f(r_k | x_k) · Π_{j∉S} G_j(m_S) f(r_j | 0),

  with m_S = min_{k∈S} |r_k| and G_j(t) = Pr[|y_j| < t | x_j] (every dropped
  coordinate's perturbed value was smaller in magnitude than every kept one;
  the padding is independent of y). Ties have probability 0.

* ``"none"`` (APES, every coordinate perturbed): p(r | x) = Π_k f(r_k | x_k).

:func:`max_log_ratio` evaluates the largest |ln p(r | x) − ln p(r | x')| over a
grid of release vectors r; any such value is a *lower bound* on the
mechanism's true local ε, which is what the tests hold the ledger against.
:func:`top_b_small_report_limit` is the log ratio between all-0 and all-C
inputs as every report tends to 0 with b = 1, d·(ε'/2 + ln S(C)/S(0)), the
closed form that shows the post-top-b local ε growing with d.

Cost: O(m^d · C(d, b) · d) for a grid of m values per coordinate: meant for
d ≤ 6.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterable, Sequence

import numpy as np
from scipy import special

from tff_idp.accounting.shuffle import clip_laplace_reference as ref

__all__ = ["SELECTIONS", "log_density", "max_log_ratio", "release_grid",
           "top_b_small_report_limit"]

SELECTIONS = ("none", "random", "top_b")


def _check(x: np.ndarray, keep: int, selection: str) -> np.ndarray:
  x = np.asarray(x, dtype=np.float64)
  if x.ndim != 1 or x.size == 0:
    raise ValueError(f"x must be one non-empty update vector; got shape {x.shape}.")
  if selection not in SELECTIONS:
    raise ValueError(f"selection={selection!r} must be one of {SELECTIONS}.")
  if selection != "none" and not 1 <= int(keep) <= x.size:
    raise ValueError(f"keep={keep!r} must lie in [1, d={x.size}].")
  return x


def _log_dropped_below(t: np.ndarray, x_j: float, epsilon: float, clip: float) -> np.ndarray:
  """ln Pr[|CLap(x_j)| < t] for t ≥ 0 (−inf at t = 0)."""
  with np.errstate(divide="ignore"):
    return np.log(np.clip(ref.cdf(t, x_j, epsilon, clip) - ref.cdf(-t, x_j, epsilon, clip),
                          0.0, 1.0))


def log_density(releases: np.ndarray, x: Sequence[float], epsilon: float, clip: float,
                keep: int, selection: str) -> np.ndarray:
  """ln p(r | x) for every row r of ``releases`` ([..., d]); module docstring.

  Args:
    releases: release vectors, last axis d, entries in [−C, C].
    x: the user's update (clipped to [−C, C], as the randomizer does).
    epsilon: the per-coordinate budget ε' (= ε_i / b).
    clip: C.
    keep: b (ignored for ``"none"``).
    selection: "none", "random" or "top_b".
  """
  x = _check(x, keep, selection)
  r = np.asarray(releases, dtype=np.float64)
  d = x.size
  if r.shape[-1] != d:
    raise ValueError(f"releases have {r.shape[-1]} coordinates; x has d={d}.")
  with np.errstate(divide="ignore"):
    log_f = np.stack([np.log(ref.density(r[..., k], x[k], epsilon, clip)) for k in range(d)])
    log_f0 = np.log(ref.density(r, 0.0, epsilon, clip))
  log_f0 = np.moveaxis(log_f0, -1, 0)
  if selection == "none":
    return log_f.sum(axis=0)
  terms = []
  for kept in itertools.combinations(range(d), int(keep)):
    dropped = [j for j in range(d) if j not in kept]
    term = log_f[list(kept)].sum(axis=0) + log_f0[dropped].sum(axis=0)
    if selection == "top_b":
      smallest_kept = np.min(np.abs(r[..., list(kept)]), axis=-1)
      for j in dropped:
        term = term + _log_dropped_below(smallest_kept, x[j], epsilon, clip)
    terms.append(term)
  out = special.logsumexp(np.stack(terms), axis=0)
  if selection == "random":
    out = out - math.log(math.comb(d, int(keep)))
  return out


def release_grid(d: int, clip: float, points: Iterable[float]) -> np.ndarray:
  """Every vector in ``points``^d (points given as fractions of C), shape [m^d, d]."""
  values = clip * np.asarray(sorted(set(float(p) for p in points)), np.float64)
  if np.any(np.abs(values) > clip):
    raise ValueError("grid points are fractions of C and must lie in [−1, 1].")
  mesh = np.meshgrid(*([values] * int(d)), indexing="ij")
  return np.stack([m.ravel() for m in mesh], axis=-1)


def max_log_ratio(inputs: Sequence[Sequence[float]], releases: np.ndarray, epsilon: float,
                  clip: float, keep: int, selection: str) -> float:
  """max over input pairs (x, x') and releases r of |ln p(r | x) − ln p(r | x')|.

  A lower bound on the mechanism's local ε (the sup runs over every r and
  every pair of inputs in [−C, C]^d); finite for every selection here.
  """
  logs = [log_density(releases, x, epsilon, clip, keep, selection) for x in inputs]
  worst = 0.0
  for a, b in itertools.combinations(logs, 2):
    both = np.isfinite(a) & np.isfinite(b)
    if np.any(np.isfinite(a) != np.isfinite(b)):
      return math.inf
    if np.any(both):
      worst = max(worst, float(np.max(np.abs(a[both] - b[both]))))
  return worst


def top_b_small_report_limit(d: int, epsilon: float, clip: float) -> float:
  """lim ln p(r | 0)/p(r | C·1) as r → 0, b = 1: d·(ε'/2 + ln S(C)/S(0)).

  Near r = 0 every kept-or-dropped factor is the density at 0 (f(0 | x) ∝
  e^{−|x|/λ}/S(x)) and G_j(t) ≈ 2t·f(0 | x_j), so the ratio tends to
  (f(0 | 0)/f(0 | C))^d = (e^{C/λ} S(C)/S(0))^d with C/λ = ε'/2.
  """
  lam = 2.0 * clip / epsilon
  s = lambda x: 1 - 0.5 * math.exp((x - clip) / lam) - 0.5 * math.exp((-x - clip) / lam)
  return d * (epsilon / 2 + math.log(s(clip) / s(0.0)))
