"""Per-group privacy ledger: ε spent so far, and a hard stop at the calibrated rounds.

After r rounds, a client of group p has gone through r compositions of the
Poisson(q_p)-subsampled Gaussian with effective noise multiplier σ_p, whether
or not it was sampled (privacy amplification by sampling, IDP-FedAvg Alg. 2).
The ledger reports that ε with the accountant the run was calibrated with, by
composing each group's round event ``PoissonSampledDpEvent(q_p,
GaussianDpEvent(σ_p))`` ``r`` times with dp-accounting (through its public
interface only: RDP is linear in the compositions, so the round's RDP curve is
read once from the accountant and scaled).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Sequence

import dp_accounting
import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant

from tff_idp.accounting import exact
from tff_idp.accounting.ledger import PrivacyLedger
from tff_idp.errors import TffIdpError


class BudgetExhaustedError(TffIdpError, RuntimeError):
  """Raised before a round that would run past the calibrated number of rounds."""


class BudgetOverrunWarning(UserWarning):
  """Emitted for every round run past the calibrated rounds with allow_overrun."""


@dataclasses.dataclass
class GroupPrivacyLedger(PrivacyLedger):
  """Tracks rounds run and ε spent per privacy group (IDP-FedAvg, SCALE).

  Attributes:
    target_epsilons: per-group budgets (inf allowed).
    sampling_rates: per-group Poisson rates q_p.
    noise_multipliers: per-group effective noise multipliers σ_p (0 = no DP).
    delta: target δ.
    calibrated_rounds: the rounds the budgets were calibrated for.
    accountant: "rdp" or "pld".
    allow_overrun: run past ``calibrated_rounds`` (reported, never hidden).
    rounds_done: rounds recorded so far (restored from checkpoints).
  """
  target_epsilons: Sequence[float]
  sampling_rates: Sequence[float]
  noise_multipliers: Sequence[float]
  delta: float
  calibrated_rounds: int
  accountant: str = "rdp"
  allow_overrun: bool = False
  rounds_done: int = 0

  def __post_init__(self):
    exact.check_accountant(self.accountant)
    n = len(self.target_epsilons)
    if not len(self.sampling_rates) == len(self.noise_multipliers) == n:
      raise ValueError("one sampling rate and noise multiplier per group is needed.")
    self._rdp_orders = np.asarray(rdp_privacy_accountant.DEFAULT_RDP_ORDERS)
    self._rdp_of_round: dict[int, np.ndarray] = {}
    self._cache: dict[int, tuple[float, ...]] = {}

  @property
  def num_groups(self) -> int:
    return len(self.target_epsilons)

  def _round_rdp(self, p: int) -> np.ndarray:
    if p not in self._rdp_of_round:
      acc = rdp_privacy_accountant.RdpAccountant(list(self._rdp_orders))
      acc.compose(self.round_events()[p])
      self._rdp_of_round[p] = np.asarray(acc.rdp)
    return self._rdp_of_round[p]

  def round_events(self) -> list[dp_accounting.DpEvent]:
    """What one round releases about a client of each group (IDP-FedAvg Alg. 2)."""
    return [dp_accounting.PoissonSampledDpEvent(
        q, dp_accounting.GaussianDpEvent(sigma))
            for q, sigma in zip(self.sampling_rates, self.noise_multipliers)]

  def _epsilon(self, p: int, rounds: int) -> float:
    q, sigma = self.sampling_rates[p], self.noise_multipliers[p]
    if rounds == 0 or q == 0:
      return 0.0
    if sigma <= 0:
      return math.inf
    if self.accountant == "rdp":
      # RDP is linear in the compositions: the round event's RDP curve, read
      # once through the accountant's public ``rdp``, scaled by the rounds.
      eps, _ = rdp_privacy_accountant.compute_epsilon(
          self._rdp_orders, rounds * self._round_rdp(p), self.delta)
      return float(eps)
    return exact.epsilon(q, sigma, rounds, self.delta, "pld")

  def spent(self, rounds: int | None = None) -> tuple[float, ...]:
    """ε spent per group after ``rounds`` rounds (default: rounds done)."""
    rounds = self.rounds_done if rounds is None else int(rounds)
    if rounds not in self._cache:
      self._cache[rounds] = tuple(self._epsilon(p, rounds) for p in range(self.num_groups))
    return self._cache[rounds]

  def remaining_rounds(self) -> int:
    return self.calibrated_rounds - self.rounds_done

  def check_can_run(self, rounds: int = 1) -> None:
    """Raises BudgetExhaustedError if ``rounds`` more rounds would overrun."""
    if self.rounds_done + rounds > self.calibrated_rounds and not self.allow_overrun:
      raise BudgetExhaustedError(
          f"the privacy budgets {list(self.target_epsilons)} were calibrated for "
          f"{self.calibrated_rounds} rounds and {self.rounds_done} have run; "
          f"running {rounds} more would exceed them. Recalibrate for more rounds, "
          "or pass allow_overrun=True to run anyway (the overrun is reported).")

  def record_round(self) -> None:
    """Records one finished round; warns loudly on every overrun round."""
    self.check_can_run(1)
    self.rounds_done += 1
    if self.rounds_done > self.calibrated_rounds:
      spent = self.spent()
      warnings.warn(
          f"privacy overrun: round {self.rounds_done} > calibrated "
          f"{self.calibrated_rounds}; ε spent per group {spent} vs budgets "
          f"{list(self.target_epsilons)}.", BudgetOverrunWarning, stacklevel=2)

  def over_budget(self) -> list[bool]:
    return [s > t for s, t in zip(self.spent(), self.target_epsilons)]

  # -- the PrivacyLedger interface the round driver uses ----------------------
  def metric_names(self, group_names: Sequence[str]) -> list[str]:
    return [f"epsilon_{g}" for g in self._names(group_names)]

  def _names(self, group_names: Sequence[str]) -> list[str]:
    if len(group_names) == self.num_groups:
      return list(group_names)
    return [f"group{p}" for p in range(self.num_groups)]

  def check_budget(self, total_rounds: int) -> None:
    self.check_can_run(0)
    if total_rounds > self.calibrated_rounds and not self.allow_overrun:
      self.check_can_run(total_rounds - self.rounds_done)

  def begin_round(self) -> None:
    self.check_can_run(1)

  def end_round(self, cohort: Sequence[str]) -> None:
    del cohort  # every client of a group is charged, sampled or not
    self.record_round()

  def metrics(self, group_names: Sequence[str], evaluating: bool) -> dict:
    """ε per group. RDP is cheap; a PLD composition costs ~1 s per group, so
    PLD ledgers are read on evaluation rounds only."""
    if self.accountant != "rdp" and not evaluating:
      return {}
    return {f"epsilon_{g}": eps for g, eps in zip(self._names(group_names), self.spent())}

  def get_state(self) -> dict:
    return {"rounds_done": self.rounds_done}

  def set_state(self, state: dict) -> None:
    self.rounds_done = int(state["rounds_done"])
