"""rPDP-FL's client work as TFF computations (a ``ClientWorkProcess``) and a FedAvg process.

Record-level DP needs no server noise: each sampled client runs
:func:`tff_idp.rpdp.dp_sgd.build_local_dp_sgd` and the server takes a
plain average of the noisy model deltas (Lemma 5: averaging is
post-processing). Client-level Poisson sampling at rate λ happens outside,
in the round driver's sampler.

Client data is a ``tf.data.Dataset`` of record batches with the model's
features and labels plus two fields (see :func:`record_dataset`):

* ``q``: float32 [B], each record's current sampling rate (0 = excluded);
* ``seed``: int64 [B, 2], the client's seed for this round, repeated on every
  record so that the element stays a plain batch (TFF client data must be a
  sequence). It drives the client's record sampling and DP-SGD noise, so it
  is the client's secret: it lives in client-placed data that no server
  computation reads. In a simulation the driver derives it with the client's
  key from the run's secret (``tff_idp.engine.privacy_randomness``), which makes a
  run resumable from its checkpoint without making the noise predictable.

The client work's state is its seed counter (int64 at the server): a secret
start drawn at every ``initialize()`` plus the round number
(:func:`tff_idp.engine.tff_composition.round_counter`). It is broadcast every
round and folded into each client's seed
(:func:`tff_idp.rpdp.records.round_seed`), so a pipeline that feeds the same
client datasets every round, or a second run (a sweep over L) on the same
dataset objects, still gets fresh record sampling and noise.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.engine import client_execution as client_execution_lib
from tff_idp.engine import in_process_round
from tff_idp.engine import state_functions
from tff_idp.engine import stock_keywords
from tff_idp.engine import tff_composition
from tff_idp.rpdp import dp_sgd
from tff_idp.rpdp import in_process
from tff_idp.rpdp import vectorized
from tff_idp.rpdp import record_stats
from tff_idp.rpdp import records

ModelFn = Callable[[], tff.learning.models.VariableModel]
STAT_KEYS = record_stats.STAT_KEYS
# The client data's record fields, re-exported from :mod:`tff_idp.rpdp.records`.
RATE_KEY, SEED_KEY, CANARY_KEY = records.RATE_KEY, records.SEED_KEY, records.CANARY_KEY
record_element_spec = records.record_element_spec
record_dataset = records.record_dataset
collect_records = records.collect_records


def build_record_dp_client_work(
    model_fn: ModelFn, optimizer: tff.learning.optimizers.Optimizer, *,
    local_steps: int, noise_multiplier: float, clip_norm: float,
    loss_fn: dp_sgd.LossFn = dp_sgd.sparse_categorical_crossentropy,
    example_weight_fn: Optional[dp_sgd.ExampleWeightFn] = None,
    record_replacement: Optional[dp_sgd.RecordReplacement] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """rPDP-FL client work (Alg. 3 lines 9-17) as a ``tff.learning.templates.ClientWorkProcess``.

  Args:
    model_fn: builds a ``tff.learning.models.VariableModel`` whose
      ``predict_on_batch`` gives what ``loss_fn`` expects (logits by default).
    optimizer: the client's TFF optimizer (e.g. ``build_sgdm(learning_rate=η)``).
    local_steps: τ.
    noise_multiplier: σ (0 with ``clip_norm=inf`` is non-private local SGD).
    clip_norm: L.
    loss_fn: per-example loss ``(labels, predictions) -> [B]``.
    example_weight_fn: optional ``(losses, thresholds) -> weights in [0, 1]``
      applied to the clipped gradients of the sampled records, e.g.
      ``importance.ino_example_weight_fn(gamma)`` for INO-SGD (weights
      outside [0, 1] fail loudly).
    record_replacement: the replaced-record hook of
      :func:`tff_idp.rpdp.dp_sgd.build_local_dp_sgd` (an audit's gradient
      canaries plug in here, :mod:`tff_idp.audit.record_canaries`); the
      client data then has the ``canary`` field (module doc).

  The update weight is 1 for a client that took steps and 0 for one that had
  no records or only excluded ones, so padding clients never move the mean.
  Measurements are ``train/{loss, sampled_records, clipped_fraction,
  mean_expected_batch, participating_clients}``. State: the seed counter
  (int64 at the server; a secret start at each ``initialize()`` plus the
  round), folded into every client's seed each round (module doc), so
  identical client datasets in two rounds or two runs still draw fresh noise.
  """
  with tf.Graph().as_default():
    model = model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    element_spec = record_element_spec(model.input_spec,
                                       with_canaries=record_replacement is not None)
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(element_spec))

  @tff.tensorflow.computation(weights_type, data_type, np.int64)
  def client_update(initial_weights, dataset, round_num):
    local_model = model_fn()
    update_fn = dp_sgd.build_local_dp_sgd(
        local_model, optimizer, local_steps, noise_multiplier, clip_norm, loss_fn,
        example_weight_fn, record_replacement=record_replacement)
    if record_replacement is None:
      x, y, q, seed = collect_records(dataset)
      delta, stats = update_fn(initial_weights, x, y, q, records.round_seed(seed, round_num))
    else:
      x, y, q, seed, canary_index = collect_records(dataset)
      delta, stats = update_fn(initial_weights, x, y, q, records.round_seed(seed, round_num),
                               canary_index=canary_index)
    weight = tf.cast(stats["steps"] > 0, tf.float32)
    return (tff.learning.templates.ClientResult(update=delta, update_weight=weight),
            record_stats.client_stats(stats, weight))

  stats_type = client_update.type_signature.result[1]
  finalize_stats = tff.tensorflow.computation(record_stats.finalize, stats_type)

  _, next_round = tff_composition.round_counter()
  init_fn = state_functions.seed_counter_client_work_state().initialize

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    round_at_clients = tff.federated_broadcast(state)
    result, stats = tff.federated_map(client_update, (weights, client_data, round_at_clients))
    summed = tff.federated_sum(stats)
    measurements = tff.federated_zip(collections.OrderedDict(
        train=tff.federated_map(finalize_stats, summed)))
    return tff.templates.MeasuredProcessOutput(tff.federated_map(next_round, state), result,
                                               measurements)

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)


def build_rpdp_fedavg_process(
    model_fn: ModelFn, *, client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer, local_steps: int,
    noise_multiplier: float, clip_norm: float,
    loss_fn: dp_sgd.LossFn = dp_sgd.sparse_categorical_crossentropy,
    example_weight_fn: Optional[dp_sgd.ExampleWeightFn] = None,
    record_replacement: Optional[dp_sgd.RecordReplacement] = None,
    metrics_aggregator: Optional[Any] = None,
    model_aggregator: Optional[Any] = None,
    client_weighting: Optional[Any] = None,
    client_execution: Optional[str] = None,
    parallel_clients: Optional[int] = None,
) -> tff.learning.templates.LearningProcess:
  """rPDP-FL (Alg. 3) as a native ``LearningProcess``, whatever the model size.

  Broadcast → record-level DP-SGD as TFF client work
  (:func:`build_record_dp_client_work`) → 0/1-weighted mean → server
  optimizer. Composes with stock TFF. For the faster in-process rounds when
  you drive ``next`` from Python, use :func:`build_rpdp_fedavg_driver_process`
  (issue 31 item 7); arguments are documented there.

  Stock TFF keywords (issue 51): ``client_weighting`` may only be ``UNIFORM``;
  ``model_aggregator`` and ``metrics_aggregator`` are refused, and so are
  ``client_execution`` / ``parallel_clients``, which belong to the driver builder.
  """
  builder = "build_rpdp_fedavg_process"
  stock_keywords.refuse_driver_keywords(builder, "build_rpdp_fedavg_driver_process",
                                        client_execution=client_execution,
                                        parallel_clients=parallel_clients)
  stock_keywords.refuse_model_aggregator(
      builder, model_aggregator, "the 0/1-weighted mean of the sampled clients' DP-SGD "
      "updates (Alg. 3)")
  stock_keywords.check_client_weighting(builder, client_weighting)
  stock_keywords.refuse_metrics_aggregator(
      builder, metrics_aggregator, "the record-level client work reports its own sums "
      "(loss, sampled and clipped records), which the in-process and vectorized rounds "
      "reproduce exactly")
  return build_rpdp_fedavg_driver_process(
      model_fn, client_optimizer=client_optimizer, server_optimizer=server_optimizer,
      local_steps=local_steps, noise_multiplier=noise_multiplier, clip_norm=clip_norm,
      loss_fn=loss_fn, example_weight_fn=example_weight_fn,
      record_replacement=record_replacement, client_execution="tff")


def build_rpdp_fedavg_driver_process(
    model_fn: ModelFn, *, client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer, local_steps: int,
    noise_multiplier: float, clip_norm: float,
    loss_fn: dp_sgd.LossFn = dp_sgd.sparse_categorical_crossentropy,
    example_weight_fn: Optional[dp_sgd.ExampleWeightFn] = None,
    record_replacement: Optional[dp_sgd.RecordReplacement] = None,
    client_execution: str = "auto",
    parallel_clients: Optional[int] = None,
) -> "tff.learning.templates.LearningProcess | in_process_round.InProcessLearningProcess":
  """rPDP-FL (Alg. 3) for rounds driven from Python: the fast in-process path where it pays.

  What the toolkit's runners and experiments build. ``"tff"`` (or
  ``"auto"`` on a small model or with canaries) returns the native
  ``LearningProcess`` of :func:`build_rpdp_fedavg_process`; otherwise an
  :class:`~tff_idp.engine.in_process_round.InProcessLearningProcess` with
  the same state and equal rounds that is **not** a TFF computation (call
  its ``next`` from Python).

  The mean is TFF's ``MeanFactory`` weighted by the client work's 0/1 update
  weights (an empty cohort leaves the model unchanged). With a server SGD
  learning rate of 1 the new global model is the average of the clients'
  local models, as in Alg. 3 line 18.

  ``record_replacement`` builds the audit variant (the hook that record-level
  gradient canaries plug into, :func:`build_record_dp_client_work`).

  ``client_execution``: ``"tff"`` runs each client's DP-SGD as a TFF client
  computation; ``"in_process"`` runs the same DP-SGD function in this process
  (:mod:`tff_idp.rpdp.in_process`; records, rates and seeds read from the same
  client datasets, so the rounds are equal within float tolerance) and the
  mean and server optimizer in TFF; ``"vectorized"`` runs every sampled
  client's DP-SGD at once on stacked weights (:mod:`tff_idp.rpdp.vectorized`:
  the logistic regression and the MLP with the head's loss, no per-example
  weights; the same record samples and noise from the same seeds);
  ``"auto"`` (default) picks as IDP-FedAvg does
  (:func:`tff_idp.engine.client_execution.resolve_client_execution`: TFF for
  the audit variant, vectorized where served, in process from 10,000
  trainable parameters up, in TFF for other small models).
  ``parallel_clients``: in-process model copies (default: the core count, at
  most 4).
  """
  execution = in_process_round.resolve_for_model(
      client_execution, model_fn,
      "the record-level audit's canaries" if record_replacement is not None else "",
      parallel_clients,
      vectorizable=vectorized.vectorizable(model_fn, loss_fn, example_weight_fn,
                                           record_replacement))
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(model_fn)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  aggregator = tff.aggregators.MeanFactory(no_nan_division=True).create(
      weights_type.trainable, tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                                      weights_type)
  if execution == "tff":
    return tff.learning.templates.compose_learning_process(
        initial_model_weights_fn,
        tff.learning.templates.build_broadcast_process(weights_type),
        build_record_dp_client_work(
            model_fn, client_optimizer, local_steps=local_steps,
            noise_multiplier=noise_multiplier, clip_norm=clip_norm, loss_fn=loss_fn,
            example_weight_fn=example_weight_fn, record_replacement=record_replacement),
        aggregator, finalizer)
  # The TFF process's state functions (same state), without tracing its round (issue 52).
  reference = state_functions.compose_state_functions(
      initial_model_weights_fn, tff.learning.templates.build_broadcast_process(weights_type),
      state_functions.seed_counter_client_work_state(), aggregator, finalizer)
  if execution == "vectorized":
    cohort_update = vectorized.VectorizedRecordDpUpdate(
        model_fn, client_optimizer, local_steps=local_steps,
        noise_multiplier=noise_multiplier, clip_norm=clip_norm, loss_fn=loss_fn,
        example_weight_fn=example_weight_fn)
    server_step = in_process_round.build_server_step(
        aggregator, finalizer, cohort_update.stats_type,
        record_stats.build_finalize_at_server(cohort_update.stats_type), stats_at_server=True)
    # Record-level DP adds no server noise: the weighted mean takes the cohort as one
    # client, its weighted mean (issue 49; the same mean, without 1,000 TFF client values).
    return in_process_round.InProcessLearningProcess(
        reference, [], server_step, next_client_work_state=in_process.next_round,
        cohort_update=cohort_update, collapse_weighted_mean=True)
  copies = parallel_clients or client_execution_lib.default_parallel_clients()
  updates = [in_process.RecordDpClientUpdate(
      model_fn, client_optimizer, local_steps=local_steps, noise_multiplier=noise_multiplier,
      clip_norm=clip_norm, loss_fn=loss_fn, example_weight_fn=example_weight_fn)
             for _ in range(copies)]
  server_step = in_process_round.build_server_step(
      aggregator, finalizer, updates[0].stats_type,
      record_stats.build_aggregate(updates[0].stats_type))
  return in_process_round.InProcessLearningProcess(
      reference, updates, server_step, next_client_work_state=in_process.next_round)
