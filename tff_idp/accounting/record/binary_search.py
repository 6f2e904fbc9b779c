"""BinarySearch: the IDP-SGD SAMPLE-style exact bisection per distinct budget.

The baseline that rPDP-FL §7.1.2 (Table 3) compares SCF against (Boenisch et
al. 2023, Alg. 2 "Sample"): for every distinct ε, bisect q ∈ [0, 1] with the
exact accountant until the bracket is narrower than ``tolerance``, and keep
the feasible end. Its cost grows with the number of *distinct* budgets, which
is what makes it slow for individual (continuous) budgets.
"""
from __future__ import annotations

import numpy as np

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams


def binary_search_rate(budget: float, params: TwoStageParams,
                       tolerance: float = 1e-6) -> float:
  """Largest q (within ``tolerance``) with Theorem 1 ε(q) ≤ budget."""
  if rdp_two_stage.epsilon(1.0, params) <= budget:
    return 1.0
  lo, hi = 0.0, 1.0  # ε(lo) ≤ budget < ε(hi)
  while hi - lo > tolerance:
    mid = 0.5 * (lo + hi)
    if rdp_two_stage.epsilon(mid, params) <= budget:
      lo = mid
    else:
      hi = mid
  return lo


def binary_search_rates(budgets: np.ndarray, params: TwoStageParams,
                        tolerance: float = 1e-6) -> np.ndarray:
  """:func:`binary_search_rate` for every distinct budget (a Python loop)."""
  b = np.asarray(budgets, dtype=float)
  uniq, inverse = np.unique(b.reshape(-1), return_inverse=True)
  q = np.array([binary_search_rate(float(e), params, tolerance) for e in uniq])
  return q[inverse].reshape(b.shape)
