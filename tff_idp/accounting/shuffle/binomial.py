"""One binomial CDF or pmf value, equal to ``scipy.stats.binom``'s, without its per-call overhead.

Apple's blocked FMT22 loops (:mod:`tff_idp.accounting.shuffle.fmt22`) ask for
one binomial CDF value at a time, hundreds of thousands of times per ε:
``scipy.stats.binom.cdf`` spends ~100 µs per scalar call on argument
handling around the same Boost function these call directly (issue 52: 28 s
of the ledger loop at n = 100,000). The support rules are
``rv_discrete``'s (SciPy 1.9): CDF 0 below 0 and 1 from n up, pmf 0 off the
integers of [0, n], values clipped to [0, 1]; tests/accounting/shuffle/test_binomial.py
checks equality with ``scipy.stats.binom`` bit for bit.
"""
from __future__ import annotations

import math

import numpy as np
# The ufuncs behind scipy.stats.binom's _cdf and _pmf.
from scipy.stats import _boost  # pylint: disable=protected-access


def _clip(value: float) -> float:
  return min(1.0, max(0.0, value))


def cdf(k: float, n: int, p: float) -> float:
  """P[Bin(n, p) <= k] for integer n >= 0 and p in [0, 1], as ``scipy.stats.binom.cdf``."""
  if math.isnan(k):
    return math.nan
  if k < 0:
    return 0.0
  if k >= n:
    return 1.0
  value = _boost._binom_cdf(float(math.floor(k)), float(n), float(p))  # pylint: disable=W0212
  return _clip(float(value))


def pmf(k: float, n: int, p: float) -> float:
  """P[Bin(n, p) = k] for integer n >= 0 and p in [0, 1], as ``scipy.stats.binom.pmf``."""
  if math.isnan(k):
    return math.nan
  if k < 0 or k > n or k != math.floor(k):
    return 0.0
  with np.errstate(divide="ignore"):  # as scipy's _pmf (p = 0 or 1)
    value = _boost._binom_pdf(float(k), float(n), float(p))  # pylint: disable=W0212
  return _clip(float(value))
