"""NumPy reference of the Clip-Laplace local randomizer (APES, Def. 4 / Thm 1).

CLap(x, λ, C) has density exp(−|z−x|/λ) / (2λ S(x)) on [−C, C] and 0 outside,
with S(x) = 1 − ½e^{(x−C)/λ} − ½e^{(−x−C)/λ}. With A = C, Δf = 2C and
λ = 2C/ε it is ε-LDP for inputs x ∈ [−C, C] (paper Thm 1): the largest log
density ratio is (|z−x'| − |z−x|)/λ + ln S(x')/S(x) ≤ ε.

The mechanism is biased toward 0 (Eq. (1)); the APES server de-biases the
*average* report by inverting Ē(u) = (1/n)Σ_i E[CLap(u, 2C/ε_i, C)]
(:func:`debias_grid`, :func:`invert_averaged_mean`).

Everything here is float64 and broadcasts over NumPy arrays. It is the
reference that the TensorFlow randomizer is tested against; it imports no
TensorFlow.
"""
from __future__ import annotations

import math
from typing import Tuple

import numpy as np
from scipy import special

__all__ = [
    "scale", "density", "cdf", "mean", "mean_eq1", "variance", "sample",
    "averaged_mean", "debias_grid", "invert_averaged_mean",
    "sample_epsilons", "EPSILON_DISTRIBUTIONS",
]


def _check(epsilon, clip) -> Tuple[np.ndarray, np.ndarray]:
  eps = np.asarray(epsilon, dtype=np.float64)
  c = np.asarray(clip, dtype=np.float64)
  if not np.all(np.isfinite(eps)) or np.any(eps <= 0):
    raise ValueError(
        "epsilon must be finite and > 0 for Clip-Laplace (λ = 2C/ε); "
        f"got {epsilon!r}. Use a positive local budget per coordinate.")
  if not np.all(np.isfinite(c)) or np.any(c <= 0):
    raise ValueError(
        f"clip={clip!r} must be finite and > 0: it is the bound C of the "
        "input and output range [−C, C].")
  return eps, c


def scale(epsilon, clip) -> np.ndarray:
  """λ = Δf/ε = 2C/ε, the Laplace scale of Thm 1 (A = C, Δf = 2C)."""
  eps, c = _check(epsilon, clip)
  return 2.0 * c / eps


def _norm_half(x, lam, c) -> np.ndarray:
  """S(x)·2 = (1 − e^{−(C−x)/λ}) + (1 − e^{−(C+x)/λ}), computed with expm1."""
  return -np.expm1(-(c - x) / lam) - np.expm1(-(c + x) / lam)


def density(z, x, epsilon, clip) -> np.ndarray:
  """Density of CLap(x, 2C/ε, C) at z (Def. 4); 0 outside [−C, C].

  x is clipped to [−C, C] first, as the randomizer does.
  """
  eps, c = _check(epsilon, clip)
  z = np.asarray(z, dtype=np.float64)
  x = np.clip(np.asarray(x, dtype=np.float64), -c, c)
  lam = 2.0 * c / eps
  two_s = _norm_half(x, lam, c)          # = 2 S(x)
  p = np.exp(-np.abs(z - x) / lam) / (lam * two_s)
  return np.where(np.abs(z) <= c, p, 0.0)


def cdf(z, x, epsilon, clip) -> np.ndarray:
  """Pr[CLap(x, 2C/ε, C) ≤ z]: 0 below −C, 1 above C, closed form in between."""
  eps, c = _check(epsilon, clip)
  z_raw = np.asarray(z, dtype=np.float64)
  z = np.clip(z_raw, -c, c)
  x = np.clip(np.asarray(x, dtype=np.float64), -c, c)
  lam = 2.0 * c / eps
  two_s = _norm_half(x, lam, c)
  # Below x: ∫_{−C}^{z} e^{−(x−t)/λ} dt/(2λS) = (e^{−(x−z)/λ} − e^{−(x+C)/λ})/(2S).
  below = (np.exp(-(x - z) / lam) - np.exp(-(x + c) / lam)) / two_s
  # Above x: 1 − (e^{−(z−x)/λ} − e^{−(C−x)/λ})/(2S).
  above = 1.0 - (np.exp(-(z - x) / lam) - np.exp(-(c - x) / lam)) / two_s
  out = np.clip(np.where(z <= x, below, above), 0.0, 1.0)
  return np.where(z_raw >= c, 1.0, np.where(z_raw <= -c, 0.0, out))


