"""Simulation-CurveFitting (SCF), rPDP-FL Alg. 2: a closed-form q ⇄ ε estimator.

Stage I (lines 1-6): on a grid Π of sampling rates, evaluate the Theorem 1
bound ε*(q) = min_α ε(α, δ, q) (:mod:`tff_idp.accounting.record.rdp_two_stage`).
Stage II (line 7): least-squares fit of f(q) = exp(a·q + b) + c with SciPy,
reporting the coefficient of determination R². Line 8: the inverse

    F(ε) = (log(ε − c) − b) / a   for 0 < ε < ε*(1),   F(ε) = 1 for ε ≥ ε*(1).

F is an *approximation* of the inverse of ε*: used alone it over-spends
some budgets (at small ε by up to an order of magnitude in some settings) and
under-spends others. :func:`tff_idp.accounting.record.calibration.
calibrate_record_rates` therefore re-checks every rate F returns with the
exact bound and lowers it where needed; never use :meth:`ScfFit.invert` alone
to set rates.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
from scipy import optimize

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams


def default_q_grid() -> np.ndarray:
  """Π: 100 evenly spaced rates on (0, 1] plus 20 log-spaced ones below 0.01."""
  return np.unique(np.concatenate([np.geomspace(1e-4, 1e-2, 20, endpoint=False),
                                   np.linspace(0.01, 1.0, 100)]))


def simulate(params: TwoStageParams, q_grid: Optional[np.ndarray] = None
             ) -> tuple[np.ndarray, np.ndarray]:
  """Alg. 2 lines 1-6: ε*(q) of Theorem 1 for every q in Π (vectorised)."""
  q = default_q_grid() if q_grid is None else np.asarray(q_grid, dtype=float)
  if q.ndim != 1 or q.size < 4:
    raise ValueError("the simulation grid needs at least 4 sampling rates.")
  rdp_two_stage.check_rates(q)
  return q, rdp_two_stage.epsilon(q, params)


def _model(q: np.ndarray, a: float, b: float, c: float) -> np.ndarray:
  return np.exp(a * q + b) + c


@dataclasses.dataclass(frozen=True)
class ScfFit:
  """The fitted curve f(q) = exp(a·q + b) + c and its inverse F (Alg. 2 line 8).

  Attributes:
    a, b, c: fitted parameters.
    r_squared: coefficient of determination of the fit on the grid.
    epsilon_at_one: ε*(1), the exact bound at q = 1 (F projects to 1 above it).
    q_grid, epsilon_grid: the simulated points the curve was fitted to.
  """
  a: float
  b: float
  c: float
  r_squared: float
  epsilon_at_one: float
  q_grid: np.ndarray
  epsilon_grid: np.ndarray

  def predict(self, q: np.ndarray | float) -> np.ndarray:
    """f(q), the fitted ε*(q)."""
    return _model(np.asarray(q, dtype=float), self.a, self.b, self.c)

  def invert(self, epsilons: np.ndarray | float) -> np.ndarray:
    """F(ε) ∈ [0, 1]; NaN where the fitted curve never reaches ε on (0, 1).

    NaN marks budgets below the curve's asymptote (ε ≤ c) or mapped to q ≤ 0:
    the estimator has no answer there and the caller must solve exactly.
    """
    eps = np.asarray(epsilons, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
      q = (np.log(eps - self.c) - self.b) / self.a
    q = np.where(eps >= self.epsilon_at_one, 1.0, q)
    q = np.where(np.isfinite(q) & (q > 0.0), np.minimum(q, 1.0), np.nan)
    return q


#: Range of the exponent a searched by the fit. Below A_MIN, exp(a·q + b) + c
#: is a straight line on [0, 1] to within float precision; the fit stops there
#: when ε*(q) is concave (small σ), where the best curve of this family is the
#: linear limit a → 0, b → ∞, c → −∞ that an unbounded fit chases forever.
A_MIN, A_MAX = 1e-3, 60.0


def _linear_part(q: np.ndarray, eps: np.ndarray, a: float) -> tuple[float, float, float]:
  """For fixed a, f is linear in (e^b, c): least squares gives them exactly."""
  design = np.stack([np.exp(a * q), np.ones_like(q)], axis=1)
  (scale, c), *_ = np.linalg.lstsq(design, eps, rcond=None)
  rss = float(np.sum((design @ np.array([scale, c]) - eps) ** 2))
  return float(scale), float(c), (rss if scale > 0 else np.inf)


def _fit_exponential(q: np.ndarray, eps: np.ndarray) -> tuple[float, float, float]:
  """Global least-squares fit of exp(a·q + b) + c, a ∈ [A_MIN, A_MAX].

  Variable projection: (e^b, c) are solved exactly for each a
  (:func:`_linear_part`), which leaves a 1-D search over a: a log grid, then a
  bounded scalar minimisation between the best grid point's neighbours. With
  (e^b, c) exact, the optimum in a is the optimum of all three parameters.
  """
  grid = np.geomspace(A_MIN, A_MAX, 121)
  rss = np.array([_linear_part(q, eps, a)[2] for a in grid])
  if not np.any(np.isfinite(rss)):
    raise RuntimeError("ε*(q) is not increasing on the grid; exp(a·q + b) + c cannot fit it.")
  k = int(np.argmin(rss))
  lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, grid.size - 1)]
  res = optimize.minimize_scalar(lambda la: _linear_part(q, eps, math.exp(la))[2],
                                 bounds=(math.log(lo), math.log(hi)), method="bounded",
                                 options={"xatol": 1e-10})
  a = math.exp(res.x) if res.fun <= rss[k] else float(grid[k])
  scale, c, _ = _linear_part(q, eps, a)
  return a, math.log(scale), c


def fit_scf(params: TwoStageParams, q_grid: Optional[np.ndarray] = None) -> ScfFit:
  """Alg. 2: simulate ε*(q) on Π, fit exp(a·q + b) + c, return the estimator."""
  q, eps = simulate(params, q_grid)
  if np.count_nonzero(eps > 0) < 3:
    raise ValueError("ε*(q) is 0 on almost all of the grid; nothing to fit.")
  try:
    a, b, c = _fit_exponential(q, eps)
  except RuntimeError as e:
    raise RuntimeError(
        f"SCF curve fit failed for {params}: {e} Pass a denser or narrower q_grid.") from e
  residual = np.sum((_model(q, a, b, c) - eps) ** 2)
  total = np.sum((eps - eps.mean()) ** 2)
  r_squared = float(1.0 - residual / total) if total > 0 else 1.0
  eps_one = float(rdp_two_stage.epsilon(1.0, params))
  return ScfFit(float(a), float(b), float(c), r_squared, eps_one, q, eps)
