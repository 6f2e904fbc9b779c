"""Record-level personalized DP runs (rPDP-FL Alg. 3) in the shared round driver.

:func:`make_record_plan` turns per-record budgets into per-record rates for
one of four methods (rPDP-FL §7.2: ``ours``, ``minimum``, ``dropout``,
``privacy_free``). It lives, with :class:`RecordPlan` and :data:`METHODS`,
in the TensorFlow-free :mod:`tff_idp.accounting.record.plan` and is
re-exported here, so calibrating rates never needs TensorFlow.

:func:`run_record_level` runs one seed: clients are Poisson-sampled at λ by
the driver's sampler, the per-record accountant pre-checks and excludes
records before every round, and everything (model, sampler RNG, round,
record ledger, privacy secret) is checkpointed and resumed exactly.

Privacy randomness (``tff_idp.engine.privacy_randomness``) is secret by default:
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

from tff_idp.accounting.record.ledger import RecordBudgetAccountant
# Re-exported: the plans are computed without TensorFlow (rPDP-FL §7.2).
from tff_idp.accounting.record.plan import METHODS  # pylint: disable=unused-import
from tff_idp.accounting.record.plan import RecordPlan
from tff_idp.accounting.record.plan import make_record_plan  # pylint: disable=unused-import
from tff_idp import array_checks
from tff_idp.rpdp import vectorized
from tff_idp.rpdp.client_work import record_dataset
from tff_idp.rpdp.records import RecordArrays
from tff_idp.errors import ToolkitValueError
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.engine.sampling import PoissonClientSampler
from tff_idp.engine import fingerprint as fingerprint_lib
from tff_idp.engine.driver import RECORD_LEVEL_FIELDS
from tff_idp.engine.driver import RoundDriver
from tff_idp.engine import tff_composition


@dataclasses.dataclass
class RecordFederation:
  """Every client's records in memory: ``x[cid]``, ``y[cid]`` (numpy).

  The arrays are checked and converted on construction, before any
  calibration: features to float32 (NaN/inf rejected), labels to int32 class
  ids (fractional or negative labels rejected), each error naming the client
  and field (:mod:`tff_idp.array_checks`).
  """
  x: Mapping[str, np.ndarray]
  y: Mapping[str, np.ndarray]

  def __post_init__(self):
    if set(self.x) != set(self.y):
      raise ToolkitValueError("RecordFederation: x and y must have the same client ids "
                              f"(only in x: {sorted(set(self.x) - set(self.y))[:5]}, only "
                              f"in y: {sorted(set(self.y) - set(self.x))[:5]}).")
    if not self.x:
      raise ToolkitValueError("RecordFederation: no clients.")
    self.x = {cid: array_checks.as_features(self.x[cid], f"x[{cid!r}]") for cid in self.x}
    self.y = {cid: array_checks.as_labels(self.y[cid], f"y[{cid!r}]") for cid in self.x}
    for cid in self.x:
      if len(self.x[cid]) != len(self.y[cid]):
        raise ToolkitValueError(f"client {cid!r}: {len(self.x[cid])} features vs "
                                f"{len(self.y[cid])} labels.")

  @property
  def client_ids(self) -> list[str]:
    return list(self.x)

  @property
  def sizes(self) -> dict[str, int]:
    return {cid: len(self.y[cid]) for cid in self.x}


def record_input_fn(federation: RecordFederation, plan: RecordPlan,
                    accountant: Optional[RecordBudgetAccountant],
                    randomness: PrivacyRandomness,
                    batch_size: int = 1024,
                    canaries: Optional[Any] = None,
                    arrays: bool = False) -> Callable[[str, int], Any]:
  """``(client_id, round) -> dataset`` with the records' current rates (0 = excluded).

  The dataset carries the client's secret seed for the round
  (``randomness.client_seed``), which drives its record sampling and noise.

  ``canaries`` (an audit's :class:`tff_idp.audit.record_canaries.RecordCanaries`)
  appends the client's inserted gradient canaries after its real records,
  via ``canaries.client_records(client_id, x, y, q) -> (x, y, q, canary_index)``.
  The real records' rates still come from the ledger, which never sees a
  canary.

  ``arrays``: a :class:`tff_idp.rpdp.records.RecordArrays` (the same records,
  rates and seed, no ``tf.data`` pipeline) for the vectorized execution.
  """
  if arrays and canaries is not None:
    raise ValueError("canaries run as TFF client work: build their datasets (arrays=False).")

  def make(client_id: str, round_num: int):
    q = accountant.current_rates(client_id) if accountant is not None \
        else plan.rates[client_id]
    x, y = federation.x[client_id], federation.y[client_id]
    seed = randomness.client_seed(client_id, round_num)
    if arrays:
      return RecordArrays(x, y, q, seed)
    if canaries is None:
      return record_dataset(x, y, q, seed, batch_size)
    x, y, q, index = canaries.client_records(client_id, x, y, q)
    return record_dataset(x, y, q, seed, batch_size, canary_index=index)

  return make


def empty_input_fn(federation: RecordFederation,
                   with_canaries: bool = False, arrays: bool = False) -> Callable[[], Any]:
  """A client with no records (for cohort padding: weight 0, update 0)."""
  cid = federation.client_ids[0]
  x, y = federation.x[cid][:0], federation.y[cid][:0]
  if arrays:
    return lambda: RecordArrays(x, y, np.zeros(0, np.float32), (0, 0))
  index = np.zeros(0, np.int32) if with_canaries else None
  return lambda: record_dataset(x, y, np.zeros(0, np.float32), (0, 0), canary_index=index)


def _rates_digest(plan: RecordPlan) -> dict:
  """Identifies the per-record rates and budgets: resuming under others is refused."""
  h = hashlib.sha256()
  for cid in sorted(plan.rates):
    h.update(cid.encode())
    h.update(np.asarray(plan.rates[cid], dtype=np.float64).tobytes())
  return {"rates": h.hexdigest()[:16],
          "budgets": (None if plan.budgets is None
                      else fingerprint_lib.mapping_digest(plan.budgets)),
          "own_budgets": (None if plan.own_budgets is None
                          else fingerprint_lib.mapping_digest(plan.own_budgets))}


def run_record_level(process, federation: RecordFederation, plan: RecordPlan,
                     run_seed: int, output_dir: str,
                     evaluate_fn: Optional[Callable[[Any], dict]] = None,
                     eval_every: int = 5, checkpoint_every: int = 5,
                     progress: bool = True, fingerprint: Any = None,
                     insecure_reproducible_noise: bool = False,
                     release_only: bool = False,
                     eval_metrics: Sequence[str] = (), *,
                     hyperparameters: Optional[Mapping[str, Any]] = None,
                     keras_builder: Optional[Callable[[], Any]] = None,
                     restart: bool = False,
                     canaries: Optional[Any] = None):
  """Runs (or resumes) one seed of a record-level method; returns (state, rows, accountant).

  ``rows`` are the whole run's metric rows (a finished run returns its
  stored rows and trains nothing). A checkpoint in ``output_dir`` is resumed
  only under the same fingerprint (:mod:`tff_idp.engine.fingerprint`): the
  plan's calibration (σ, L, τ, T, λ, δ, threat model, method, per-record
  rates and budgets), ``hyperparameters``, the records (a digest of every
  array) and ``fingerprint``, the model (``keras_builder``'s layers, and
  always the process state's shapes and server hyperparameters), the run
  seed and the insecure-noise mode; not ``output_dir``, ``eval_every``,
  ``checkpoint_every``, ``progress``, ``release_only`` or ``eval_metrics``.

  Args:
    run_seed: names the run (checkpoints are bound to it); it seeds nothing
      private unless ``insecure_reproducible_noise`` (NOT PRIVATE, debugging
      only) derives the privacy randomness from it.
    release_only: write no diagnostics (un-noised statistics).
    eval_metrics: keys of ``evaluate_fn``'s result besides loss and accuracy
      (e.g. per-group accuracy, ``tff_idp.engine.group_metrics``), written
      to ``metrics.csv`` as ``eval_<key>``: the released model's evaluation
      on held-out data is release, not diagnostics.
    fingerprint: further identity of the run that neither the records nor
      ``keras_builder`` show (e.g. the loss head). Keep it free of paths and
      names that may be spelled differently for the same data: the records
      are fingerprinted byte for byte already.
    hyperparameters: required: the training hyperparameters ``process`` was
      built with (client and server learning rates and optimizers, local
      algorithm, ...). The process does not expose them, so without them a
      resume under another learning rate would go unnoticed.
    keras_builder: the model's Keras builder; its layer types and configs go
      into the fingerprint (a model with the same weight shapes but, e.g.,
      other activations is then told apart).
    restart: discard this run's checkpoints and metrics and start fresh
      (:class:`RoundDriver`'s ``restart``, the experiments' ``--restart``).
    canaries: an empirical privacy audit's record-level gradient canaries
      (:class:`tff_idp.audit.record_canaries.RecordCanaries`; ``process``
      must be built with their ``seeds``). They are appended to their
      clients' data every round (:func:`record_input_fn`) and go into the
      fingerprint; the ledger and the real records' rates are unchanged.
      Use :func:`tff_idp.audit.record_canaries.run_record_audit` to run and
      evaluate an audit.
  """
  if not isinstance(hyperparameters, Mapping) or not hyperparameters:
    raise ToolkitValueError(
        "run_record_level needs hyperparameters={...}: the training hyperparameters "
        "the process was built with (e.g. {'client_learning_rate': 0.1, "
        "'client_optimizer': 'sgd', 'server_learning_rate': 1.0}); they go into the "
        "checkpoint fingerprint, so a resume under other ones is refused.")
  accountant = plan.new_accountant()
  # The vectorized execution reads arrays; the others their datasets (the same records).
  arrays = isinstance(getattr(process, "cohort_update", None),
                      vectorized.VectorizedRecordDpUpdate)
  client_ids = federation.client_ids
  randomness = PrivacyRandomness.for_run(run_seed, f"rpdp/{plan.method}",
                                         insecure_reproducible_noise)
  sampler = PoissonClientSampler(client_ids, np.full(len(client_ids), plan.params.client_rate),
                                 randomness.sampling_seed())
  driver = RoundDriver(
      # The client work's seed counter starts at the run's secret (issue 48): two runs
      # on the same datasets never share noise; a resume restores it from the checkpoint.
      process=tff_composition.WithSeedCounterStart(process, randomness.seed_counter_start()),
      sampler=sampler,
      client_input_fn=record_input_fn(federation, plan, accountant, randomness,
                                      canaries=canaries, arrays=arrays),
      output_dir=output_dir, evaluate_fn=evaluate_fn, eval_every=eval_every,
      checkpoint_every=checkpoint_every, progress=progress,
      run_fingerprint=fingerprint_lib.run_fingerprint(
          calibration={"method": plan.method, "noise_multiplier": plan.noise_multiplier,
                       "clip_norm": plan.clip_norm, "params": dataclasses.asdict(plan.params),
                       "summary": {k: v for k, v in plan.calibration.items()
                                   if k != "seconds"},
                       **_rates_digest(plan)},
          training=hyperparameters,
          data={"records": fingerprint_lib.records_identity(federation.x, federation.y),
                "name": fingerprint,
                **({} if canaries is None else {"canaries": canaries.identity()})},
          model=(fingerprint_lib.keras_model_identity(keras_builder())
                 if keras_builder is not None else None),
          run_seed=run_seed,
          insecure_reproducible_noise=insecure_reproducible_noise),
      restart=restart,
      padding_input_fn=empty_input_fn(federation, with_canaries=canaries is not None,
                                      arrays=arrays),
      ledger=accountant, process_diagnostics=RECORD_LEVEL_FIELDS,
      privacy_randomness=randomness, release_only=release_only,
      eval_metrics=tuple(eval_metrics))
  state, rows = driver.run(plan.params.rounds)
  return state, rows, accountant