def _partial_moments(a, lam, k: int) -> np.ndarray:
  """∫_0^a t^k e^{−t/λ} dt = λ^{k+1} k! P(k+1, a/λ) (regularized gamma, stable)."""
  return lam ** (k + 1) * math.factorial(k) * special.gammainc(k + 1, a / lam)


def mean(x, epsilon, clip) -> np.ndarray:
  """E[CLap(x, 2C/ε, C)], paper Eq. (1), evaluated in a cancellation-free form.

  Eq. (1) is ((C+λ)(e₁−e₂) + 2x)/(2 − e₁ − e₂), e₁ = e^{(−C−x)/λ},
  e₂ = e^{(−C+x)/λ}; :func:`mean_eq1` evaluates it literally. Here we use the
  equivalent x + (I₁(C−x) − I₁(C+x))/(I₀(C−x) + I₀(C+x)), I_k the partial
  moments of e^{−t/λ}, which stays accurate for tiny ε.
  """
  eps, c = _check(epsilon, clip)
  x = np.clip(np.asarray(x, dtype=np.float64), -c, c)
  lam = 2.0 * c / eps
  a, b = c - x, c + x
  i0 = _partial_moments(a, lam, 0) + _partial_moments(b, lam, 0)
  return x + (_partial_moments(a, lam, 1) - _partial_moments(b, lam, 1)) / i0


def mean_eq1(x, epsilon, clip) -> np.ndarray:
  """Eq. (1) of the paper, literally (loses ~2·log10(λ/C) digits as ε → 0)."""
  eps, c = _check(epsilon, clip)
  x = np.clip(np.asarray(x, dtype=np.float64), -c, c)
  lam = 2.0 * c / eps
  e1 = np.exp((-c - x) / lam)
  e2 = np.exp((-c + x) / lam)
  return ((c + lam) * (e1 - e2) + 2.0 * x) / (2.0 - e1 - e2)


def variance(x, epsilon, clip) -> np.ndarray:
  """Var[CLap(x, 2C/ε, C)] from the closed-form partial moments (no quadrature)."""
  eps, c = _check(epsilon, clip)
  x = np.clip(np.asarray(x, dtype=np.float64), -c, c)
  lam = 2.0 * c / eps
  a, b = c - x, c + x
  i0 = _partial_moments(a, lam, 0) + _partial_moments(b, lam, 0)
  # Centre on x: offsets t = z − x with t ∈ [−b, a].
  m1 = (_partial_moments(a, lam, 1) - _partial_moments(b, lam, 1)) / i0
  m2 = (_partial_moments(a, lam, 2) + _partial_moments(b, lam, 2)) / i0
  return m2 - m1 * m1


def sample(x, epsilon, clip, uniforms) -> np.ndarray:
  """Inverse-CDF draw of CLap(x, 2C/ε, C) from U(0,1) variates ``uniforms``.

  v = ½e^{(−C−x)/λ} + S(x)·u maps u ∈ [0,1] onto the CDF range of the
  unclipped Laplace restricted to [−C, C]; z = x − λ·sign(v−½)·ln(1 − 2|v−½|)
  (reference code privacy_utils.py:43-55). Output is clipped to [−C, C] to
  absorb float rounding at the ends.
  """
  eps, c = _check(epsilon, clip)
  x = np.clip(np.asarray(x, dtype=np.float64), -c, c)
  u = np.asarray(uniforms, dtype=np.float64)
  if np.any((u < 0) | (u > 1)):
    raise ValueError("uniforms must lie in [0, 1] (draw them with U(0,1)).")
  lam = 2.0 * c / eps
  s = 0.5 * _norm_half(x, lam, c)
  v = 0.5 * np.exp((-c - x) / lam) + s * u
  w = v - 0.5
  z = x - lam * np.sign(w) * np.log1p(-2.0 * np.abs(w))
  return np.clip(z, -c, c)


