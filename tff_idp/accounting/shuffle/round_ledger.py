"""The round driver's ledger for a shuffle-model (APES) run.

The shuffle ledger's values depend only on the ε multiset, n, d and the round
number (full participation, no sampling), so :class:`ApesLedger` computes them
once (``eps_c_round``, ``eps_uc_round``: one round's figures;
``cumulative[t-1]``: user level after t rounds) and each round's metrics read
them off. They are release columns (``metrics_depend_on_sampling = False``).
No TensorFlow here.
"""
from __future__ import annotations

from typing import Optional, Sequence

import dp_accounting

from tff_idp.accounting.events import ShuffledLdpDpEvent
from tff_idp.accounting.ledger import PrivacyLedger


class ShuffleRoundLedger(PrivacyLedger):
  """ε^c and ε^{uc} per round, and ε^{uc} cumulated, for the planned rounds.

  ``event`` is what one round releases (:class:`ShuffledLdpDpEvent`), for
  :meth:`round_events`.
  """
  metrics_depend_on_sampling = False
  METRIC_NAMES = ("eps_c_round", "eps_uc_round", "eps_uc_total")

  def __init__(self, eps_c_round: float, eps_uc_round: float, cumulative: Sequence[float],
               event: Optional[ShuffledLdpDpEvent] = None):
    self.eps_c_round = float(eps_c_round)
    self.eps_uc_round = float(eps_uc_round)
    self.cumulative = [float(v) for v in cumulative]
    self.event = event
    self.rounds = 0

  def metric_names(self, group_names: Sequence[str] = ()) -> list[str]:
    del group_names
    return list(self.METRIC_NAMES)

  def begin_round(self) -> None:
    if self.rounds >= len(self.cumulative):
      raise RuntimeError(
          f"the ledger was planned for {len(self.cumulative)} rounds; round "
          f"{self.rounds + 1} would exceed it.")

  def end_round(self, cohort: Sequence[str]) -> None:
    del cohort  # every user takes part in every round
    self.rounds += 1

  def round_events(self) -> list[dp_accounting.DpEvent]:
    return [self.event] if self.event is not None else []

  def metrics(self, group_names: Sequence[str] = (), evaluating: bool = True) -> dict:
    del group_names, evaluating
    total = self.cumulative[self.rounds - 1] if self.rounds else 0.0
    return {"eps_c_round": self.eps_c_round, "eps_uc_round": self.eps_uc_round,
            "eps_uc_total": total}

  def get_state(self) -> dict:
    return {"rounds": self.rounds}

  def set_state(self, state: Optional[dict]) -> None:
    self.rounds = int((state or {}).get("rounds", 0))
