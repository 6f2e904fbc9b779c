"""Per-record rates of the record-level methods (rPDP-FL §7.2), without TensorFlow.

:func:`make_record_plan` turns per-record budgets ε_ij into per-record
sampling rates q_ij for one of four methods (rPDP-FL §7.2):

* ``ours``: q_ij from SCF (Alg. 2) with the exact re-check
  (:func:`tff_idp.accounting.record.calibration.calibrate_record_rates`);
* ``minimum``: everybody gets the strictest budget ε_min (uniform DP);
* ``dropout``: everybody gets ε_mod and records whose budget is below ε_mod
  are dropped (q = 0). ε_mod is the ``dropout_cutoff`` the caller takes from
  the budget *specification* (:func:`tff_idp.preferences.expected_budget`,
  :func:`tff_idp.preferences.class_budget_cutoff`); without one it is the
  mean of the given ε_ij, a statistic of the budgets that depends on the
  data when the budgets follow it (by class: the class counts), and the
  plan's calibration summary says so (``epsilon_mod_source``);
* ``privacy_free``: no clipping or noise; each client samples
  ``privacy_free_batch`` records per step in expectation.

A :class:`RecordPlan` keeps both the *effective* budgets the method
calibrated to (ε_ij for ours, ε_min for Minimum, ε_mod for Dropout), which
the per-record accountant of Alg. 3 (rPDP-FL §6.2) enforces, and each
record's *own* budget ε_ij, against which the accountant also reports usage
(:class:`tff_idp.accounting.record.ledger.RecordBudgetAccountant`).

Calibration needs only NumPy/SciPy: this module imports no TensorFlow, so
rates can be computed (e.g. for a budget table) without loading TF.
:mod:`tff_idp.rpdp.record_level` re-exports :data:`METHODS`,
:class:`RecordPlan` and :func:`make_record_plan` for the training runs.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional

import numpy as np

from tff_idp.accounting.record import calibration as record_calibration
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.accounting.record.ledger import RecordBudgetAccountant

METHODS = ("ours", "minimum", "dropout", "privacy_free")


@dataclasses.dataclass
class RecordPlan:
  """Rates, budgets and mechanism parameters of one method (rPDP-FL §7.2).

  Attributes:
    method: one of :data:`METHODS`.
    rates: ``{client_id: q_ij array}``.
    budgets: ``{client_id: effective ε array}``, the budgets the method
      calibrated to and the accountant enforces (ε_ij for ``ours``, ε_min for
      ``minimum``, ε_mod for ``dropout``); None for ``privacy_free``.
    noise_multiplier: σ of the local DP-SGD steps (0 for ``privacy_free``).
    clip_norm: L (inf for ``privacy_free``).
    params: σ, τ, T, λ, δ and threat model of the calibration.
    calibration: a summary of the calibration (method, estimator, ε_min or
      ε_mod, dropped records, ...).
    own_budgets: ``{client_id: ε_ij array}``, every record's own budget as
      given; the accountant reports usage against these as well. None means
      "the same as ``budgets``".
  """
  method: str
  rates: dict
  budgets: Optional[dict]
  noise_multiplier: float
  clip_norm: float
  params: TwoStageParams
  calibration: dict
  own_budgets: Optional[dict] = None

  def new_accountant(self) -> Optional[RecordBudgetAccountant]:
    """A fresh per-record accountant (one per seed), or None for privacy_free.

    It enforces the effective ``budgets`` and reports usage against both
    those and ``own_budgets`` (rPDP-FL §6.2).
    """
    if self.budgets is None:
      return None
    return RecordBudgetAccountant(self.budgets, self.rates, self.params,
                                  own_budgets=self.own_budgets)


def _split(flat: np.ndarray, sizes: Mapping[str, int]) -> dict:
  """Cuts a flat per-record array into ``{client_id: array}`` (clients in ``sizes`` order)."""
  out, start = {}, 0
  for cid, n in sizes.items():
    out[cid] = flat[start:start + n]
    start += n
  return out


DROPOUT_CUTOFF_FROM_RECORDS = (
    "the mean of the given records' budgets (a statistic of the budgets; under budgets "
    "by class a function of the class counts, not covered by the guarantee)")


def make_record_plan(method: str, budgets: Mapping[str, np.ndarray],
                     params: TwoStageParams, clip_norm: float,
                     privacy_free_batch: float = 64.0, estimator: str = "scf",
                     dropout_cutoff: Optional[float] = None) -> RecordPlan:
  """Per-record rates for ``method`` (see module doc), verified never over budget.

  ``estimator`` picks how ``ours`` maps ε_ij to q_ij: "scf" (Alg. 2, the
  paper), "exact" (vectorised exact inverse, no unused budget beyond 0.3%)
  or "binary_search" (IDP-SGD style). Minimum and Dropout use "exact".
  ``dropout_cutoff`` is Dropout's ε_mod from the budget specification
  (module doc); ``None`` falls back to the mean of the given budgets.

  Raises:
    ValueError: for an unknown ``method``, invalid budgets, or
      ``privacy_free_batch`` <= 0.
  """
  if method not in METHODS:
    raise ValueError(f"method={method!r} must be one of {METHODS}.")
  sizes = {cid: len(b) for cid, b in budgets.items()}
  flat = record_calibration.check_budgets(
      np.concatenate([np.asarray(budgets[c], float) for c in sizes]))
  own = _split(flat.copy(), sizes)
  if method == "privacy_free":
    if privacy_free_batch <= 0:
      raise ValueError(f"privacy_free_batch={privacy_free_batch} must be > 0.")
    rates = {cid: np.full(n, min(1.0, privacy_free_batch / max(n, 1))) for cid, n in sizes.items()}
    return RecordPlan(method, rates, None, 0.0, float("inf"), params,
                      {"method": method, "expected_batch": privacy_free_batch}, own)
  if method == "ours":
    effective = flat
  elif method == "minimum":
    effective = np.full_like(flat, flat.min())
  else:  # dropout
    if dropout_cutoff is None:
      cutoff, source = float(np.mean(flat[np.isfinite(flat)])), DROPOUT_CUTOFF_FROM_RECORDS
    else:
      cutoff, source = float(dropout_cutoff), "the budget specification"
      if not (math.isfinite(cutoff) and cutoff > 0):
        raise ValueError(f"dropout_cutoff={dropout_cutoff!r} must be a finite ε > 0 (the "
                         "Dropout baseline calibrates every kept record to it).")
    effective = np.full_like(flat, cutoff)
  result = record_calibration.calibrate_record_rates(
      effective, params, method=estimator if method == "ours" else "exact")
  q = result.q.copy()
  summary = dict(result.summary(), method=method)
  if method == "dropout":
    dropped = flat < effective
    q[dropped] = 0.0
    summary["dropped_records"] = int(dropped.sum())
    summary["epsilon_mod"] = float(effective[0])
    summary["epsilon_mod_source"] = source
  if method == "minimum":
    summary["epsilon_min"] = float(effective[0])
  return RecordPlan(method, _split(q, sizes), _split(effective, sizes),
                    params.noise_multiplier, clip_norm, params, summary, own)
