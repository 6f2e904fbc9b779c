"""Record-level gradient canaries: the empirical privacy audit of rPDP-FL runs.

The one-shot audit of Andrew et al., "One-shot Empirical Privacy Estimation
for Federated Learning" (ICLR 2024), applied to records instead of clients,
under rPDP-FL's two-stage sampling (Alg. 3: clients at rate λ, then each
record of a sampled client at its own rate q_ij in every local step).

**Canaries.** k canary records, each with a fixed random unit direction u_j
in model space (:func:`tff_idp.audit.directions.canary_direction`), are
split equally over the levels of the privacy preference distribution (one
group per budget level ε_l). Each gets the rate q_l of a real record of that
budget (the plan's own calibration when real records have that budget, else
the exact inverse of the same accountant), so each canary's q follows its
budget. An equal random half of every level is **held out** (never in any
dataset); the other half is **inserted**: appended to chosen clients' data,
sampled at q_l in every local step like a real record, and, when sampled,
its clipped per-example gradient is *replaced* by L·u_j, a contribution of
exactly the clip norm in its fixed direction (the local DP-SGD step's
per-example hook, :mod:`tff_idp.rpdp.dp_sgd`; no separate step).

**What canaries do not change.** They never enter the per-record ledger
(:class:`tff_idp.accounting.record.ledger.RecordBudgetAccountant` is built
from the plan's real records only), the real records' rates, or the
normaliser of the local step (Σ q_j over real records only; canaries are
extra records on top). They do change the model (by design): their effect
on utility is what :attr:`RecordAudit.final_accuracy` exposes for a
comparison with the same run without canaries.

**Test.** After the run, U = θ_0 − θ_T (TFF's model-delta convention) and
cos(U, u_j) for every canary (:func:`tff_idp.audit.directions.canary_cosines`).
Per budget level, the held-out cosines (the null) and the inserted ones go
to :func:`tff_idp.audit.estimator.estimate_epsilon` with the level's ε from
the ledger as the bound: the ε the ledger reports for a record of that rate
after the rounds run. A level is *flagged* when the whole confidence
interval lies above that bound.

**Validity check.** A deliberately broken configuration (the process run at
σ/4, ``noise_multiplier_scale=0.25``, or the strictest level's rates ×8 in
the mechanism, ``rate_scale={ε_min: 8}``) while the ledger keeps the plan's
σ and rates must be flagged (tests/audit/test_record_canaries.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow_federated as tff

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record import calibration as record_calibration
from tff_idp.accounting.record.plan import RecordPlan
from tff_idp.audit import canary_replacement
from tff_idp.audit import directions
from tff_idp.audit import estimator
from tff_idp.rpdp import dp_sgd
from tff_idp.rpdp import record_level
from tff_idp.rpdp.client_work import build_rpdp_fedavg_process

MIN_PER_LEVEL = 4
"""Canaries per level at least: 2 inserted and 2 held out (a Gaussian fit each)."""
RELIABLE_PER_SIDE = estimator.RELIABLE_PER_SIDE
"""Fewer inserted or held-out canaries than this in a level: its estimate is
marked ``few_canaries`` (a bootstrap over a handful of cosines is degenerate:
resamples with all-equal values give a zero std, so the CI, and ``flagged``,
mean little)."""
MAX_DEFAULT_LEVELS = 8
"""Above this many distinct budgets, the levels must be given explicitly."""


@dataclasses.dataclass(frozen=True)
class RecordCanaries:
  """The audit's canary records (see module doc); build with :func:`make_record_canaries`.

  Attributes:
    seeds: int64 [k, 2] direction seeds (:func:`directions.canary_seeds`).
    levels: float [k], the budget level ε_l of each canary.
    rates: float [k], each canary's calibrated rate q_l (what the ledger
      would charge a real record of that budget).
    inserted: bool [k]; False = held out (never in any dataset).
    clients: each canary's client id ("" for held-out canaries).
    level_values: the distinct levels, ascending.
    rate_scale: ``{level: factor}`` applied to the *mechanism's* rates of that
      level (canaries and real records whose effective budget is that level)
      but not to the ledger: a deliberately broken configuration. Empty for
      an honest audit.
    feature_shape, feature_dtype, label_dtype: the canary records' placeholder
      features (zeros) and label (0); their gradient is replaced anyway.
    real_scale: ``{client_id: float [n]}``, the ``rate_scale`` factor of every
      real record (1 where unscaled), for the clients with a scaled record.
  """
  seeds: np.ndarray
  levels: np.ndarray
  rates: np.ndarray
  inserted: np.ndarray
  clients: tuple
  level_values: tuple
  rate_scale: Mapping[float, float]
  feature_shape: tuple
  feature_dtype: Any
  label_dtype: Any
  real_scale: Mapping[str, np.ndarray]

  @property
  def num_canaries(self) -> int:
    return int(self.seeds.shape[0])

  def mechanism_rates(self) -> np.ndarray:
    """Each canary's rate in the mechanism (q_l, times ``rate_scale`` of its level, ≤ 1)."""
    scale = np.array([self.rate_scale.get(float(l), 1.0) for l in self.levels])
    return np.minimum(1.0, self.rates * scale)

  def client_records(self, client_id: str, x: np.ndarray, y: np.ndarray,
                     q: np.ndarray) -> tuple:
    """The client's real records followed by its inserted canaries.

    Returns (x, y, q, canary_index): canaries have zero features, label 0,
    their mechanism rate and their row in :attr:`seeds`; real records keep
    their (ledger) rates, times ``rate_scale`` where broken on purpose, and
    index −1.
    """
    q = np.asarray(q, np.float32)
    scale = self.real_scale.get(client_id)
    if scale is not None:
      q = np.minimum(1.0, q * scale).astype(np.float32)
    rows = np.flatnonzero(self.inserted & (np.asarray(self.clients) == client_id))
    index = np.concatenate([np.full(len(y), -1, np.int32), rows.astype(np.int32)])
    if rows.size == 0:
      return x, y, q, index
    cx = np.zeros((rows.size,) + tuple(self.feature_shape), self.feature_dtype)
    cy = np.zeros(rows.size, self.label_dtype)
    cq = self.mechanism_rates()[rows].astype(np.float32)
    return (np.concatenate([x, cx]), np.concatenate([y, cy]), np.concatenate([q, cq]), index)

  def identity(self) -> dict:
    """What identifies the canaries in a run fingerprint."""
    h = hashlib.sha256()
    for a in (self.seeds, self.levels, self.rates, self.inserted.astype(np.int8)):
      h.update(np.ascontiguousarray(a).tobytes())
    h.update("\0".join(self.clients).encode())
    return {"canaries": h.hexdigest()[:16], "num_canaries": self.num_canaries,
            "rate_scale": {str(k): float(v) for k, v in sorted(self.rate_scale.items())}}