def averaged_mean(u, epsilons, clip) -> np.ndarray:
  """Ē(u) = (1/n) Σ_i E[CLap(u, 2C/ε_i, C)] over the budget multiset.

  ``u`` may have any shape; ``epsilons`` is 1-D. Equal budgets are grouped,
  so the cost is O(size(u) · #distinct ε).
  """
  eps = np.asarray(epsilons, dtype=np.float64).ravel()
  if eps.size == 0:
    raise ValueError("epsilons is empty: pass one budget per user.")
  _check(eps, clip)
  values, counts = np.unique(eps, return_counts=True)
  u = np.asarray(u, dtype=np.float64)
  out = np.zeros(u.shape, dtype=np.float64)
  for e, k in zip(values, counts):
    out += k * mean(u, e, clip)
  return out / eps.size


def debias_grid(epsilons, clip, points: int = 1001) -> Tuple[np.ndarray, np.ndarray]:
  """(u_grid, e_grid): u on linspace(−C, C, points) and Ē(u) on it (increasing)."""
  if int(points) != points or points < 2:
    raise ValueError(f"points={points!r} must be an integer >= 2.")
  _check(1.0, clip)
  u_grid = np.linspace(-float(clip), float(clip), int(points))
  return u_grid, averaged_mean(u_grid, epsilons, clip)


def invert_averaged_mean(values, u_grid, e_grid) -> np.ndarray:
  """Ē⁻¹ by linear interpolation, clamped to [u_grid[0], u_grid[-1]] = [−C, C].

  Values below Ē(−C) map to −C and values above Ē(C) to +C (the reference
  code wrapped the low side to +C, defect D7).
  """
  u_grid = np.asarray(u_grid, dtype=np.float64)
  e_grid = np.asarray(e_grid, dtype=np.float64)
  if u_grid.shape != e_grid.shape or u_grid.ndim != 1 or u_grid.size < 2:
    raise ValueError("u_grid and e_grid must be 1-D arrays of the same length >= 2 "
                     "(use debias_grid).")
  if np.any(np.diff(e_grid) <= 0):
    raise ValueError("e_grid must be strictly increasing (Ē is increasing in u).")
  return np.interp(np.asarray(values, dtype=np.float64), e_grid, u_grid)


# Table 2 of the paper: (kind, parameters, clip range [lo, hi]).
EPSILON_DISTRIBUTIONS = {
    "Uniform1": ("uniform", (0.05, 0.5), (0.05, 0.5)),
    "Uniform2": ("uniform", (0.05, 1.0), (0.05, 1.0)),
    "Gauss1": ("normal", (0.1, 1.0), (0.05, 0.5)),
    "Gauss2": ("normal", (0.2, 1.0), (0.05, 1.0)),
    "MixGauss1": ("mixnormal", (0.1, 0.5, 1.0, 0.9), (0.05, 0.5)),
    "MixGauss2": ("mixnormal", (0.2, 1.0, 1.0, 0.9), (0.05, 1.0)),
}


def sample_epsilons(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
  """Draw n per-user budgets from a Table 2 distribution (or 'min1'/'min2').

  Draw order (fixed here; see the tests for the S values it reproduces):
  Uniform: rng.uniform(lo, hi, n). Gauss: clip(rng.normal(μ, 1, n), lo, hi).
  MixGauss: see :func:`_mixnormal`. 'min1'/'min2': every user at 0.05 (the
  LDP-min baseline of Tables 3-4, where all users take the smallest budget).
  """
  if int(n) != n or n < 1:
    raise ValueError(f"n={n!r} must be a positive integer (number of users).")
  n = int(n)
  if name in ("min1", "min2", "min"):
    return np.full(n, 0.05)
  if name not in EPSILON_DISTRIBUTIONS:
    raise ValueError(f"unknown budget distribution {name!r}; choose one of "
                     f"{sorted(EPSILON_DISTRIBUTIONS) + ['min1', 'min2']}.")
  kind, params, (lo, hi) = EPSILON_DISTRIBUTIONS[name]
  if kind == "uniform":
    return rng.uniform(params[0], params[1], n)
  if kind == "normal":
    return np.clip(rng.normal(params[0], params[1], n), lo, hi)
  return np.clip(_mixnormal(params, n, rng), lo, hi)


def _mixnormal(params, n: int, rng: np.random.Generator) -> np.ndarray:
  mu_major, mu_minor, std, weight = params
  n_major = int(round(weight * n))
  return np.concatenate([rng.normal(mu_major, std, n_major),
                         rng.normal(mu_minor, std, n - n_major)])
