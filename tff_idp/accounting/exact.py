"""Reference ε from dp-accounting, with a fresh accountant on every call.

These are the numbers users see and the ones every calibration is verified
against before it returns. Two accountants are supported:

* ``"rdp"``: dp-accounting's ``RdpAccountant`` with its default orders.
* ``"pld"``: dp-accounting's ``PLDAccountant`` (privacy loss distributions,
  pessimistic discretisation). Tighter than RDP, so for the same guarantee it
  permits higher sampling rates.
"""
from __future__ import annotations

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

ACCOUNTANTS = ("rdp", "pld")
# dp-accounting's default PLD discretisation; coarser grids are pessimistic
# (larger ε), which is what calibration searches use for speed.
PLD_DISCRETIZATION = 1e-4


def check_accountant(accountant: str) -> str:
  if accountant not in ACCOUNTANTS:
    raise ValueError(
        f"accountant={accountant!r} is not supported; choose one of {ACCOUNTANTS}.")
  return accountant


def dp_event(q: float, sigma: float, rounds: int) -> dp_accounting.DpEvent:
  """``rounds`` compositions of PoissonSampled(q, Gaussian(σ))."""
  step = dp_accounting.PoissonSampledDpEvent(
      float(q), dp_accounting.GaussianDpEvent(float(sigma)))
  return dp_accounting.SelfComposedDpEvent(step, int(rounds))


def make_accountant(accountant: str, pld_discretization: float = PLD_DISCRETIZATION
                    ) -> dp_accounting.PrivacyAccountant:
  check_accountant(accountant)
  if accountant == "rdp":
    return rdp_privacy_accountant.RdpAccountant()
  return pld_privacy_accountant.PLDAccountant(
      value_discretization_interval=pld_discretization)


def epsilon(q: float, sigma: float, rounds: int, delta: float,
            accountant: str = "rdp",
            pld_discretization: float = PLD_DISCRETIZATION) -> float:
  """ε of ``rounds`` Poisson(q)-subsampled Gaussian(σ) steps at δ."""
  if q <= 0.0 or rounds == 0:
    return 0.0
  acc = make_accountant(accountant, pld_discretization)
  acc.compose(dp_event(min(q, 1.0), sigma, rounds))
  try:
    return float(acc.get_epsilon(delta))
  except ValueError as e:
    # At q below ~1e-7 dp-accounting's RDP can round to a tiny negative value,
    # which its get_epsilon rejects; name the cause instead of passing that on.
    raise ValueError(
        f"dp-accounting's {accountant!r} accountant cannot evaluate ε at sampling "
        f"rate q={q:.3g} (σ={sigma:.4g}, {rounds} rounds, δ={delta:g}): {e} Rates "
        "this small are numerically unreliable and useless in practice; raise the "
        "group's ε or clients_per_round, or lower the rounds.") from e
