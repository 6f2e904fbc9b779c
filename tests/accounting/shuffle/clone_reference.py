"""The clone reduction summed term by term: the tests' independent reference (FMT22).

Shared by tests/accounting/shuffle/test_ledger.py and test_per_user.py; nothing
here comes from ``tff_idp.accounting.shuffle``.
"""
import math
from typing import Sequence

import numpy as np
from scipy import stats


def clone_delta(probs: Sequence[float], eps_target: float, eps: float) -> float:
  """δ(ε) = Σ_c Pr[C=c]·Σ_k (P_c(k) − e^ε Q_c(k))_+ with C the Poisson-binomial of
  ``probs`` (pmf by convolution) and P_c, Q_c the α(ε_target)-mixtures of Bin(c, ½)
  and Bin(c, ½)+1 (FMT22's reduction, written out term by term)."""
  pmf = np.array([1.0])
  for p in probs:
    pmf = np.convolve(pmf, [1.0 - p, p])
  alpha = math.exp(eps_target) / (1.0 + math.exp(eps_target))
  total = 0.0
  for c, w in enumerate(pmf):
    if w < 1e-300:
      continue
    k = np.arange(c + 2)
    b, bm = stats.binom.pmf(k, c, 0.5), stats.binom.pmf(k - 1, c, 0.5)
    pk, qk = alpha * bm + (1 - alpha) * b, (1 - alpha) * bm + alpha * b
    total += w * float(np.maximum(pk - math.exp(eps) * qk, 0.0).sum())
  return total


def clip_laplace_clone_probs(others: Sequence[float], eps_target: float) -> np.ndarray:
  """Exact Clip-Laplace clone probabilities, inf R_j/R_u = a(ε_j)·b(ε_u)·e^{−ε_j}:
  ε_j/(1−e^{−ε_j}) · (1−e^{−ε_u})/ε_u · e^{−ε_j}, written out."""
  o = np.asarray(others, dtype=np.float64)
  return o / (1 - np.exp(-o)) * (1 - math.exp(-eps_target)) / eps_target * np.exp(-o)
