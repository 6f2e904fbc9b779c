"""IDP-FedAvg's in-process client execution: the model-delta client update (issues 14, 23).

The round's machinery (clients in this process, the unchanged DP aggregator
and server optimizer as one TFF computation) is the engine's
:mod:`tff_idp.engine.in_process_round`; this module supplies IDP-FedAvg's
client update, :class:`ModelDeltaClientUpdate`: one traced ``tf.function``
per model copy that does what TFF's model-delta client work
(``tff.learning.templates.build_model_delta_client_work``) does: set the
model to the broadcast weights, run the client optimizer over every batch,
and return Δ = initial − final (zeroed, with weight 0, if any entry is not
finite) and the model's unfinalized metrics. All privacy code (per-client
clipping, the noised sum, the adaptive clip's noised count bit) runs in the
TFF server step, where it runs in the TFF round; only the non-private part
(local training on the clients' own data) moved. Its results equal the TFF
round's within float tolerance (``tests/idp_fedavg/test_in_process.py``).

On GPU this path trains on the driver process's TensorFlow device; TFF's
per-client execution is known to leave a GPU mostly idle on small models.

Not for: a fleet of TFF workers (``--workers``: training would run on the
driver, not the fleet), or the client-level audit's canary clients; use
``client_execution="tff"`` there.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Mapping

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
# TFF's own helper, so that non-finite updates are handled exactly as in its client work.
from tensorflow_federated.python.learning import tensor_utils

from tff_idp.engine import client_execution
from tff_idp.engine import in_process_round
from tff_idp.errors import ClientInputError
from tff_idp.engine.in_process_round import InProcessLearningProcess  # noqa: F401 (re-export)

ModelFn = Callable[[], tff.learning.models.VariableModel]
CLIENT_EXECUTIONS = client_execution.CLIENT_EXECUTIONS
SCALE_KEY = "clip_scale"
DATA_KEY = "data"


class ModelDeltaClientUpdate:
  """One client's local training in this process, as TFF's model-delta client work does it.

  IDP-FedAvg Alg. 2, ClientUpdate (lines 12-17): start from the broadcast
  weights, take one client-optimizer step per batch of the client's data,
  return the model delta. ``weighting`` is TFF's ``ClientWeighting``
  (``UNIFORM``: weight 1, ``NUM_EXAMPLES``: the examples seen); a client whose
  delta has a non-finite entry returns zeros with weight 0 and no metrics, as
  in TFF. With ``clip_scale=True`` (SCALE) the client input must be
  ``OrderedDict(data=..., clip_scale=...)`` (``scaled_client_data``) and its
  clip scale is the update weight (as ``build_scaled_client_work``); any
  other input is refused with :class:`~tff_idp.errors.ClientInputError`, as
  the TFF path refuses it (issue 31: a plain dataset used to pass as scale 1,
  so the strict groups spent more than the ledger charged). Without it, a
  SCALE input is refused too.
  """

  def __init__(self, model_fn: ModelFn, optimizer: tff.learning.optimizers.Optimizer,
               weighting: tff.learning.ClientWeighting, clip_scale: bool = False):
    self._clip_scale = bool(clip_scale)
    self._model = model_fn()
    self._optimizer = optimizer
    self._weighting = weighting
    self._weights = tff.learning.models.ModelWeights.from_model(self._model)
    self._trainable_specs = tuple(tf.TensorSpec(v.shape, v.dtype)
                                  for v in tf.nest.flatten(self._weights.trainable))
    self.metric_finalizers = self._model.metric_finalizers()
    self.stats_type = tff.types.tensorflow_to_type(tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype),
        self._model.report_local_unfinalized_metrics()))
    self.metrics_type = self.stats_type
    self._update = tf.function(self._update_fn)

  def _update_fn(self, hparams, initial_weights, dataset):
    model, optimizer, weights = self._model, self._optimizer, self._weights
    model.reset_metrics()
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
    optimizer_state = optimizer.set_hparams(optimizer.initialize(self._trainable_specs),
                                            hparams)
    num_examples = tf.zeros([], tf.int64)
    for batch in iter(dataset.with_options(in_process_round.client_data_options())):
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
    is_scaled = split_scaled_input(client_input, self._clip_scale)[1] is not None
    if not self._clip_scale and not isinstance(client_input, tf.data.Dataset):
      raise ClientInputError(
          "this process takes each client's tf.data.Dataset as is; got "
          f"{type(client_input).__name__} (scaled_client_data is for per_client_clip_scale="
          "True only).")
    if is_scaled:  # SCALE: OrderedDict(data=..., clip_scale=...)
      delta, _, metrics = self._update(hparams, initial_weights, client_input[DATA_KEY])
      weight = np.float32(_single_value(client_input[SCALE_KEY]))
    else:
      delta, weight, metrics = self._update(hparams, initial_weights, client_input)
      weight = np.float32(weight.numpy())
    return (tf.nest.map_structure(lambda t: t.numpy(), delta), weight,
            tf.nest.map_structure(lambda t: t.numpy(), metrics))


def split_scaled_input(client_input: Any, clip_scale: bool) -> tuple[Any, Any]:
  """(client data, its SCALE clip-scale input or None), refusing a mismatch.

  SCALE (the IDP-FedAvg paper's baseline) charges each group's ledger at z/s_p,
  so a SCALE process must receive every client's clip scale with its data
  (``OrderedDict(data=..., clip_scale=...)``, :func:`tff_idp.scaled_client_data`):
  a plain input would otherwise train at scale 1 and spend more than the ledger
  charged. A non-SCALE process refuses a scaled input for the same reason. Shared
  by the per-client and the vectorized client updates.
  """
  is_scaled = isinstance(client_input, Mapping) and set(client_input) == {DATA_KEY, SCALE_KEY}
  if clip_scale and not is_scaled:
    raise ClientInputError(
        "this SCALE process (per_client_clip_scale=True) needs every client's input "
        "wrapped with its clip scale: tff_idp.scaled_client_data(dataset, clip_scale); got "
        f"{type(client_input).__name__}.")
  if not clip_scale and is_scaled:
    raise ClientInputError(
        "this process takes each client's data as is; got a SCALE input (scaled_client_data "
        "is for per_client_clip_scale=True only).")
  return (client_input[DATA_KEY], client_input[SCALE_KEY]) if is_scaled else (client_input, None)


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
                      client_update: Any, stats_at_server: bool = False,
                      presummed: Any = None) -> tff.Computation:
  """The engine's server step with the training metrics TFF's model-delta client work reports.

  ``tff.learning.metrics.sum_then_finalize`` over the clients' unfinalized
  metrics (:func:`tff_idp.engine.in_process_round.build_server_step`).
  ``client_update`` is a :class:`ModelDeltaClientUpdate` or a
  :class:`~tff_idp.idp_fedavg.vectorized.VectorizedModelDeltaUpdate` (both
  give ``stats_type`` and ``metric_finalizers``). ``stats_at_server``: the
  cohort's metrics arrive summed at the server and are only finalized
  (:func:`tff_idp.engine.in_process_round.build_server_step`). ``presummed``:
  the DP mean's :class:`~tff_idp.idp_fedavg.aggregators.PresummedDPMean`
  (the server step then takes the cohort's sums; with ``stats_at_server``).
  """
  if not stats_at_server:
    return in_process_round.build_server_step(
        aggregator, finalizer, client_update.stats_type,
        tff.learning.metrics.sum_then_finalize(client_update.metric_finalizers))
  finalizers = client_update.metric_finalizers

  @tff.tensorflow.computation(client_update.stats_type)
  def finalize(unfinalized):
    return collections.OrderedDict(
        (name, finalizers[name](unfinalized[name])) for name in finalizers)

  @tff.federated_computation(tff.FederatedType(client_update.stats_type, tff.SERVER))
  def finalize_at_server(summed):
    return tff.federated_map(finalize, summed)

  return in_process_round.build_server_step(aggregator, finalizer, client_update.stats_type,
                                            finalize_at_server, stats_at_server=True,
                                            presummed=presummed)


default_parallel_clients = client_execution.default_parallel_clients
check_parallel_clients = client_execution.check_parallel_clients
check_client_execution = client_execution.check_client_execution
resolve_client_execution = client_execution.resolve_client_execution
IN_PROCESS_MIN_PARAMETERS = client_execution.IN_PROCESS_MIN_PARAMETERS
