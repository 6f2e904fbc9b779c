"""rPDP-FL's client inputs under TFF's program API (issue 31 item 8; issue 48).

:class:`RecordDpDataSource` is a ``tff.program.FederatedDataSource`` for
``tff.learning.programs.train_model`` and
:func:`~tff_idp.rpdp.client_work.build_rpdp_fedavg_process`: every round it
samples each client at the client rate λ (Alg. 3 line 6) from a secret
sampler, and gives each selected client its records with their rates q_ij
and a fresh secret seed for the round (:func:`tff_idp.rpdp.records.record_dataset`;
the process also folds its round counter into that seed).

A source is built from its record plan (:meth:`RecordDpDataSource.from_plan`
with ``make_record_plan(...)``, Alg. 3 line 2): the plan's rates q_ij, its λ
and its rounds T (``plan.params``) are the source's, so they cannot disagree
(a ``rounds`` or ``client_rate`` that differs is refused). Its iterators know
the records' budgets and the plan's σ, τ, λ, δ, and a round past T is refused
naming the ε the worst-off record would reach (Theorem 1,
:func:`tff_idp.accounting.record.rdp_two_stage.epsilon`, the accountant the
calibration used). Bare rates (``RecordDpDataSource(clients, record_rates,
client_rate=λ, rounds=T)``) still work, unchecked (logged); a rate of 0
excludes a record.
"""
from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

import numpy as np

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.plan import RecordPlan
from tff_idp.engine import program_data_source
from tff_idp.errors import ToolkitValueError
from tff_idp.rpdp.records import record_dataset


class RecordDpIterator(program_data_source.ClientArraysIterator):
  """λ-sampled clients' record datasets with fresh secret seeds (module doc)."""

  def client_input(self, index: int, seed: tuple[int, int]):
    arrays = self.arrays(index)
    return record_dataset(arrays["x"], arrays["y"], arrays["q"], seed,
                          batch_size=self.options["batch_size"])

  def padding_input(self):
    arrays = self.arrays(0)
    return record_dataset(arrays["x"][:0], arrays["y"][:0], arrays["q"][:0], (0, 0),
                          batch_size=self.options["batch_size"])

  def privacy_at(self, rounds: int) -> Optional[str]:
    """The worst-off record's Theorem 1 ε after ``rounds`` rounds, against its budget."""
    privacy = self.options.get("privacy")
    if privacy is None:
      return None
    params = rdp_two_stage.TwoStageParams(**dict(privacy, rounds=int(rounds)))
    q = np.concatenate([self.arrays(i)["q"] for i in range(self.num_clients)]).astype(float)
    budget = np.concatenate([self.arrays(i)["budget"] for i in range(self.num_clients)])
    live = q > 0
    if not live.any():
      return None
    values, index = np.unique(q[live], return_inverse=True)
    eps = np.asarray(rdp_two_stage.epsilon(values, params))[index]
    with np.errstate(divide="ignore", invalid="ignore"):
      worst = int(np.nanargmax(np.where(budget[live] > 0, eps / budget[live], np.inf)))
    return (f"ε={eps[worst]:.3g} at δ={params.delta:g} on a record with budget "
            f"ε={budget[live][worst]:.3g}")


def _plan_clients(clients: Any, plan: RecordPlan) -> tuple[list, list, list]:
  """The clients' arrays, rates and effective budgets in the plan's client order."""
  ids = list(plan.rates)
  if isinstance(clients, dict):
    if set(clients) != set(ids):
      raise ToolkitValueError(f"the plan has rates for clients {sorted(map(str, ids))[:5]}... "
                              "but clients has other ids; give the clients it was made for.")
    clients = [clients[cid] for cid in ids]
  elif len(clients) != len(ids):
    raise ToolkitValueError(f"the plan has rates for {len(ids)} clients but {len(clients)} "
                            "were given; give the clients it was made for, in its order.")
  rates = [np.asarray(plan.rates[cid], np.float64) for cid in ids]
  budgets = (None if plan.budgets is None else
             [np.asarray(plan.budgets[cid], np.float64) for cid in ids])
  return list(clients), rates, budgets


