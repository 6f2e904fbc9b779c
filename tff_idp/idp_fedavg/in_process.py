"""In-process client execution: a faster simulation path for IDP-FedAvg rounds (issue 14).

A TFF round ships every sampled client's ``tf.data`` pipeline to the TFF
worker and runs one client computation per client there. On the paper's CNN
this costs ~20 ms per client of serialisation, shipping and launch, and the
worker's per-client graphs compete for the same cores. This module runs the
same round in two parts:

1. **Client training in the driver's Python process**
   (:class:`ModelDeltaClientUpdate`): one traced ``tf.function`` per process,
   called once per sampled client, that does what TFF's model-delta client
   work (``tff.learning.templates.build_model_delta_client_work``) does:
   set the model to the broadcast weights, run the client optimizer over every
   batch, and return Δ = initial − final (zeroed, with weight 0, if any entry
   is not finite) and the model's unfinalized metrics.
2. **Aggregation and server update in TFF, unchanged** (:func:`build_server_step`):
   one federated computation calls the *same* ``AggregationProcess`` (the DP
   aggregator: per-client clipping, the noised sum, the adaptive clip's noised
   count bit) and the same finalizer (the server optimizer) as the TFF round,
   on the clients' updates placed at ``tff.CLIENTS``. All privacy code runs
   where it runs in the TFF round; only the non-private part (local training
   on the clients' own data) moved.

:class:`InProcessLearningProcess` wraps the two into the interface of the TFF
``LearningProcess`` it was built from: the same ``initialize``, the same state
structure (``LearningAlgorithmState``; checkpoints are interchangeable), the
same metrics structure (``distributor``, ``client_work/train``,
``aggregator``, ``finalizer``), so :class:`tff_idp.engine.driver.RoundDriver`,
the privacy ledger and the checkpoints work unchanged. Its results equal the
TFF round's within float tolerance (``tests/idp_fedavg/test_in_process.py``).

On GPU this path trains on the driver process's TensorFlow device, with one
client computation at a time using the whole device; TFF's per-client
execution is known to leave a GPU mostly idle on small models.

Not for: a fleet of TFF workers (``--workers``: training would run on the
driver, not the fleet), or the client-level audit's canary clients; use
``client_execution="tff"`` there.
"""
from __future__ import annotations

import collections
from concurrent import futures
import os
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
# TFF's own helper, so that non-finite updates are handled exactly as in its client work.
from tensorflow_federated.python.learning import tensor_utils

from tff_idp.idp_fedavg import config

ModelFn = Callable[[], tff.learning.models.VariableModel]
CLIENT_EXECUTIONS = config.CLIENT_EXECUTIONS
SCALE_KEY = "clip_scale"
DATA_KEY = "data"


