"""Per-record budget accountant of rPDP-FL (§6.2, "The per-record privacy budget accountant").

Before each round it *pre-checks* which records can still afford one more
round within their ε_ij; a record that cannot is excluded (its rate becomes
q = 0, so it stops costing anything). After the round it *updates* what each
participating record has spent. Both use the exact Theorem 1 bound:

* Type II (default): every active record is charged ρ^{τ,λ}(q_ij) per round,
  whether or not its client was sampled (the amplification by client
  sampling already accounts for that randomness).
* Type I: an active record is charged ρ^τ(q_ij) on rounds its client was
  sampled; the calibration's λ·T·ρ^τ is the expected charge, and this ledger
  stops any record whose client happens to be sampled more often.

The state is one integer per record (rounds charged), because a record's
charge per round depends only on its rate; it is a plain dict of lists, so
the round driver checkpoints and restores it exactly. This module imports no
TensorFlow.

Budget usage is reported against two budgets per record (rPDP-FL §7.2):

* the *effective* budget, the one the method calibrated to and that this
  ledger enforces: ε_ij for ours, ε_min for Minimum (everybody held to the
  strictest budget), ε_mod = mean ε_ij for Dropout;
* the record's *own* budget ε_ij, the personal preference it stated.

For ours the two coincide. For Minimum a record's own-budget usage is
spent / ε_ij ≤ ε_min / ε_ij, which shows the budget the uniform method leaves
unused; for Dropout the dropped records (q = 0) spend nothing.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

import dp_accounting

from tff_idp.accounting import events
from tff_idp.accounting.ledger import PrivacyLedger
from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams


class RecordBudgetAccountant(PrivacyLedger):
  """Tracks ε spent by every record and excludes records that cannot afford a round.

  Args:
    budgets: ``{client_id: ε array}``, the budgets enforced: each record's
      effective budget, the one its rate was calibrated to.
    rates: ``{client_id: q_ij array}`` (same shapes), e.g. from
      :func:`tff_idp.accounting.record.calibration.calibrate_record_rates`.
    params: the run's σ, τ, λ, δ and threat model (``rounds`` is the
      calibrated T; the ledger enforces budgets, not T).
    own_budgets: ``{client_id: ε_ij array}``, every record's own (personal)
      budget, when ``budgets`` holds the effective budgets a method
      calibrated to instead (ε_min for Minimum, ε_mod for Dropout). Usage is
      reported against both (:meth:`metrics`); only ``budgets`` is enforced.
      Default: ``budgets`` (the two coincide, as for ours).

  Raises:
    ValueError: on mismatched client ids or shapes, or when a record that can
      be sampled (q > 0) has an effective budget above its own: enforcing
      the effective budget would then not guarantee the record's own.
  """

  METRIC_NAMES: Sequence[str] = ("records_active", "records_excluded",
                                 "epsilon_spent_min", "epsilon_spent_mean",
                                 "epsilon_spent_max", "budget_used_max_vs_effective",
                                 "budget_used_max_vs_own", "budget_used_mean_vs_own")

  def __init__(self, budgets: Mapping[str, np.ndarray], rates: Mapping[str, np.ndarray],
               params: TwoStageParams,
               own_budgets: Optional[Mapping[str, np.ndarray]] = None):
    if set(budgets) != set(rates):
      raise ValueError("budgets and rates must have the same client ids.")
    if own_budgets is not None and set(own_budgets) != set(budgets):
      raise ValueError("own_budgets and budgets must have the same client ids.")
    self.params = params
    self.client_ids = list(budgets)
    self._slices = {}
    start = 0
    for cid in self.client_ids:
      b = np.asarray(budgets[cid], dtype=float).reshape(-1)
      q = np.asarray(rates[cid], dtype=float).reshape(-1)
      if b.shape != q.shape:
        raise ValueError(f"client {cid!r}: {b.size} budgets but {q.size} rates.")
      self._slices[cid] = slice(start, start + b.size)
      start += b.size
    self.budgets = np.concatenate(
        [np.asarray(budgets[c], dtype=float).reshape(-1) for c in self.client_ids]
    ) if self.client_ids else np.zeros(0)
    q_all = np.concatenate(
        [np.asarray(rates[c], dtype=float).reshape(-1) for c in self.client_ids]
    ) if self.client_ids else np.zeros(0)
    rdp_two_stage.check_rates(q_all)
    self.rates = q_all
    self.own_budgets = self.budgets
    if own_budgets is not None:
      own = [np.asarray(own_budgets[c], dtype=float).reshape(-1) for c in self.client_ids]
      for cid, o in zip(self.client_ids, own):
        n = self._slices[cid].stop - self._slices[cid].start
        if o.size != n:
          raise ValueError(f"client {cid!r}: {o.size} own budgets but {n} rates.")
      self.own_budgets = np.concatenate(own) if own else np.zeros(0)
      over = np.flatnonzero((q_all > 0) & (self.budgets > self.own_budgets))
      if over.size:
        i = int(over[0])
        cid = next(c for c, s in self._slices.items() if s.start <= i < s.stop)
        raise ValueError(
            f"client {cid!r}, record {i - self._slices[cid].start}: effective budget "
            f"{self.budgets[i]!r} exceeds its own budget {self.own_budgets[i]!r} while its "
            f"rate is {q_all[i]!r} > 0 ({over.size} such records); enforcing the effective "
            "budget would not guarantee the record's own. Give it q = 0 or an effective "
            "budget <= its own.")
    self._q_values, self._q_index = np.unique(q_all, return_inverse=True)
    self._round_rdp = rdp_two_stage.round_rdp(self._q_values, params)
    self.charged = np.zeros(q_all.size, dtype=np.int64)
    self.active = q_all > 0
    self.rounds_done = 0

  # -- ε of (rate, rounds charged) pairs, computed once per distinct pair ----
  def _epsilon(self, q_index: np.ndarray, charges: np.ndarray) -> np.ndarray:
    pairs = np.stack([q_index, charges], axis=1)
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    rdp = uniq[:, 1:2].astype(float) * self._round_rdp[uniq[:, 0]]
    eps = rdp_two_stage.rdp_to_epsilon(rdp, self.params.delta)
    return eps[inverse.reshape(-1)]

  def spent(self) -> np.ndarray:
    """ε spent so far by every record (flat, in client order)."""
    return self._epsilon(self._q_index, self.charged)

  def spent_by_client(self) -> dict[str, np.ndarray]:
    eps = self.spent()
    return {cid: eps[s] for cid, s in self._slices.items()}

  @property
  def metrics_depend_on_sampling(self) -> bool:
    """Type I charges only the rounds a client was sampled in, so the ledger's
    metrics reveal the (secret) client sampling: they are diagnostics then.
    Type II charges every active record every round: they are public."""
    return self.params.threat_model != "type2"

  def begin_round(self) -> None:
    """Pre-check: exclude every record whose next charge would exceed its budget."""
    candidates = np.flatnonzero(self.active)
    if candidates.size:
      eps_next = self._epsilon(self._q_index[candidates], self.charged[candidates] + 1)
      self.active[candidates[eps_next > self.budgets[candidates]]] = False

  def current_rates(self, client_id: str) -> np.ndarray:
    """q_ij for this round: the calibrated rate, or 0 for excluded records."""
    s = self._slices[client_id]
    return np.where(self.active[s], self.rates[s], 0.0)

  def end_round(self, sampled_clients: Iterable[str]) -> None:
    """Update: charge every active record (Type II) or those of sampled clients (Type I)."""
    if self.params.threat_model == "type2":
      self.charged[self.active] += 1
    else:
      for cid in sampled_clients:
        s = self._slices[cid]
        charged = self.charged[s]  # a view: updating it updates the ledger
        charged[self.active[s]] += 1
    self.rounds_done += 1

  def round_events(self) -> list[dp_accounting.DpEvent]:
    """One :class:`~tff_idp.accounting.events.TwoStageSampledDpEvent` per distinct active rate."""
    p = self.params
    rates = np.unique(self.rates[self.active & (self.rates > 0)])
    return [events.TwoStageSampledDpEvent(p.client_rate, float(q), p.noise_multiplier,
                                          p.local_steps, p.threat_model) for q in rates]

  def metric_names(self, group_names: Sequence[str] = ()) -> list[str]:
    del group_names  # per record, not per group
    return list(self.METRIC_NAMES)

  @staticmethod
  def _usage(eps: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """spent / budget over the records with a finite budget (inf: no constraint)."""
    finite = np.isfinite(budgets)
    return eps[finite] / budgets[finite]

  def metrics(self, group_names: Sequence[str] = (), evaluating: bool = True) -> dict:
    """The ledger's columns (:attr:`METRIC_NAMES`), as of the rounds charged so far.

    * ``records_active`` / ``records_excluded``: records still sampled, and
      records with q > 0 that the pre-check has excluded;
    * ``epsilon_spent_{min,mean,max}``: ε spent over all records;
    * ``budget_used_max_vs_effective``: max of spent / effective budget (the
      budget the method calibrated to and this ledger enforces: ≤ 1, and
      close to 1 after the calibrated T rounds where the rates were
      calibrated by the exact inverse, as for Minimum and Dropout);
    * ``budget_used_max_vs_own``, ``budget_used_mean_vs_own``: max and mean
      of spent / own budget ε_ij (for ours equal to the above; for Minimum
      and Dropout ≤ the effective usage, the mean showing how much of the
      records' personal budgets the uniform method leaves unused, with
      Dropout's dropped records at 0).

    Ratios cover the records with a finite budget; with none, they are 0.
    """
    del group_names, evaluating  # every round, cheap
    eps = self.spent()
    vs_effective = self._usage(eps, self.budgets)
    vs_own = self._usage(eps, self.own_budgets)
    return {
        "records_active": int(self.active.sum()),
        "records_excluded": int(np.count_nonzero(~self.active & (self.rates > 0))),
        "epsilon_spent_min": float(eps.min()) if eps.size else 0.0,
        "epsilon_spent_mean": float(eps.mean()) if eps.size else 0.0,
        "epsilon_spent_max": float(eps.max()) if eps.size else 0.0,
        "budget_used_max_vs_effective": float(vs_effective.max()) if vs_effective.size else 0.0,
        "budget_used_max_vs_own": float(vs_own.max()) if vs_own.size else 0.0,
        "budget_used_mean_vs_own": float(vs_own.mean()) if vs_own.size else 0.0,
    }

  def get_state(self) -> dict:
    return {"charged": self.charged.tolist(), "active": self.active.astype(int).tolist(),
            "rounds_done": self.rounds_done}

  def set_state(self, state: dict) -> None:
    charged = np.asarray(state["charged"], dtype=np.int64)
    if charged.shape != self.charged.shape:
      raise ValueError(
          f"checkpointed record ledger has {charged.size} records, this run has "
          f"{self.charged.size}; it belongs to another dataset or budget assignment.")
    active = np.array(state["active"], dtype=bool)
    if active.shape != self.active.shape:
      raise ValueError(
          f"checkpointed record ledger has {active.size} activity flags for "
          f"{self.charged.size} records; the checkpoint is corrupt or from another run.")
    self.charged = charged.copy()
    self.active = active
    self.rounds_done = int(state["rounds_done"])