def _level_rate(plan: RecordPlan, level: float, estimator_method: str) -> float:
  """q of a real record with effective budget ``level`` (the plan's calibration), else the exact inverse."""
  rates = np.concatenate([np.asarray(plan.rates[c], float) for c in plan.rates])
  budgets = np.concatenate([np.asarray(plan.budgets[c], float) for c in plan.rates])
  same = (budgets == level) & (rates > 0)
  if np.any(same):
    return float(np.max(rates[same]))
  result = record_calibration.calibrate_record_rates(np.array([level]), plan.params,
                                                     method=estimator_method)
  return float(result.q.reshape(-1)[0])


def make_record_canaries(plan: RecordPlan, federation: Any, num_canaries: int, *,
                         audit_seed: int = 0, levels: Optional[Sequence[float]] = None,
                         clients: Optional[Sequence[str]] = None,
                         rate_scale: Optional[Mapping[float, float]] = None,
                         estimator_method: str = "exact") -> RecordCanaries:
  """k canaries over the budget levels, half of each level inserted (module doc).

  Args:
    plan: the run's :class:`RecordPlan` (a private method: ``budgets`` set).
    federation: the :class:`tff_idp.rpdp.record_level.RecordFederation`.
    num_canaries: k, a multiple of 2·(number of levels) with at least
      :data:`MIN_PER_LEVEL` per level.
    audit_seed: the auditor's seed (directions, held-out split, placement).
    levels: the budget levels ε_l (default: the distinct effective budgets of
      the plan's records with q > 0; give them for a continuous distribution).
    clients: where inserted canaries go, round-robin in a seeded random order
      (default: every client with a record of rate > 0). A client takes at
      most as many canaries as it has real records.
    rate_scale: ``{level: factor}``, a deliberately broken mechanism
      (canaries' and real records' rates of that level multiplied, the ledger
      unchanged). Only for validating the audit.
    estimator_method: how a level without real records is calibrated
      (:func:`record_calibration.calibrate_record_rates`).

  Raises:
    ValueError: a non-private plan, bad k, unknown levels or clients, or more
      inserted canaries than the clients can take.
  """
  if plan.budgets is None or not math.isfinite(plan.clip_norm):
    raise ValueError(f"method {plan.method!r} has no privacy budgets to audit.")
  if isinstance(num_canaries, bool) or int(num_canaries) != num_canaries:
    raise ValueError(f"num_canaries={num_canaries!r} must be an integer.")
  num_canaries = int(num_canaries)
  rates_flat = np.concatenate([np.asarray(plan.rates[c], float) for c in plan.rates])
  budgets_flat = np.concatenate([np.asarray(plan.budgets[c], float) for c in plan.rates])
  if levels is None:
    levels = np.unique(budgets_flat[(rates_flat > 0) & np.isfinite(budgets_flat)])
    if levels.size > MAX_DEFAULT_LEVELS:
      raise ValueError(
          f"the plan has {levels.size} distinct budgets, more than {MAX_DEFAULT_LEVELS} "
          "levels: give levels=[...] explicitly (e.g. for a continuous preference "
          "distribution; a level needs no real record of exactly that budget).")
  level_values = tuple(sorted(float(v) for v in levels))
  if not level_values:
    raise ValueError("no budget levels to audit (every record has q = 0 or ε = inf).")
  if len(set(level_values)) != len(level_values):
    raise ValueError(f"levels={list(levels)} has duplicates.")
  if any(not (v > 0 and math.isfinite(v)) for v in level_values):
    raise ValueError(f"levels={list(levels)} must be finite and > 0.")
  num_levels = len(level_values)
  if num_canaries % (2 * num_levels):
    raise ValueError(
        f"num_canaries={num_canaries} must split equally over {num_levels} level(s) "
        f"into inserted and held-out halves: a multiple of {2 * num_levels}.")
  per_level = num_canaries // num_levels
  if per_level < MIN_PER_LEVEL:
    raise ValueError(
        f"num_canaries={num_canaries} gives {per_level} per level; the estimate needs "
        f">= {MIN_PER_LEVEL} per level (2 inserted, 2 held out): use >= "
        f"{MIN_PER_LEVEL * num_levels}.")
  rate_scale = {float(k): float(v) for k, v in (rate_scale or {}).items()}
  unknown = set(rate_scale) - set(level_values)
  if unknown:
    raise ValueError(f"rate_scale has levels {sorted(unknown)} not among {level_values}.")
  if any(not v > 0 for v in rate_scale.values()):
    raise ValueError(f"rate_scale={rate_scale} factors must be > 0.")
  sizes = federation.sizes
  eligible = [c for c in plan.rates if np.any(np.asarray(plan.rates[c]) > 0)]
  if clients is None:
    clients = eligible
  clients = list(clients)
  if not clients:
    raise ValueError("no clients to place canaries in.")
  bad = [c for c in clients if c not in eligible]
  if bad:
    raise ValueError(f"clients {bad[:5]} are unknown or have no record with q > 0: a "
                     "canary needs a client that takes local steps.")
  num_inserted = num_canaries // 2
  capacity = sum(sizes[c] for c in clients)
  if num_inserted > capacity:
    raise ValueError(f"{num_inserted} inserted canaries but the chosen clients have only "
                     f"{capacity} real records: a client takes at most as many canaries as "
                     "it has records; use fewer canaries or more clients.")
  rng = np.random.default_rng([int(audit_seed), 0x7EC0])
  level_rate = {v: _level_rate(plan, v, estimator_method) for v in level_values}
  canary_levels = np.repeat(np.array(level_values), per_level)
  inserted = np.zeros(num_canaries, bool)
  for i in range(num_levels):
    pick = rng.permutation(per_level)[:per_level // 2]
    inserted[i * per_level + pick] = True
  # Inserted canaries round-robin over the clients in a seeded order, never more
  # than a client's number of real records.
  order = [clients[i] for i in rng.permutation(len(clients))]
  load = dict.fromkeys(order, 0)
  owner = [""] * num_canaries
  slots = iter(c for _ in range(num_inserted) for c in order)
  for j in rng.permutation(np.flatnonzero(inserted)):
    c = next(slots)
    while load[c] >= sizes[c]:
      c = next(slots)
    owner[j] = c
    load[c] += 1
  real_scale = {}
  for cid in plan.rates:
    b = np.asarray(plan.budgets[cid], float)
    scale = np.ones(b.shape, np.float32)
    for level, factor in rate_scale.items():
      scale[b == level] = factor
    if np.any(scale != 1.0):
      real_scale[cid] = scale
  x0 = federation.x[clients[0]]
  y0 = federation.y[clients[0]]
  return RecordCanaries(
      seeds=directions.canary_seeds(audit_seed, num_canaries), levels=canary_levels,
      rates=np.array([level_rate[v] for v in canary_levels]), inserted=inserted,
      clients=tuple(owner), level_values=level_values, rate_scale=rate_scale,
      feature_shape=tuple(x0.shape[1:]), feature_dtype=x0.dtype, label_dtype=y0.dtype,
      real_scale=real_scale)


def ledger_epsilon(rate: float, plan: RecordPlan, rounds_done: int) -> float:
  """The ε the ledger reports for a record at ``rate`` after ``rounds_done`` rounds.

  Type II charges ρ^{τ,λ}(q) every round; Type I ρ^τ(q) on the rounds its
  client is sampled, reported here at its expectation λ·rounds (the
  calibration's Theorem 1 bound, rPDP-FL). Computed from the plan's σ: a
  broken mechanism does not change what the ledger says.
  """
  params = plan.params
  rdp = rdp_two_stage.total_rdp(rate, params) * (rounds_done / params.rounds)
  return float(rdp_two_stage.rdp_to_epsilon(rdp, params.delta))


def audit_levels(canaries: RecordCanaries, model_delta: Sequence[np.ndarray],
                 plan: RecordPlan, rounds_done: int, *,
                 confidence: float = estimator.DEFAULT_CONFIDENCE,
                 bootstrap: int = estimator.DEFAULT_BOOTSTRAP,
                 seed: int = 0) -> list[dict]:
  """One dict per budget level: the ledger's bound and the empirical ε (with CI).

  ``model_delta``: θ_0 − θ_T, the trainable weights' total change (list of
  arrays in trainable-variable order). Keys: ``level``, ``rate``,
  ``mechanism_rate``, ``bound``, ``num_inserted``, ``num_held_out`` and the
  :class:`tff_idp.audit.estimator.EpsilonEstimate` fields (``epsilon``,
  ``ci_low``, ``ci_high``, ``flagged``, ``saturated``, the fitted means and
  stds, ...), plus ``estimate`` (the object), ``formatted`` ("ε [lo, hi]") and
  ``few_canaries`` (fewer than :data:`RELIABLE_PER_SIDE` on a side: read
  ``flagged`` with care).
  """
  cosines = directions.canary_cosines(model_delta, canaries.seeds)
  mech = canaries.mechanism_rates()
  out = []
  for level in canaries.level_values:
    group = canaries.levels == level
    rate = float(canaries.rates[group][0])
    bound = ledger_epsilon(rate, plan, rounds_done)
    est = estimator.estimate_epsilon(cosines[group & ~canaries.inserted],
                                     cosines[group & canaries.inserted],
                                     plan.params.delta, bound=bound,
                                     confidence=confidence, bootstrap=bootstrap, seed=seed)
    out.append(dict(est.to_dict(), level=float(level), rate=rate,
                    mechanism_rate=float(mech[group][0]), estimate=est,
                    formatted=est.format(),
                    few_canaries=min(est.num_inserted, est.num_held_out) < RELIABLE_PER_SIDE,
                    inserted_cosines=cosines[group & canaries.inserted].tolist(),
                    held_out_cosines=cosines[group & ~canaries.inserted].tolist()))
  return out


@dataclasses.dataclass
class RecordAudit:
  """An audited run: per-level results, the run's rows and the canaries.

  ``final_accuracy`` / ``final_loss``: the last evaluation of the run *with*
  canaries (compare with the same run without them for the utility cost).
  """
  levels: list
  canaries: RecordCanaries
  rows: list
  accountant: Any
  model_delta: list
  state: Any = None

  @property
  def final_accuracy(self) -> Optional[float]:
    evals = [r.get("eval_accuracy") for r in self.rows if r.get("eval_accuracy") is not None]
    return float(evals[-1]) if evals else None

  @property
  def final_loss(self) -> Optional[float]:
    evals = [r.get("eval_loss") for r in self.rows if r.get("eval_loss") is not None]
    return float(evals[-1]) if evals else None

  @property
  def flagged(self) -> bool:
    """Whether any level's empirical ε lies above its bound with confidence."""
    return any(level["flagged"] for level in self.levels)

  def summary_rows(self) -> list[dict]:
    """The per-level dicts without the estimate object and the cosine lists (JSON-ready)."""
    drop = ("estimate", "inserted_cosines", "held_out_cosines")
    return [{k: v for k, v in level.items() if k not in drop} for level in self.levels]


def build_audit_process(model_fn: Callable[[], Any], plan: RecordPlan,
                        canaries: RecordCanaries, *, client_learning_rate: float,
                        noise_multiplier_scale: float = 1.0,
                        loss_fn: Optional[Callable] = None,
                        example_weight_fn: Optional[Callable] = None):
  """The rPDP-FL process of ``plan`` with ``canaries`` (server SGD at lr 1).

  ``noise_multiplier_scale`` < 1 builds a deliberately *broken* mechanism
  (σ·scale; 0 = no noise) while the plan and its ledger keep σ: for
  validating the audit only.
  """
  if not noise_multiplier_scale >= 0:
    raise ValueError(f"noise_multiplier_scale={noise_multiplier_scale} must be >= 0.")
  return build_rpdp_fedavg_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(client_learning_rate),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
      local_steps=plan.params.local_steps,
      noise_multiplier=plan.noise_multiplier * noise_multiplier_scale,
      clip_norm=plan.clip_norm,
      loss_fn=loss_fn if loss_fn is not None else dp_sgd.sparse_categorical_crossentropy,
      example_weight_fn=example_weight_fn,
      record_replacement=canary_replacement.CanaryReplacement(canaries.seeds))


