"""Record-level personalized DP runs (rPDP-FL Alg. 3) in the shared round driver.

:func:`make_record_plan` turns per-record budgets into per-record rates for
one of four methods (rPDP-FL §7.2):

* ``ours``: q_ij from SCF (Alg. 2) with the exact re-check
  (:func:`tff_idp.accounting.record_calibration.calibrate_record_rates`);
* ``minimum``: everybody gets the strictest budget ε_min (uniform DP);
* ``dropout``: everybody gets ε_mod = mean ε_ij, and records whose budget is
  below ε_mod are dropped (q = 0);
* ``privacy_free``: no clipping or noise; each client samples
  ``privacy_free_batch`` records per step in expectation.

:func:`run_record_level` runs one seed: clients are Poisson-sampled at λ by
the driver's sampler, the per-record accountant pre-checks and excludes
records before every round, and everything (model, sampler RNG, round,
record ledger, privacy secret) is checkpointed and resumed exactly.

Privacy randomness (``tff_idp.privacy_randomness``) is secret by default:
the server's client sampler is seeded from the run's secret, and each
client's record sampling and DP-SGD noise from a client seed derived with
that client's own key. The run seed only names the run; it derives nothing
private unless the insecure debug mode is asked for.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from tff_idp.accounting import record_calibration
from tff_idp.accounting.rdp_two_stage import TwoStageParams
from tff_idp.accounting.record_ledger import RecordBudgetAccountant
from tff_idp.client_work.process import record_dataset
from tff_idp.privacy_randomness import PrivacyRandomness
from tff_idp.sampling import PoissonClientSampler
from tff_idp.training.driver import RoundDriver

METHODS = ("ours", "minimum", "dropout", "privacy_free")


@dataclasses.dataclass
class RecordFederation:
  """Every client's records in memory: ``x[cid]``, ``y[cid]`` (numpy)."""
  x: Mapping[str, np.ndarray]
  y: Mapping[str, np.ndarray]

  def __post_init__(self):
    if set(self.x) != set(self.y):
      raise ValueError("x and y must have the same client ids.")
    for cid in self.x:
      if len(self.x[cid]) != len(self.y[cid]):
        raise ValueError(f"client {cid!r}: {len(self.x[cid])} features vs "
                         f"{len(self.y[cid])} labels.")

  @property
  def client_ids(self) -> list[str]:
    return list(self.x)

  @property
  def sizes(self) -> dict[str, int]:
    return {cid: len(self.y[cid]) for cid in self.x}


@dataclasses.dataclass
class RecordPlan:
  """Rates, budgets and mechanism parameters of one method."""
  method: str
  rates: dict
  budgets: Optional[dict]
  noise_multiplier: float
  clip_norm: float
  params: TwoStageParams
  calibration: dict

  def new_accountant(self) -> Optional[RecordBudgetAccountant]:
    """A fresh per-record accountant (one per seed), or None for privacy_free."""
    if self.budgets is None:
      return None
    return RecordBudgetAccountant(self.budgets, self.rates, self.params)


def _split(flat: np.ndarray, sizes: Mapping[str, int]) -> dict:
  out, start = {}, 0
  for cid, n in sizes.items():
    out[cid] = flat[start:start + n]
    start += n
  return out


def make_record_plan(method: str, budgets: Mapping[str, np.ndarray],
                     params: TwoStageParams, clip_norm: float,
                     privacy_free_batch: float = 64.0, estimator: str = "scf") -> RecordPlan:
  """Per-record rates for ``method`` (see module doc), verified never over budget.

  ``estimator`` picks how ``ours`` maps ε_ij to q_ij: "scf" (Alg. 2, the
  paper), "exact" (vectorised exact inverse, no unused budget beyond 0.3%)
  or "binary_search" (IDP-SGD style). Minimum and Dropout use "exact".
  """
  if method not in METHODS:
    raise ValueError(f"method={method!r} must be one of {METHODS}.")
  sizes = {cid: len(b) for cid, b in budgets.items()}
  flat = record_calibration.check_budgets(
      np.concatenate([np.asarray(budgets[c], float) for c in sizes]))
  if method == "privacy_free":
    if privacy_free_batch <= 0:
      raise ValueError("privacy_free_batch must be > 0.")
    rates = {cid: np.full(n, min(1.0, privacy_free_batch / max(n, 1))) for cid, n in sizes.items()}
    return RecordPlan(method, rates, None, 0.0, float("inf"), params,
                      {"method": method, "expected_batch": privacy_free_batch})
  if method == "ours":
    effective = flat
  elif method == "minimum":
    effective = np.full_like(flat, flat.min())
  else:  # dropout
    effective = np.full_like(flat, float(np.mean(flat[np.isfinite(flat)])))
  result = record_calibration.calibrate_record_rates(
      effective, params, method=estimator if method == "ours" else "exact")
  q = result.q.copy()
  summary = dict(result.summary(), method=method)
  if method == "dropout":
    dropped = flat < effective
    q[dropped] = 0.0
    summary["dropped_records"] = int(dropped.sum())
    summary["epsilon_mod"] = float(effective[0])
  if method == "minimum":
    summary["epsilon_min"] = float(effective[0])
  return RecordPlan(method, _split(q, sizes), _split(effective, sizes),
                    params.noise_multiplier, clip_norm, params, summary)


