"""Per-record budgets ε_ij → per-record sampling rates q_ij, never over budget.

rPDP-FL Alg. 3 line 2 computes q_ij = F(ε_ij) with the SCF estimator F
(Alg. 2). The fitted F is approximate, so :func:`calibrate_record_rates`
goes beyond the paper:

1. budgets are de-duplicated (and, above ``max_distinct`` distinct values,
   rounded *down* to a relative resolution of ``budget_resolution``, which
   can only lower a rate);
2. ``method="scf"``: q = F(ε) (Alg. 2); ``method="binary_search"``: the
   IDP-SGD SAMPLE-style exact bisection per distinct ε (the paper's baseline,
   :mod:`tff_idp.accounting.record.binary_search`); ``method="exact"``: the
   vectorised exact inverse below;
3. every distinct rate is re-checked with the exact Theorem 1 bound
   (:func:`tff_idp.accounting.record.rdp_two_stage.epsilon`); a rate whose ε exceeds
   its budget is lowered to the exact inverse, which is itself verified;
4. the result reports the achieved ε of every record, how many rates were
   lowered, and how much budget goes unused.

A result never has a record over its budget: :class:`RecordRates` asserts it
on construction.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Optional

import numpy as np

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record import binary_search
from tff_idp.accounting.record import scf
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.errors import TffIdpError

METHODS = ("scf", "binary_search", "exact")
#: Smallest positive rate the exact inverse considers; budgets that need less
#: get q = 0 (the record is excluded), which is reported.
MIN_RATE = 1e-7


_BISECTION_STEPS = 12  # 1.6% bracket → 4e-6 relative in q


class RecordBudgetError(TffIdpError, ValueError):
  """A per-record budget is invalid (≤ 0 or NaN)."""


def check_budgets(budgets: np.ndarray) -> np.ndarray:
  """Budgets must be > 0 (inf = no privacy constraint); says which are not."""
  arr = np.asarray(budgets, dtype=float)
  if arr.size == 0:
    raise RecordBudgetError("no record budgets were given.")
  bad = np.isnan(arr) | (arr <= 0)
  if np.any(bad):
    idx = np.flatnonzero(bad.reshape(-1))
    raise RecordBudgetError(
        f"{idx.size} record budget(s) are not > 0 (first at flat index {idx[0]}: "
        f"{arr.reshape(-1)[idx[0]]!r}); every ε_ij must be a positive number "
        "(use inf for records without a privacy constraint).")
  return arr


def _round_down(values: np.ndarray, resolution: float) -> np.ndarray:
  """Rounds positive finite values down onto a log grid of relative step."""
  out = values.copy()
  finite = np.isfinite(values)
  step = math.log1p(resolution)
  out[finite] = np.exp(np.floor(np.log(values[finite]) / step) * step)
  # exp(log(x)) can land a hair above x; never round up.
  out[finite] = np.minimum(out[finite], values[finite])
  return out


def exact_rates(budgets: np.ndarray, params: TwoStageParams,
                grid_size: int = 1024) -> np.ndarray:
  """The largest q with Theorem 1 ε(q) ≤ budget, vectorised over budgets.

  A log-spaced table of exact ε on [MIN_RATE, 1] brackets each budget
  (ε*(q) is non-decreasing in q); the rate is then interpolated log-log within
  its bracket, shrunk slightly, and verified exactly. Where that fails, a
  vectorised geometric bisection of the bracket keeps the largest verified
  rate (at worst the bracket's lower end, whose ε was computed exactly).
  """
  b = np.asarray(budgets, dtype=float).reshape(-1)
  grid = np.concatenate([[0.0], np.geomspace(MIN_RATE, 1.0, grid_size)])
  eps_grid = np.maximum.accumulate(rdp_two_stage.epsilon(grid, params))
  idx = np.searchsorted(eps_grid, b, side="right") - 1  # ε(grid[idx]) ≤ b
  q = grid[idx].copy()
  inner = np.flatnonzero((idx >= 1) & (idx < grid.size - 1))
  if inner.size:
    lo, hi = idx[inner], idx[inner] + 1
    e_lo, e_hi = eps_grid[lo], eps_grid[hi]
    with np.errstate(divide="ignore", invalid="ignore"):
      t = (np.log(b[inner]) - np.log(e_lo)) / (np.log(e_hi) - np.log(e_lo))
    t = np.clip(np.nan_to_num(t, nan=0.0), 0.0, 1.0)
    for shrink in (1.0 - 1e-4, 1.0 - 3e-3):
      cand = np.exp(np.log(grid[lo]) + t * (np.log(grid[hi]) - np.log(grid[lo]))) * shrink
      cand = np.maximum(cand, grid[lo])
      todo = cand > q[inner]
      if not np.any(todo):
        break
      ok = np.zeros(inner.size, dtype=bool)
      ok[todo] = rdp_two_stage.epsilon(cand[todo], params) <= b[inner][todo]
      q[inner[ok]] = cand[ok]
    # Where interpolation failed (steep or staircase-like ε*(q)), bisect the
    # bracket geometrically; only verified points are ever kept.
    stuck = np.flatnonzero(q[inner] <= grid[lo])
    if stuck.size:
      # Brackets that start at ε = 0 straddle the KL cliff (ε jumps from 0):
      # the answer is the cliff's edge whatever the budget, so solve once per
      # bracket with the smallest budget in it (which is feasible for all).
      at_zero = eps_grid[lo[stuck]] == 0
      rows = inner[stuck[~at_zero]]
      targets = b[rows]
      brackets_lo, brackets_hi = lo[stuck[~at_zero]], hi[stuck[~at_zero]]
      cliff_rows = inner[stuck[at_zero]]
      cliff_lo = lo[stuck[at_zero]]
      uniq_lo, which = np.unique(cliff_lo, return_inverse=True)
      cliff_targets = np.array([b[cliff_rows[which == k]].min() for k in range(uniq_lo.size)])
      low = np.concatenate([grid[brackets_lo], grid[uniq_lo]])
      high = np.concatenate([grid[brackets_hi], grid[uniq_lo + 1]])
      target = np.concatenate([targets, cliff_targets])
      for _ in range(_BISECTION_STEPS):
        mid = np.sqrt(low * high)
        fits = rdp_two_stage.epsilon(mid, params) <= target
        low = np.where(fits, mid, low)
        high = np.where(fits, high, mid)
      q[rows] = low[:rows.size]
      q[cliff_rows] = low[rows.size:][which]
  return q


@dataclasses.dataclass
class RecordRates:
  """Calibrated per-record rates and what they cost.

  Attributes:
    budgets: the requested ε_ij (any shape; flattened views below).
    q: the rates, same shape as ``budgets``.
    epsilon: the exact Theorem 1 ε of each record at its rate.
    method: "scf", "binary_search" or "exact".
    params: the (σ, τ, T, λ, δ, threat model) the rates are valid for.
    fit: the SCF fit (``method="scf"`` only), with its R².
    lowered: records whose estimator rate was over budget and was lowered.
    unsolved: records the estimator had no answer for (solved exactly).
    seconds: wall time of the calibration.
  """
  budgets: np.ndarray
  q: np.ndarray
  epsilon: np.ndarray
  method: str
  params: TwoStageParams
  fit: Optional[scf.ScfFit] = None
  lowered: int = 0
  unsolved: int = 0
  seconds: float = 0.0

  def __post_init__(self):
    over = self.epsilon > self.budgets * (1 + 1e-12)
    if np.any(over):  # cannot happen by construction; refuse loudly if it does
      raise AssertionError(
          f"{int(over.sum())} record(s) would exceed their budget; refusing to "
          "return these rates.")

  @property
  def excluded(self) -> int:
    """Records at q = 0: their budget is too small to ever take part."""
    return int(np.count_nonzero(self.q == 0))

  def unused_budget(self) -> dict:
    """How much of each finite budget the rates leave unspent (relative)."""
    finite = np.isfinite(self.budgets)
    frac = 1.0 - self.epsilon[finite] / self.budgets[finite]
    if frac.size == 0:
      return {"mean": 0.0, "median": 0.0, "max": 0.0, "records_over_1pct": 0}
    return {"mean": float(frac.mean()), "median": float(np.median(frac)),
            "max": float(frac.max()),
            "records_over_1pct": int(np.count_nonzero(frac > 0.01))}

  def summary(self) -> dict:
    out = {"method": self.method, "records": int(self.budgets.size),
           "distinct_budgets": int(np.unique(self.budgets).size),
           "lowered_by_exact_check": self.lowered, "solved_exactly": self.unsolved,
           "excluded_q0": self.excluded, "seconds": self.seconds,
           "unused_budget": self.unused_budget()}
    if self.fit is not None:
      out["r_squared"] = self.fit.r_squared
      out["fit"] = {"a": self.fit.a, "b": self.fit.b, "c": self.fit.c}
    return out


def calibrate_record_rates(budgets: np.ndarray, params: TwoStageParams,
                           method: str = "scf", max_distinct: int = 4096,
                           budget_resolution: float = 1e-3,
                           q_grid: Optional[np.ndarray] = None,
                           fit: Optional[scf.ScfFit] = None) -> RecordRates:
  """Alg. 3 line 2 (q_ij = F(ε_ij)) with an exact re-check; see module doc.

  Args:
    budgets: ε_ij, any shape; > 0, inf allowed (gets q = 1).
    params: σ, τ, T, λ, δ and threat model of the run.
    method: "scf" (Alg. 2), "binary_search" (IDP-SGD baseline) or "exact".
    max_distinct: above this many distinct budgets, budgets are rounded down
      to ``budget_resolution`` (relative) before solving.
    q_grid: SCF's simulation grid Π (default :func:`scf.default_q_grid`).
    fit: a precomputed SCF fit for ``params`` (skips Alg. 2 lines 1-7).
  """
  if method not in METHODS:
    raise ValueError(f"method={method!r} must be one of {METHODS}.")
  start = time.perf_counter()
  b = check_budgets(budgets)
  flat = b.reshape(-1)
  uniq, inverse = np.unique(flat, return_inverse=True)
  solve_for = uniq
  if uniq.size > max_distinct:
    solve_for, coarse = np.unique(_round_down(uniq, budget_resolution),
                                  return_inverse=True)
    inverse = coarse[inverse]
    uniq = solve_for
  finite = np.isfinite(solve_for)
  q_u = np.ones(uniq.size)
  lowered_u = np.zeros(uniq.size, dtype=bool)
  unsolved_u = np.zeros(uniq.size, dtype=bool)
  if method == "scf":
    fit = fit if fit is not None else scf.fit_scf(params, q_grid)
    q_u[finite] = fit.invert(solve_for[finite])
    unsolved_u = np.isnan(q_u)
    q_u[unsolved_u] = exact_rates(solve_for[unsolved_u], params)
    check = finite & ~unsolved_u
    eps_check = np.zeros(uniq.size)
    eps_check[check] = rdp_two_stage.epsilon(q_u[check], params)
    lowered_u = check & (eps_check > solve_for)
    if np.any(lowered_u):
      q_u[lowered_u] = exact_rates(solve_for[lowered_u], params)
  elif method == "binary_search":
    q_u[finite] = binary_search.binary_search_rates(solve_for[finite], params)
  else:
    q_u[finite] = exact_rates(solve_for[finite], params)
  eps_u = np.asarray(rdp_two_stage.epsilon(q_u, params))
  q = q_u[inverse].reshape(b.shape)
  return RecordRates(
      budgets=b, q=q, epsilon=eps_u[inverse].reshape(b.shape), method=method,
      params=params, fit=fit if method == "scf" else None,
      lowered=int(np.count_nonzero(lowered_u[inverse])),
      unsolved=int(np.count_nonzero(unsolved_u[inverse])),
      seconds=time.perf_counter() - start)