def run_record_audit(model_fn: Callable[[], Any], federation: Any, plan: RecordPlan, *,
                     num_canaries: int, run_seed: int, output_dir: str,
                     client_learning_rate: float, audit_seed: int = 0,
                     levels: Optional[Sequence[float]] = None,
                     clients: Optional[Sequence[str]] = None,
                     noise_multiplier_scale: float = 1.0,
                     rate_scale: Optional[Mapping[float, float]] = None,
                     loss_fn: Optional[Callable] = None,
                     example_weight_fn: Optional[Callable] = None,
                     hyperparameters: Optional[Mapping[str, Any]] = None,
                     confidence: float = estimator.DEFAULT_CONFIDENCE,
                     bootstrap: int = estimator.DEFAULT_BOOTSTRAP,
                     process: Any = None,
                     **run_kwargs: Any) -> RecordAudit:
  """Runs one seed of ``plan`` with record-level canaries and audits every level.

  Builds the canaries (:func:`make_record_canaries`) and the process
  (:func:`build_audit_process`, or ``process`` if given: it must have been
  built with this call's canary seeds), runs
  :func:`tff_idp.rpdp.record_level.run_record_level` with them
  (``run_kwargs``: ``evaluate_fn``, ``eval_every``, ``progress``,
  ``insecure_reproducible_noise``, ``keras_builder``, ``restart``, ...),
  then measures θ_0 − θ_T and estimates ε per level (:func:`audit_levels`).

  ``noise_multiplier_scale`` and ``rate_scale`` break the mechanism on
  purpose (the ledger keeps the plan's σ and rates): validation only.
  """
  canaries = make_record_canaries(plan, federation, num_canaries, audit_seed=audit_seed,
                                  levels=levels, clients=clients, rate_scale=rate_scale)
  if process is None:
    process = build_audit_process(model_fn, plan, canaries,
                                  client_learning_rate=client_learning_rate,
                                  noise_multiplier_scale=noise_multiplier_scale,
                                  loss_fn=loss_fn, example_weight_fn=example_weight_fn)
  hyper = dict(hyperparameters or {"client_optimizer": "sgd",
                                   "client_learning_rate": client_learning_rate,
                                   "server_optimizer": "sgd", "server_learning_rate": 1.0,
                                   "local_steps": plan.params.local_steps})
  hyper["audit"] = {"noise_multiplier_scale": float(noise_multiplier_scale),
                    "audit_seed": int(audit_seed)}
  state, rows, accountant = record_level.run_record_level(
      process, federation, plan, run_seed, output_dir, hyperparameters=hyper,
      canaries=canaries, **run_kwargs)
  # θ_0: the process's initial weights, which the driver also started from.
  delta = directions.model_delta(process, state)
  rounds_done = accountant.rounds_done if accountant is not None else plan.params.rounds
  results = audit_levels(canaries, delta, plan, rounds_done, confidence=confidence,
                         bootstrap=bootstrap, seed=audit_seed)
  return RecordAudit(levels=results, canaries=canaries, rows=rows, accountant=accountant,
                     model_delta=delta, state=state)


