"""EoN ("Echo of Neighbours") central bound of APES, as published (unverified).

Liu et al., "Echo of Neighbors: privacy amplification for personalized
private federated learning with shuffle model" (AAAI 2023), Thm 4 and the
numerical procedure of yixuanLL/EoN privAmp/computeamplification_perS.py
that produced the paper's tables. These are parity reporters: notes §2.8 D1
explains why the heterogeneous step (averaging the echo probability over all
budgets while the target uses ε* = max ε) is not a proof for a given user,
and D3 that the numeric bound replaces the Poisson-binomial echo count by a
Normal approximation. ``per_user`` holds the bound we stand behind.

* :func:`closed_form` — Thm 4 with the square root of the main text and code:
  ε^c = ln(1 + (e^{ε*}−1)/(e^{ε*}+1)·(8√(ln(4/δ_s)/S) + 8/S)),
  requires S ≥ 16 ln(4/δ_s).
* :func:`delta_c` — δ^c = (e^{ε*}−1)/(e^{ε*}+1)·δ_s (with ε*, notes D11).
* :func:`numeric` — the tables' procedure: echo count ~ Normal(S, Σ(p/n)(1−p/n))
  evaluated on blocks of ``step`` counts around S (``norm.cdf(·, S−0.5, sd)``),
  Apple's blocked hockey-stick loop with α = e^{ε*}/(1+e^{ε*}) and the
  ``deltaqadd`` typo as shipped (harmless, see ``fmt22``), ``num_iterations``
  halvings of [0, closed form]; returns ε* when S < 16 ln(4/δ_s).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats

from tff_idp.accounting.shuffle import echoes
from tff_idp.accounting.shuffle import fmt22
from tff_idp.accounting.shuffle import reduction

__all__ = ["EonResult", "closed_form", "delta_c", "numeric", "threshold", "bound"]


def threshold(delta: float) -> float:
  """Thm 4's validity condition S ≥ 16 ln(4/δ_s)."""
  if not 0.0 < delta < 1.0:
    raise ValueError(f"delta={delta!r} must lie strictly between 0 and 1.")
  return 16.0 * math.log(4.0 / delta)


def closed_form(s: float, epsilon_max: float, delta: float) -> float:
  """Thm 4 (as published, unverified); ε* when S is below the threshold."""
  if s < threshold(delta):
    return float(epsilon_max)
  r = math.tanh(epsilon_max / 2.0)  # (e^ε−1)/(e^ε+1)
  return math.log(1.0 + r * (8.0 * math.sqrt(math.log(4.0 / delta) / s) + 8.0 / s))


def delta_c(epsilon_max: float, delta: float) -> float:
  """δ^c = (e^{ε*}−1)/(e^{ε*}+1)·δ_s (as published, unverified)."""
  return math.tanh(epsilon_max / 2.0) * float(delta)


def numeric(epsilons, delta: float, num_iterations: int = 10, step: int = 100,
            fix_typo: bool = False) -> float:
  """The EoN numerical bound used for the paper's tables (as published, unverified)."""
  e = np.asarray(epsilons, dtype=np.float64).ravel()
  sums = echoes.eon_sums(e)
  n = e.size
  eps_max = float(e.max())
  if sums.mean < threshold(delta):
    return eps_max
  eps_upper = closed_form(sums.mean, eps_max, delta)
  alpha = reduction.alpha_for_epsilon(eps_max)
  sd = math.sqrt(sums.variance)
  norm = stats.norm(sums.mean - 0.5, sd)

  def mass(lo: int, hi: int) -> float:
    return float(norm.cdf(hi) - norm.cdf(lo))

  def delta_fn(eps: float) -> float:
    return fmt22.apple_deltacomp(n, sums.mean, mass, alpha, eps, delta, step,
                                 True, fix_typo)

  return fmt22.binary_search(delta_fn, delta, num_iterations, eps_upper)


@dataclasses.dataclass(frozen=True)
class EonResult:
  """EoN as published (unverified): S, both ε^c forms, δ^c, and whether S ≥ threshold."""
  s: float
  variance: float
  epsilon_max: float
  epsilon_closed_form: float
  epsilon_numeric: float
  delta_c: float
  amplified: bool


def bound(epsilons, delta: float, num_iterations: int = 10, step: int = 100) -> EonResult:
  """All EoN numbers for a budget vector (as published, unverified)."""
  e = np.asarray(epsilons, dtype=np.float64).ravel()
  sums = echoes.eon_sums(e)
  eps_max = float(e.max())
  ok = sums.mean >= threshold(delta)
  return EonResult(
      s=sums.mean, variance=sums.variance, epsilon_max=eps_max,
      epsilon_closed_form=closed_form(sums.mean, eps_max, delta),
      epsilon_numeric=numeric(e, delta, num_iterations, step) if ok else eps_max,
      delta_c=delta_c(eps_max, delta) if ok else 0.0, amplified=ok)
