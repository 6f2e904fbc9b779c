"""Vectorised RDP of the Poisson-subsampled Gaussian mechanism (pure numpy).

This is the hot path of every calibration search. It evaluates exactly the
integer-order formula that dp-accounting uses (Mironov et al. 2019, Sec. 3.3,
``_compute_log_a_int``):

    A_α = Σ_{i=0..α} C(α,i) (1-q)^{α-i} q^i exp((i² - i) / (2σ²)),
    RDP(α) = log A_α / (α - 1),

but for all orders at once, as one segmented log-sum-exp over a precomputed
table, instead of a Python loop per order and per term. It uses only the
integer orders of dp-accounting's default order set, so the ε it yields is
never below the one dp-accounting reports (which may also use fractional
orders): a search driven by it is conservative, and every result is
re-verified with dp-accounting before it is returned.

:func:`epsilon_refined` adds fractional orders near the best integer one,
with :func:`log_a_fractional`: dp-accounting's fractional-order series
(``_compute_log_a_frac``), term for term, evaluated as arrays (issue 52: the
Python loop took ~65% of a SAMPLE calibration).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import special

# The integer members of dp_accounting.rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS.
INTEGER_ORDERS: np.ndarray = np.array(
    list(range(2, 64)) + [128, 256, 512, 1024], dtype=np.int64)


class _OrderTable:
  """Flattened (order, i) index table for a segmented log-sum-exp."""

  def __init__(self, orders: Sequence[int]):
    self.orders = np.asarray(orders, dtype=np.int64)
    if np.any(self.orders < 2):
      raise ValueError("integer RDP orders must be >= 2")
    sizes = self.orders + 1
    self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    self.alpha = np.repeat(self.orders, sizes).astype(float)
    self.i = np.concatenate([np.arange(a + 1) for a in self.orders]).astype(float)
    self.log_comb = (special.gammaln(self.alpha + 1) - special.gammaln(self.i + 1)
                     - special.gammaln(self.alpha - self.i + 1))
    self.i_sq_minus_i = self.i * self.i - self.i
    self.segment = np.repeat(np.arange(len(self.orders)), sizes)


_DEFAULT_TABLE = _OrderTable(INTEGER_ORDERS)


def rdp_poisson_subsampled_gaussian(
    q: float | np.ndarray, sigma: float,
    table: _OrderTable = _DEFAULT_TABLE) -> np.ndarray:
  """RDP at ``table.orders`` of one Poisson(q)-subsampled Gaussian(σ) step.

  Args:
    q: sampling rate(s) in [0, 1]; a scalar or a 1-D array.
    sigma: noise multiplier (> 0).

  Returns:
    Array of shape ``(len(orders),)`` for scalar q, else ``(len(q), len(orders))``.
  """
  q_arr = np.atleast_1d(np.asarray(q, dtype=float))
  out = np.empty((q_arr.size, table.orders.size))
  orders = table.orders.astype(float)
  for row, qv in enumerate(q_arr):  # rows are few; the inner work is vectorised
    if qv <= 0.0:
      out[row] = 0.0
    elif qv >= 1.0:
      out[row] = orders / (2.0 * sigma**2)
    else:
      terms = (table.log_comb + table.i * math.log(qv)
               + (table.alpha - table.i) * math.log1p(-qv)
               + table.i_sq_minus_i / (2.0 * sigma**2))
      peak = np.maximum.reduceat(terms, table.starts)
      sums = np.add.reduceat(np.exp(terms - peak[table.segment]), table.starts)
      out[row] = (peak + np.log(sums)) / (orders - 1.0)
  return out[0] if np.ndim(q) == 0 else out


def rdp_to_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
  """(ε, δ) from RDP: Balle et al. 2020 Prop. 12, as in dp-accounting.

  ε = min_α [ RDP(α) + log(1 - 1/α) - log(δ α) / (α - 1) ], clamped at 0, and
  0 where δ² + expm1(-RDP) > 0 (the KL bound). Vectorised over leading axes.
  """
  orders = np.asarray(orders, dtype=float)
  rdp = np.asarray(rdp, dtype=float)
  with np.errstate(over="ignore", invalid="ignore"):
    eps = rdp + np.log1p(-1.0 / orders) - np.log(delta * orders) / (orders - 1.0)
    eps = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, eps)
  return np.maximum(0.0, np.min(eps, axis=-1))


def epsilon(q: float, sigma: float, rounds: int, delta: float) -> float:
  """ε after ``rounds`` compositions of the Poisson-subsampled Gaussian."""
  rdp = rounds * rdp_poisson_subsampled_gaussian(q, sigma)
  return float(rdp_to_epsilon(INTEGER_ORDERS, rdp, delta))


# The fractional members of dp-accounting's default orders (1.1, 1.2, ..., 10.9).
FRACTIONAL_ORDERS: np.ndarray = np.array(
    [1 + x / 10.0 for x in range(1, 100) if x % 10], dtype=float)


def epsilon_refined(q: float, sigma: float, rounds: int, delta: float) -> float:
  """ε over the integer orders plus the fractional orders next to the best one.

  The optimal order is often fractional (below 2 for small σ), where the
  integer-only ε can overstate dp-accounting's by tens of percent. This adds
  the fractional-order RDP of Mironov et al. 2019, Sec. 3.3 (dp-accounting's
  series, :func:`log_a_fractional`) for the default fractional orders within
  ±0.6 of the best integer order. A subset of the orders still gives an upper
  bound on dp-accounting's ε (up to float rounding; every calibration
  re-verifies with dp-accounting itself).
  """
  rdp_int = rounds * rdp_poisson_subsampled_gaussian(q, sigma)
  eps_int = rdp_to_epsilon(INTEGER_ORDERS[:, None], rdp_int[:, None], delta)
  best = float(INTEGER_ORDERS[int(np.argmin(eps_int))])
  near = FRACTIONAL_ORDERS[np.abs(FRACTIONAL_ORDERS - best) < 0.65]
  eps = float(eps_int.min())
  if near.size and 0.0 < q < 1.0 and sigma > 0.0:
    rdp_frac = rounds * log_a_fractional(q, sigma, near) / (near - 1.0)
    if np.all(rdp_frac >= 0):  # NaN (a series that cancelled below 0) fails this too
      eps = min(eps, float(rdp_to_epsilon(near, rdp_frac, delta)))
  return eps


_SERIES_END = -30.0  # dp-accounting's stopping rule: the first term below e^-30 is the last
_MAX_TERMS = 2**22  # a series not ended by then (NaN terms) is given up, never looped on


def log_a_fractional(q: float, sigma: float, alphas: np.ndarray,
                     first_block: int = 64) -> np.ndarray:
  """log A_α of the Poisson(q)-subsampled Gaussian(σ) at fractional orders α.

  Mironov et al. 2019, Sec. 3.3: A_α = A_0 + A_1, two series over i ≥ 0 with
  terms C(α,i) q^i (1-q)^{α-i} e^{(i²-i)/(2σ²)} ½erfc((i-z₀)/(√2σ)) (and the
  mirror term with j = α - i), where ½erfc((i-z₀)/(√2σ)) = Φ((z₀-i)/σ),
  z₀ = σ² log(1/q - 1) + ½, and C(α,i) changes sign for i > α. The same
  terms and the same stopping rule as dp-accounting's ``_compute_log_a_frac``
  (each series runs to the first i where both terms are below e^-30), for
  all orders at once and in blocks of doubling length;
  each series is summed with its signs around its largest term. Agrees with
  dp-accounting to ~1e-13 (float rounding; tests/accounting/test_fast_rdp.py).
  A series whose signed sum is not positive, or that has not ended after
  ``_MAX_TERMS`` terms, gives NaN (dp-accounting raises, or loops on).

  Args:
    q: sampling rate in (0, 1).
    sigma: noise multiplier (> 0).
    alphas: fractional orders (> 1).
  """
  alphas = np.asarray(alphas, dtype=float)
  z0 = sigma**2 * math.log(1.0 / q - 1.0) + 0.5
  log_q, log_1mq = math.log(q), math.log(1.0 - q)
  two_sigma_sq = 2.0 * sigma**2
  terms: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in alphas]
  active, start, block = np.arange(alphas.size), 0, first_block
  while active.size:
    i = np.arange(start, start + block, dtype=float)[None, :]
    alpha = alphas[active][:, None]
    coef = special.binom(alpha, i)
    log_coef = np.log(np.abs(coef))
    j = alpha - i
    log_s0 = (log_coef + i * log_q + j * log_1mq + (i * i - i) / two_sigma_sq
              + special.log_ndtr((z0 - i) / sigma))
    log_s1 = (log_coef + j * log_q + i * log_1mq + (j * j - j) / two_sigma_sq
              + special.log_ndtr((j - z0) / sigma))
    below = np.maximum(log_s0, log_s1) < _SERIES_END
    ended = below.any(axis=1)
    last = np.where(ended, below.argmax(axis=1), block - 1)
    for row, k in enumerate(active):
      n = last[row] + 1
      terms[k].append((log_s0[row, :n], log_s1[row, :n], np.where(coef[row, :n] > 0, 1.0, -1.0)))
    active, start, block = active[~ended], start + block, 2 * block
    if start >= _MAX_TERMS:
      for k in active:
        terms[k] = []
      break
  out = np.full(alphas.size, math.nan)
  for k, blocks in enumerate(terms):
    if not blocks:
      continue
    signs = np.concatenate([b[2] for b in blocks])
    out[k] = np.logaddexp(_signed_log_sum(np.concatenate([b[0] for b in blocks]), signs),
                          _signed_log_sum(np.concatenate([b[1] for b in blocks]), signs))
  return out


def _signed_log_sum(log_terms: np.ndarray, signs: np.ndarray) -> float:
  """log Σ signs·exp(log_terms), summed around the largest term; NaN if the sum is not > 0."""
  peak = float(log_terms.max())
  total = float(np.dot(signs, np.exp(log_terms - peak)))
  return peak + math.log(total) if total > 0 else math.nan


def rdp_poisson_subsampled_gaussian_many(
    q: np.ndarray, sigma: float, table: _OrderTable = _DEFAULT_TABLE,
    chunk_rows: int = 256) -> np.ndarray:
  """Like :func:`rdp_poisson_subsampled_gaussian`, vectorised over many q too.

  All q in one chunk are evaluated as one ``(rows, Σ_α (α+1))`` array with a
  segmented log-sum-exp along the terms, so thousands of distinct rates cost
  a fraction of a second. Returns shape ``(len(q), len(table.orders))``.
  """
  q_arr = np.asarray(q, dtype=float).reshape(-1)
  if np.any(~(q_arr >= 0.0)) or np.any(q_arr > 1.0):
    raise ValueError("sampling rates q must lie in [0, 1].")
  orders = table.orders.astype(float)
  out = np.zeros((q_arr.size, orders.size))
  full = q_arr >= 1.0
  out[full] = orders / (2.0 * sigma**2)
  inner = np.flatnonzero((q_arr > 0.0) & ~full)
  gauss = table.i_sq_minus_i / (2.0 * sigma**2)
  for lo in range(0, inner.size, chunk_rows):
    rows = inner[lo:lo + chunk_rows]
    qv = q_arr[rows][:, None]
    terms = (table.log_comb + gauss) + table.i * np.log(qv) \
        + (table.alpha - table.i) * np.log1p(-qv)
    peak = np.maximum.reduceat(terms, table.starts, axis=1)
    sums = np.add.reduceat(np.exp(terms - peak[:, table.segment]), table.starts, axis=1)
    out[rows] = (peak + np.log(sums)) / (orders - 1.0)
  return out
