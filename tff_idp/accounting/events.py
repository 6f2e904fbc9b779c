"""The DpEvents this toolkit adds where dp-accounting has none.

Every mechanism says what one round released as a ``dp_accounting.DpEvent``
(tf-privacy's ``get_noised_result`` idiom), and the ledgers
(:mod:`tff_idp.accounting.ledger`) compose those events. dp-accounting's own
events cover IDP-FedAvg: a client in group p releases
``PoissonSampledDpEvent(q_p, GaussianDpEvent(σ_p))`` per round. Two mechanisms
need events of their own:

* :class:`TwoStageSampledDpEvent`, rPDP-FL (Alg. 3, Thm 1): a client is
  sampled with probability λ, then runs τ local steps in which the record is
  Poisson-sampled at q and the clipped sum gets N(0, σ²L²). At λ = 1 it is
  ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), τ)``
  (:meth:`TwoStageSampledDpEvent.as_dp_accounting_event`); otherwise
  :mod:`tff_idp.accounting.record.rdp_two_stage` interprets it.
* :class:`ShuffledLdpDpEvent`, APES (Def. 4, Thm 4): each of n users releases
  its d clipped coordinates through an ε_i-LDP Clip-Laplace randomizer
  (b of them under S-APES), and a shuffler hides who sent what.
  :mod:`tff_idp.accounting.shuffle` interprets it.

Events are frozen value objects (attrs, like dp-accounting's): equal
parameters give equal events. No TensorFlow here.
"""
from __future__ import annotations

from typing import Optional

import attr
import dp_accounting


@attr.s(frozen=True, slots=True, auto_attribs=True)
class TwoStageSampledDpEvent(dp_accounting.DpEvent):
  """One rPDP-FL round for one record: client sampling λ, then τ record-sampled steps.

  Attributes:
    client_rate: λ, the probability that the record's client joins the round.
    record_rate: q, the record's Poisson rate in each local step.
    noise_multiplier: σ (noise std σ·L on the clipped sum).
    local_steps: τ.
    threat_model: ``"type1"`` (the client's participation is hidden) or
      ``"type2"`` (it is public), as in rPDP-FL Thm 1.
  """
  client_rate: float
  record_rate: float
  noise_multiplier: float
  local_steps: int
  threat_model: str = "type2"

  def as_dp_accounting_event(self) -> Optional[dp_accounting.DpEvent]:
    """The same mechanism in dp-accounting's own events, where one exists (λ = 1)."""
    if self.client_rate != 1.0:
      return None
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(
            self.record_rate, dp_accounting.GaussianDpEvent(self.noise_multiplier)),
        self.local_steps)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ShuffledLdpDpEvent(dp_accounting.DpEvent):
  """One APES round: n users' ε_i-LDP reports on d coordinates, shuffled.

  Attributes:
    epsilons: the users' local budgets ε_i (per report, all coordinates).
    dimensions: d, the coordinates a user reports.
    kept_coordinates: b under S-APES's random b-subset (None: all d).
    selection: ``"all"``, ``"random"`` (S-APES, sound) or ``"top_b"`` (the
      paper's post-top-b; charged as d·ε, see docs/apes.md).
  """
  epsilons: tuple[float, ...]
  dimensions: int
  kept_coordinates: Optional[int] = None
  selection: str = "all"