def record_input_fn(federation: RecordFederation, plan: RecordPlan,
                    accountant: Optional[RecordBudgetAccountant],
                    randomness: PrivacyRandomness,
                    batch_size: int = 1024) -> Callable[[str, int], Any]:
  """``(client_id, round) -> dataset`` with the records' current rates (0 = excluded).

  The dataset carries the client's secret seed for the round
  (``randomness.client_seed``), which drives its record sampling and noise.
  """

  def make(client_id: str, round_num: int):
    q = accountant.current_rates(client_id) if accountant is not None \
        else plan.rates[client_id]
    return record_dataset(federation.x[client_id], federation.y[client_id], q,
                          randomness.client_seed(client_id, round_num), batch_size)

  return make


def empty_input_fn(federation: RecordFederation) -> Callable[[], Any]:
  """A client with no records (for cohort padding: weight 0, update 0)."""
  cid = federation.client_ids[0]
  x, y = federation.x[cid][:0], federation.y[cid][:0]
  return lambda: record_dataset(x, y, np.zeros(0, np.float32), (0, 0))


def _rates_digest(plan: RecordPlan) -> str:
  """Identifies the per-record rates (and so the budgets): resuming under others is refused."""
  h = hashlib.sha256()
  for cid in sorted(plan.rates):
    h.update(cid.encode())
    h.update(np.asarray(plan.rates[cid], dtype=np.float64).tobytes())
  return h.hexdigest()[:16]


def run_record_level(process, federation: RecordFederation, plan: RecordPlan,
                     run_seed: int, output_dir: str,
                     evaluate_fn: Optional[Callable[[Any], dict]] = None,
                     eval_every: int = 5, checkpoint_every: int = 5,
                     progress: bool = True, fingerprint: Any = None,
                     insecure_reproducible_noise: bool = False,
                     release_only: bool = False,
                     eval_metrics: Sequence[str] = ()):
  """Runs (or resumes) one seed of a record-level method; returns (state, rows, accountant).

  Args:
    run_seed: names the run (checkpoints are bound to it); it seeds nothing
      private unless ``insecure_reproducible_noise`` (NOT PRIVATE, debugging
      only) derives the privacy randomness from it.
    release_only: write no diagnostics (un-noised statistics).
    eval_metrics: keys of ``evaluate_fn``'s result besides loss and accuracy
      (e.g. per-group accuracy, ``tff_idp.training.group_metrics``), written
      to ``metrics.csv`` as ``eval_<key>``: the released model's evaluation
      on held-out data is release, not diagnostics.
  """
  accountant = plan.new_accountant()
  client_ids = federation.client_ids
  randomness = PrivacyRandomness.for_run(run_seed, f"rpdp/{plan.method}",
                                         insecure_reproducible_noise)
  sampler = PoissonClientSampler(client_ids, np.full(len(client_ids), plan.params.client_rate),
                                 randomness.sampling_seed())
  driver = RoundDriver(
      process=process, sampler=sampler,
      client_input_fn=record_input_fn(federation, plan, accountant, randomness),
      output_dir=output_dir, evaluate_fn=evaluate_fn, eval_every=eval_every,
      checkpoint_every=checkpoint_every, progress=progress,
      run_fingerprint=[{k: v for k, v in plan.calibration.items() if k != "seconds"},
                       dataclasses.asdict(plan.params), run_seed, _rates_digest(plan),
                       fingerprint, insecure_reproducible_noise],
      padding_input_fn=empty_input_fn(federation), record_accountant=accountant,
      privacy_randomness=randomness, release_only=release_only,
      eval_metrics=tuple(eval_metrics))
  state, rows = driver.run(plan.params.rounds)
  return state, rows, accountant