class RecordDpDataSource(program_data_source.ClientArraysDataSource):
  """rPDP-FL client inputs for ``train_model`` (module doc).

  Build it from its record plan with :meth:`from_plan` (or pass the plan as
  ``record_rates``): the rates, λ and the rounds then come from one object.

  Args:
    clients: per client, ``(x, y)`` numpy arrays of its records (with a
      plan: also ``{client_id: (x, y)}``).
    record_rates: a :class:`~tff_idp.accounting.record.plan.RecordPlan`, or
      bare rates: per client, one rate q_ij ∈ [0, 1] per record (then
      ``client_rate`` and ``rounds`` are required and unchecked: logged).
    client_rate: λ, every client's sampling rate per round (with a plan:
      leave it out, it is the plan's); the expected cohort λ·N, rounded, is
      the ``train_per_round_clients`` to pass.
    batch_size: records per ``tf.data`` batch (the client concatenates them).
    rounds: with a plan, leave it out (the plan's T; a different value is
      refused). With bare rates, required: the rounds the calibration covers.
      ``None`` (explicit, logged): no limit; then you keep count.
    rounds_spent: rounds of this calibration already run (by an earlier
      process; from your own ledger).
    insecure_seed: debug only (NOT PRIVATE), as for IDP-FedAvg's source.
  """

  iterator_cls = RecordDpIterator

  def __init__(self, clients: Any, record_rates: Any, *,
               client_rate: Optional[float] = None, batch_size: int = 512,
               rounds: Any = program_data_source.ROUNDS_REQUIRED, rounds_spent: int = 0,
               insecure_seed: Optional[int] = None):
    budgets, privacy = None, None
    if isinstance(record_rates, RecordPlan):
      plan = record_rates
      params = plan.params
      clients, record_rates, budgets = _plan_clients(clients, plan)
      for name, given, planned in (("rounds", rounds, params.rounds),
                                   ("client_rate", client_rate, params.client_rate)):
        if given not in (program_data_source.ROUNDS_REQUIRED, None) and given != planned:
          raise ToolkitValueError(
              f"{name}={given!r} disagrees with the record plan (T={params.rounds} rounds, "
              f"λ={params.client_rate:g}, δ={params.delta:g}): drop {name}= or make the plan "
              f"with {name}={given!r}.")
        if name == "rounds" and given is None:
          raise ToolkitValueError(
              f"rounds=None disagrees with the record plan, calibrated for {params.rounds} "
              "rounds: drop rounds= (the plan's T is the limit).")
      client_rate, rounds = params.client_rate, params.rounds
      if budgets is not None:
        privacy = dict(noise_multiplier=float(params.noise_multiplier),
                       local_steps=int(params.local_steps), client_rate=float(params.client_rate),
                       delta=float(params.delta), threat_model=params.threat_model)
    else:
      if client_rate is None:
        raise ToolkitValueError("give client_rate=λ with bare record rates (or build the source "
                                "from its record plan: RecordDpDataSource.from_plan).")
      logging.warning("RecordDpDataSource built from bare rates: it cannot check that "
                      "rounds=%r and client_rate=%r are what they were calibrated for; build "
                      "it with RecordDpDataSource.from_plan(clients, plan).", rounds, client_rate)
    arrays = program_data_source.check_client_arrays(clients)
    if len(record_rates) != len(arrays):
      raise ToolkitValueError(f"give record rates for every client: got {len(record_rates)} "
                              f"for {len(arrays)} clients.")
    for i, (a, q) in enumerate(zip(arrays, record_rates)):
      a["q"] = program_data_source.check_rates(q, len(a["y"]), f"record rate of client {i}"
                                               ).astype(np.float32)
      if privacy is not None:
        a["budget"] = budgets[i].reshape(-1)
    rates = program_data_source.check_rates(np.full(len(arrays), client_rate), len(arrays),
                                            "client rate")
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
      raise ToolkitValueError(f"batch_size={batch_size!r} must be an integer >= 1.")
    options = dict(batch_size=int(batch_size))
    if privacy is not None:
      options["privacy"] = privacy
    super().__init__(arrays, rates, options, insecure_seed=insecure_seed, rounds=rounds,
                     rounds_spent=rounds_spent)

  @classmethod
  def from_plan(cls, clients: Any, plan: RecordPlan, *, batch_size: int = 512,
                rounds_spent: int = 0, insecure_seed: Optional[int] = None
                ) -> "RecordDpDataSource":
    """The source of one record plan (rPDP-FL Alg. 3: its q_ij, λ and T; class doc)."""
    if not isinstance(plan, RecordPlan):
      raise ToolkitValueError(f"plan must be a RecordPlan (make_record_plan), not "
                              f"{type(plan).__name__}; for bare rates use "
                              "RecordDpDataSource(clients, rates, client_rate=λ, rounds=T).")
    return cls(clients, plan, batch_size=batch_size, rounds_spent=rounds_spent,
               insecure_seed=insecure_seed)
