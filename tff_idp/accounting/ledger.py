"""The one privacy-ledger interface that the round driver knows.

A ledger is told when a round begins and ends and which clients took part;
it composes the :mod:`dp_accounting` events the mechanism released that round
(:meth:`PrivacyLedger.round_events`) and reports the ε spent as metric
columns. Three ledgers implement it:

* :class:`tff_idp.accounting.client.ledger.GroupPrivacyLedger`: IDP-FedAvg
  and SCALE, ε per privacy group (a release: it depends on the rounds only);
* :class:`tff_idp.accounting.record.ledger.RecordBudgetAccountant`: rPDP-FL,
  ε per record, with exclusion of records that cannot afford a round;
* :class:`tff_idp.accounting.shuffle.round_ledger.ShuffleRoundLedger`: APES,
  ε^c and ε^{uc} per round and cumulated.

No TensorFlow here.
"""
from __future__ import annotations

import abc
from typing import Any, Sequence

import dp_accounting


class PrivacyLedger(abc.ABC):
  """What the round driver asks of a ledger, per group or per record."""

  #: True when the ledger's columns depend on the secret sampling (then they
  #: are diagnostics, never released).
  metrics_depend_on_sampling: bool = False

  @abc.abstractmethod
  def metric_names(self, group_names: Sequence[str]) -> list[str]:
    """The metric columns :meth:`metrics` writes."""

  def check_budget(self, total_rounds: int) -> None:
    """Before a run: raise ``BudgetExhaustedError`` if ``total_rounds`` cannot be afforded."""
    del total_rounds

  def begin_round(self) -> None:
    """Before the cohort is sampled: refuse a round that would overrun."""

  @abc.abstractmethod
  def end_round(self, cohort: Sequence[str]) -> None:
    """After a round: compose what it released (:meth:`round_events`)."""

  @abc.abstractmethod
  def round_events(self) -> list[dp_accounting.DpEvent]:
    """What one round releases, one event per group or per distinct record rate."""

  @abc.abstractmethod
  def metrics(self, group_names: Sequence[str], evaluating: bool) -> dict:
    """This round's ledger columns (a costly ledger may fill them on evaluation rounds only)."""

  @abc.abstractmethod
  def get_state(self) -> Any:
    """What a checkpoint stores to resume the ledger exactly."""

  @abc.abstractmethod
  def set_state(self, state: Any) -> None:
    """Restores :meth:`get_state`'s value."""