def _client_data_options() -> tf.data.Options:
  """``tf.data`` options for iterating a client's data in the client update (issue 23).

  Autotuning off: a client pipeline is iterated once per round, and starting
  tf.data's autotuner with each iterator cost ~1.6 ms per client (2.4 vs
  0.9 ms for the iterator alone, measured on 2 cores), more than it can win on a
  pipeline of a few batches. The elements and their order are unchanged.
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  return options


class ModelDeltaClientUpdate:
  """One client's local training in this process, as TFF's model-delta client work does it.

  IDP-FedAvg Alg. 2, ClientUpdate (lines 12-17): start from the broadcast
  weights, take one client-optimizer step per batch of the client's data,
  return the model delta. ``weighting`` is TFF's ``ClientWeighting``
  (``UNIFORM``: weight 1, ``NUM_EXAMPLES``: the examples seen); a client whose
  delta has a non-finite entry returns zeros with weight 0 and no metrics, as
  in TFF. SCALE's client input ``OrderedDict(data=..., clip_scale=...)`` gets
  its clip scale as the update weight (as ``build_scaled_client_work``).
  """

  def __init__(self, model_fn: ModelFn, optimizer: tff.learning.optimizers.Optimizer,
               weighting: tff.learning.ClientWeighting):
    self._model = model_fn()
    self._optimizer = optimizer
    self._weighting = weighting
    self._weights = tff.learning.models.ModelWeights.from_model(self._model)
    self._trainable_specs = tuple(tf.TensorSpec(v.shape, v.dtype)
                                  for v in tf.nest.flatten(self._weights.trainable))
    self.metric_finalizers = self._model.metric_finalizers()
    self.metrics_type = tff.types.tensorflow_to_type(tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype),
        self._model.report_local_unfinalized_metrics()))
    self._update = tf.function(self._update_fn)

  def _update_fn(self, hparams, initial_weights, dataset):
    model, optimizer, weights = self._model, self._optimizer, self._weights
    model.reset_metrics()
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
    optimizer_state = optimizer.set_hparams(optimizer.initialize(self._trainable_specs),
                                            hparams)
    num_examples = tf.zeros([], tf.int64)
    for batch in iter(dataset.with_options(_client_data_options())):
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      gradients = tape.gradient(output.loss, weights.trainable)
      optimizer_state, updated = optimizer.next(
          optimizer_state, tuple(tf.nest.flatten(weights.trainable)),
          tuple(tf.nest.flatten(gradients)))
      tf.nest.map_structure(lambda v, t: v.assign(t), weights.trainable,
                            tf.nest.pack_sequence_as(weights.trainable, updated))
      if output.num_examples is None:
        num_examples += tf.shape(output.predictions, out_type=tf.int64)[0]
      else:
        num_examples += tf.cast(output.num_examples, tf.int64)
    delta = tf.nest.map_structure(tf.subtract, initial_weights.trainable, weights.trainable)
    delta, non_finite = tensor_utils.zero_all_if_any_non_finite(delta)
    if non_finite > 0:
      weight = tf.constant(0.0, tf.float32)
      model.reset_metrics()
    elif self._weighting == tff.learning.ClientWeighting.NUM_EXAMPLES:
      weight = tf.cast(num_examples, tf.float32)
    else:
      weight = tf.constant(1.0, tf.float32)
    return delta, weight, model.report_local_unfinalized_metrics()

  def __call__(self, hparams: Any, initial_weights: Any, client_input: Any
               ) -> tuple[Any, np.float32, Any]:
    """(Δ as numpy arrays, update weight, unfinalized metrics) for one client."""
    hparams = tf.nest.map_structure(tf.convert_to_tensor, hparams)
    initial_weights = tf.nest.map_structure(tf.convert_to_tensor, initial_weights)
    if isinstance(client_input, Mapping):  # SCALE: OrderedDict(data=..., clip_scale=...)
      delta, _, metrics = self._update(hparams, initial_weights, client_input[DATA_KEY])
      weight = np.float32(_single_value(client_input[SCALE_KEY]))
    else:
      delta, weight, metrics = self._update(hparams, initial_weights, client_input)
      weight = np.float32(weight.numpy())
    return (tf.nest.map_structure(lambda t: t.numpy(), delta), weight,
            tf.nest.map_structure(lambda t: t.numpy(), metrics))


def _single_value(dataset: tf.data.Dataset) -> float:
  """The one element of SCALE's 1-element ``clip_scale`` dataset (the last, as TFF's reduce)."""
  value = None
  for value in dataset:
    pass
  if value is None:
    raise ValueError("a SCALE client input's clip_scale dataset is empty; it must hold "
                     "the client's clip scale (tff_idp.idp_fedavg.process.scaled_client_data).")
  return float(value)


def build_server_step(aggregator: tff.templates.AggregationProcess,
                      finalizer: tff.learning.templates.FinalizerProcess,
                      client_update: ModelDeltaClientUpdate) -> tff.Computation:
  """The round's server part as one TFF computation (the composed process's lines, unchanged).

  ``(aggregator state, finalizer state, global weights@SERVER, updates@CLIENTS,
  update weights@CLIENTS, unfinalized metrics@CLIENTS) -> OrderedDict`` of
  the aggregator's and finalizer's outputs, called as
  ``tff.learning.templates.compose_learning_process`` calls them, and the
  training metrics as ``tff.learning.metrics.sum_then_finalize`` (TFF's
  model-delta client work) computes them.
  """
  agg_state_type, value_type, weight_type = aggregator.next.type_signature.parameter
  fin_state_type, weights_type, _ = finalizer.next.type_signature.parameter
  metrics_type = tff.FederatedType(client_update.metrics_type, tff.CLIENTS)
  aggregate_metrics = tff.learning.metrics.sum_then_finalize(client_update.metric_finalizers)

  @tff.federated_computation(agg_state_type, fin_state_type, weights_type, value_type,
                             weight_type, metrics_type)
  def server_step(agg_state, fin_state, global_weights, updates, update_weights, metrics):
    aggregated = aggregator.next(agg_state, updates, update_weights)
    finalized = finalizer.next(fin_state, global_weights, aggregated.result)
    return collections.OrderedDict(
        aggregator_state=aggregated.state, aggregator_measurements=aggregated.measurements,
        finalizer_state=finalized.state, new_weights=finalized.result,
        finalizer_measurements=finalized.measurements,
        train_metrics=aggregate_metrics(metrics))

  return server_step


def default_parallel_clients() -> int:
  """Clients trained at once by default: the core count, at most 4.

  Measured on 2 cores (``benchmarks/bench_round_throughput.py``): 2 at once
  trained a 30-client round of the paper's CNN in ~0.75× the time of 1 (one
  client alone keeps ~1.5 cores busy), 3 was no faster than 2. Above 2 cores
  the cap is a guess, not a measurement.
  """
  return max(1, min(os.cpu_count() or 1, 4))


class InProcessLearningProcess:
  """A TFF ``LearningProcess`` whose clients train in this process (module docstring).

  ``reference`` is the composed TFF process with the same components: it
  provides ``initialize``, ``get_model_weights``, ``set_model_weights`` and
  ``get_hparams``, so states and checkpoints are interchangeable with it.

  ``client_updates`` holds one :class:`ModelDeltaClientUpdate` (its own
  model copy) per client trained at once. Client ``i`` of a cohort always
  goes to copy ``i mod k``, and each copy trains its clients in cohort
  order, one thread per copy: which copy trains which client never depends
  on timing, so a model with seeded stateful random ops (Dropout) draws the
  same masks in every run of the same cohorts.
  """

  def __init__(self, reference: tff.learning.templates.LearningProcess,
               client_updates: Sequence[ModelDeltaClientUpdate], server_step: tff.Computation):
    if not client_updates:
      raise ValueError("an in-process learning process needs at least one client update.")
    self.reference = reference
    self.client_updates = list(client_updates)
    self.server_step = server_step
    self.initialize = reference.initialize
    self.get_model_weights = reference.get_model_weights
    self.set_model_weights = reference.set_model_weights
    self.get_hparams = reference.get_hparams
    self.set_hparams = reference.set_hparams
    self._threads = ([futures.ThreadPoolExecutor(1, thread_name_prefix=f"tff_idp-client{k}")
                      for k in range(len(self.client_updates))]
                     if len(self.client_updates) > 1 else [])

  @property
  def parallel_clients(self) -> int:
    return len(self.client_updates)

  def _train_clients(self, hparams: Any, weights: Any, client_data: Sequence[Any]) -> list:
    # Converted once per round, not once per client.
    hparams = tf.nest.map_structure(tf.convert_to_tensor, hparams)
    weights = tf.nest.map_structure(tf.convert_to_tensor, weights)
    k = len(self.client_updates)
    if k == 1:
      return [self.client_updates[0](hparams, weights, c) for c in client_data]
    jobs = [self._threads[i % k].submit(self.client_updates[i % k], hparams, weights, c)
            for i, c in enumerate(client_data)]
    try:
      return [job.result() for job in jobs]
    except BaseException:  # an error or Ctrl-C: train no further client
      for job in jobs:
        job.cancel()
      raise

  def next(self, state: Any, client_data: Sequence[Any]
           ) -> tff.learning.templates.LearningProcessOutput:
    """One round (Alg. 2 lines 4-9): clients here, then the TFF server step."""
    weights = state.global_model_weights
    results = self._train_clients(state.client_work, weights, client_data)
    updates = [r[0] for r in results]
    update_weights = [r[1] for r in results]
    metrics = [r[2] for r in results]
    out = self.server_step(state.aggregator, state.finalizer, weights, updates,
                           update_weights, metrics)
    new_state = tff.learning.templates.LearningAlgorithmState(
        global_model_weights=out["new_weights"], distributor=state.distributor,
        client_work=state.client_work, aggregator=out["aggregator_state"],
        finalizer=out["finalizer_state"])
    measurements = collections.OrderedDict(
        distributor=(),
        client_work=collections.OrderedDict(train=out["train_metrics"]),
        aggregator=out["aggregator_measurements"],
        finalizer=out["finalizer_measurements"])
    return tff.learning.templates.LearningProcessOutput(new_state, measurements)

  def close(self) -> None:
    """Stops the client threads (idle ones also end when the interpreter exits)."""
    for pool in self._threads:
      pool.shutdown(wait=False, cancel_futures=True)


check_parallel_clients = config.check_parallel_clients


# ``auto`` trains clients in process from this many trainable parameters up.
# Measured (issue 14, 2 cores): the paper's CNN (28,298 parameters) trains a
# round 1.3-1.6x faster in process; the main job's logistic regression
# (610 parameters, ~30 steps per client) was ~25% slower in process (0.24 vs
# 0.19 s per round), where per-step op dispatch, not arithmetic, dominates and
# TFF's worker runs all the cohort's small client computations at once.
IN_PROCESS_MIN_PARAMETERS = 10_000


def resolve_client_execution(requested: str, num_parameters: Optional[int],
                             canaries: bool = False) -> str:
  """``requested`` with ``auto`` resolved: the library's and the CLI's one rule.

  ``auto`` trains in process (the fast path) from ``IN_PROCESS_MIN_PARAMETERS``
  trainable parameters up (``num_parameters=None``: unknown, in process), and
  as TFF client computations for smaller models or when an audit adds canary
  clients (TFF client work).
  """
  if requested != "auto":
    return check_client_execution(requested)
  if canaries:
    return "tff"
  if num_parameters is not None and num_parameters < IN_PROCESS_MIN_PARAMETERS:
    return "tff"
  return "in_process"


def check_client_execution(value: str) -> str:
  if value not in CLIENT_EXECUTIONS:
    raise ValueError(f"client_execution must be one of auto, {', '.join(CLIENT_EXECUTIONS)} "
                     f"(got {value!r}).")
  return value
