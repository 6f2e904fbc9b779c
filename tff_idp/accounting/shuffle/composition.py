"""User-level composition of per-coordinate (ε^c, δ^c) guarantees.

An APES user's update has d coordinates, each shuffled separately, so the
user-level guarantee of one round is the k-fold composition of the
coordinate-level (ε^c, δ^c) with k = d (APES) or k = b (S-APES's random
b-subset; the ledger) / 2b (S-APES, Prop. 1 of
the paper); T rounds compose k·T times. Three accountants:

* :func:`exact` — optimal composition of k identical (ε, δ)-DP mechanisms
  (Kairouz, Oh, Viswanath 2015; the privacy-loss form of dp_accounting's
  ``from_privacy_parameters`` PLD without discretization): the loss is +∞ with
  probability 1−(1−δ)^k, else ε(2J−k) with J ~ Bin(k, e^ε/(1+e^ε)), and
  δ(ε_g) = 1−(1−δ)^k + (1−δ)^k·E[(1 − e^{ε_g − L})_+]. O(k); k = 314,000 in
  well under a second.
* :func:`pld` — dp_accounting 0.4.3:
  ``from_privacy_parameters(DifferentialPrivacyParameters(ε, δ))
  .self_compose(k).get_epsilon_for_delta(δ_total)``; with ``rounds`` the
  round PLD is built first and self-composed ``rounds`` times. Pessimistic
  discretization makes it slightly larger than :func:`exact`.
* :func:`advanced` / :func:`sapes_prop1` — the paper's parity reporters:
  ε^{uc} = ε√(2k ln(1/δ′)) + kε(e^ε−1), δ^{uc} = δ′ + kδ^c, and Prop. 1
  ε√(4b ln(1/δ′)) + 2bε(e^ε−1), δ^{uc} = δ′ + 2bδ^c.

Every function returns a :class:`Composed` whose ``epsilon`` is ``math.inf``
with ``feasible=False`` and a reason when the δ budget is already spent by the
k·δ^c (or 1−(1−δ^c)^k) term.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np
from scipy import stats

__all__ = ["Composed", "exact", "pld", "advanced", "sapes_prop1", "local_composed"]


@dataclasses.dataclass(frozen=True)
class Composed:
  """(ε, δ) after composing ``k`` times; ``feasible`` False means ε = ∞."""
  epsilon: float
  delta: float
  k: int
  method: str
  feasible: bool = True
  reason: str = ""

  def to_dict(self):
    return dataclasses.asdict(self)


def _check(epsilon: float, delta: float, k: int, target: float, name="delta_total"):
  if not math.isfinite(epsilon) or epsilon < 0:
    raise ValueError(f"epsilon={epsilon!r} must be finite and >= 0.")
  if not 0.0 <= delta < 1.0:
    raise ValueError(f"per-step delta={delta!r} must lie in [0, 1).")
  if int(k) != k or k < 1:
    raise ValueError(f"k={k!r} must be a positive integer (number of compositions).")
  if not 0.0 < target < 1.0:
    raise ValueError(f"{name}={target!r} must lie strictly between 0 and 1.")


def _spent(k: int, delta: float) -> float:
  return -math.expm1(k * math.log1p(-delta))  # 1 − (1−δ)^k


def exact(epsilon: float, delta: float, k: int, delta_total: float,
          iterations: int = 100) -> Composed:
  """Optimal k-fold composition of identical (ε, δ) (module doc), at δ_total."""
  _check(epsilon, delta, k, delta_total)
  k = int(k)
  inf_mass = _spent(k, delta)
  if inf_mass >= delta_total:
    return Composed(math.inf, delta_total, k, "exact", False,
                    f"1-(1-δ^c)^k = {inf_mass:.4g} >= δ_total = {delta_total:.4g}: the "
                    "δ budget is spent; lower δ^c (the shuffle δ_s), k, or raise δ_total.")
  if epsilon == 0.0:
    return Composed(0.0, delta_total, k, "exact")
  alpha = 1.0 / (1.0 + math.exp(-epsilon))
  binom = stats.binom(k, alpha)
  lo = int(max(0, binom.ppf(1e-30) - 1))
  j = np.arange(lo, k + 1)
  pmf = binom.pmf(j)
  keep = pmf > 0
  j, pmf = j[keep], pmf[keep]
  loss = epsilon * (2.0 * j - k)
  below = float(binom.cdf(lo - 1)) if lo > 0 else 0.0  # mass at losses we dropped (≤ 1e-30)
  finite = 1.0 - inf_mass

  def delta_of(eps_g: float) -> float:
    gap = np.maximum(-np.expm1(np.minimum(eps_g - loss, 700.0)), 0.0)
    return inf_mass + finite * (float(np.dot(pmf, gap)) + below)

  hi = epsilon * k
  if delta_of(0.0) <= delta_total:
    return Composed(0.0, delta_total, k, "exact")
  lo_e = 0.0
  for _ in range(int(iterations)):
    mid = 0.5 * (lo_e + hi)
    if delta_of(mid) <= delta_total:
      hi = mid
    else:
      lo_e = mid
    if hi - lo_e < 1e-12 * max(1.0, hi):
      break
  return Composed(hi, delta_total, k, "exact")


def pld(epsilon: float, delta: float, k: int, delta_total: float,
        rounds: int = 1, value_discretization_interval: float = 1e-4) -> Composed:
  """dp_accounting PLD of k·rounds compositions (round PLD, then ``rounds``)."""
  _check(epsilon, delta, k, delta_total)
  from dp_accounting.pld import common
  from dp_accounting.pld import privacy_loss_distribution as pld_lib
  k, rounds = int(k), int(rounds)
  if rounds < 1:
    raise ValueError(f"rounds={rounds!r} must be a positive integer.")
  total = k * rounds
  inf_mass = _spent(total, delta)
  if inf_mass >= delta_total:
    return Composed(math.inf, delta_total, total, "pld", False,
                    f"1-(1-δ^c)^(k·rounds) = {inf_mass:.4g} >= δ_total = {delta_total:.4g}: "
                    "the δ budget is spent; lower δ^c, k or rounds, or raise δ_total.")
  base = pld_lib.from_privacy_parameters(
      common.DifferentialPrivacyParameters(float(epsilon), float(delta)),
      value_discretization_interval=value_discretization_interval)
  composed = base.self_compose(k)
  if rounds > 1:
    composed = composed.self_compose(rounds)
  eps = float(composed.get_epsilon_for_delta(delta_total))
  ok = math.isfinite(eps)
  return Composed(eps, delta_total, total, "pld", ok,
                  "" if ok else "dp_accounting returned inf (δ_total too small).")


def advanced(epsilon: float, delta: float, k: int,
             delta_prime: Optional[float] = None,
             delta_total: Optional[float] = None) -> Composed:
  """The paper's advanced composition over k (parity reporter).

  Give ``delta_prime`` (δ′) directly, or ``delta_total`` and δ′ = δ_total − kδ.
  """
  if (delta_prime is None) == (delta_total is None):
    raise ValueError("give exactly one of delta_prime or delta_total.")
  k = int(k)
  if delta_prime is None:
    _check(epsilon, delta, k, delta_total)
    delta_prime = delta_total - k * delta
    if delta_prime <= 0:
      return Composed(math.inf, delta_total, k, "advanced", False,
                      f"k·δ^c = {k * delta:.4g} >= δ_total = {delta_total:.4g}: the δ "
                      "budget is spent; lower δ^c or k, or raise δ_total.")
  else:
    _check(epsilon, delta, k, delta_prime, "delta_prime")
  eps = epsilon * math.sqrt(2 * k * math.log(1 / delta_prime)) + k * epsilon * math.expm1(epsilon)
  return Composed(eps, delta_prime + k * delta, k, "advanced")


def sapes_prop1(epsilon: float, delta: float, b: int,
                delta_prime: Optional[float] = None,
                delta_total: Optional[float] = None) -> Composed:
  """Prop. 1 (S-APES, as published): advanced composition with k = 2b."""
  if int(b) != b or b < 1:
    raise ValueError(f"b={b!r} must be a positive integer.")
  out = advanced(epsilon, delta, 2 * int(b), delta_prime, delta_total)
  return dataclasses.replace(out, method="sapes_prop1")


def local_composed(epsilon: float, k: int) -> float:
  """Pure ε-LDP composes linearly: k·ε (the ε^{ul} column of the paper)."""
  return float(k) * float(epsilon)