@dataclasses.dataclass
class RecordCanaryAudit:
  """The record-level audit as a plug-in of :func:`tff_idp.rpdp.runs.run`.

  ``tff_idp.rpdp.runs.run(..., audit=RecordCanaryAudit(k, audit_seed, levels))``
  adds, per private method, one audited run of the first seed with ``k``
  gradient canaries (:func:`run_record_audit`). The family's code calls
  :meth:`prepare` before any training and :meth:`run` after a method's seeds;
  it imports nothing from :mod:`tff_idp.audit`.
  """
  num_canaries: int
  audit_seed: int = 0
  levels: Optional[Sequence[float]] = None

  def prepare(self, plans: Mapping[str, RecordPlan], records: Any) -> None:
    """Builds every method's canaries once to validate them (ValueError with advice)."""
    self._methods = set()
    for method, plan in plans.items():
      if plan.budgets is None:
        continue
      try:
        make_record_canaries(plan, records, self.num_canaries, audit_seed=self.audit_seed,
                             levels=self.levels)
      except ValueError as e:
        raise ValueError(f"--audit_canaries={self.num_canaries} ({method}): {e}") from None
      self._methods.add(method)
    if not self._methods:
      raise ValueError("--audit_canaries needs a private method (ours, minimum or "
                       "dropout); privacy_free has no budget to audit.")

  def audits(self, method: str) -> bool:
    return method in getattr(self, "_methods", ())

  def run(self, model_fn: Callable[[], Any], records: Any, plan: RecordPlan, *,
          run_seed: int, output_dir: str, accuracy_without: float,
          **audit_kwargs: Any) -> dict:
    """The row entries of one method's audit: ``audit`` and the accuracies with/without."""
    audited = run_record_audit(model_fn, records, plan, num_canaries=self.num_canaries,
                               run_seed=run_seed, output_dir=output_dir,
                               audit_seed=self.audit_seed, levels=self.levels,
                               **audit_kwargs)
    return {"audit": audited.summary_rows(),
            "audit_accuracy_with_canaries": audited.final_accuracy,
            "audit_accuracy_without_canaries": accuracy_without}
