"""IDP-FedAvg's cohort-vectorized client update: a whole round's local training at once (issue 35).

IDP-FedAvg Alg. 2, the clients' ``LocalUpdate`` (ClientUpdate, lines 12-17),
for every sampled client of a round in one computation per chunk of the
cohort, instead of one ``tf.function`` call per client
(:class:`tff_idp.idp_fedavg.in_process.ModelDeltaClientUpdate`). Each client's
result is what it is alone, within float tolerance
(``tests/idp_fedavg/test_vectorized.py``):

* its own data, in its own order: :class:`~tff_idp.engine.cohort_arrays.ClientArrays`
  orders come from the client's own shuffle seed (one ``tf.data`` pipeline
  per cohort, :func:`~tff_idp.engine.cohort_arrays.cohort_orders`); a
  ``tf.data.Dataset`` input is trained in its iteration order;
* its own number of local steps and epochs, its own gradient, optimizer
  state and update (Δ = initial − final, zeroed with weight 0 and zero metrics
  if any entry is not finite, as TFF's model-delta client work): the shared
  stacked loop :func:`tff_idp.engine.stacked_training.local_steps`;
* its own weight and metrics: weight 1 (``UNIFORM``), its example count
  (``NUM_EXAMPLES``) or its SCALE clip scale.

There is no randomness in this local training (dense models, no Dropout) and
no privacy step. With DP, the driver process's round hands the cohort's
updates and weights to the DP mean's
:class:`~tff_idp.idp_fedavg.aggregators.PresummedDPMean`: the same per-client
clipping (:func:`~tff_idp.idp_fedavg.aggregators.clip_client_update`) on the
stacked cohort, summed in this process, then the same noising computation
(noise once per round from the state's seed, the adaptive clip's noised
count) in the TFF server step
(:func:`tff_idp.engine.in_process_round.build_server_step`). The client optimizer is any element-wise
``tff.learning.optimizers`` optimizer (SGD with or without momentum, Adam,
...).

Models served: :class:`~tff_idp.engine.stacked_dense.StackedDenseModel`
(the logistic regression and the MLP of :mod:`tff_idp.models`, built by
:func:`tff_idp.models.tff_model_fn`, which records its Keras builder and head
on the ``model_fn``); :func:`vectorizable` says whether a ``model_fn`` is one.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.engine import cohort_arrays
from tff_idp.engine import cohort_stack
from tff_idp.engine import stacked_training
from tff_idp.idp_fedavg import in_process
from tff_idp.errors import ClientInputError

ModelFn = Callable[[], tff.learning.models.VariableModel]
SCALE_KEY = in_process.SCALE_KEY
DATA_KEY = in_process.DATA_KEY
_METRIC_KEYS = ("loss", "num_examples", "num_batches")


stacked_model_of = stacked_training.stacked_model_of
vectorizable = stacked_training.vectorizable


class VectorizedModelDeltaUpdate:
  """A cohort's IDP-FedAvg local training in one computation per chunk (module docstring).

  Called as ``update(hparams, initial_weights, client_inputs)`` with the
  client work's state as ``hparams`` and the round's client inputs; returns
  one ``(Δ as numpy arrays, update weight, unfinalized metrics)`` per client,
  in order, as :class:`~tff_idp.idp_fedavg.in_process.ModelDeltaClientUpdate`
  returns for one client. ``max_chunk_bytes`` / ``max_chunk_clients`` bound a
  chunk's memory (:func:`tff_idp.engine.cohort_stack.plan_chunks`).
  """

  def __init__(self, model_fn: ModelFn, optimizer: tff.learning.optimizers.Optimizer,
               weighting: tff.learning.ClientWeighting, clip_scale: bool = False,
               max_chunk_bytes: int = cohort_stack.DEFAULT_MAX_CHUNK_BYTES,
               max_chunk_clients: int = cohort_stack.DEFAULT_MAX_CHUNK_CLIENTS):
    served = stacked_model_of(model_fn)
    if served is None:
      raise ValueError("client_execution='vectorized' serves models of Dense layers built by "
                       "tff_idp.models.tff_model_fn (the logistic regression, the MLP); use "
                       "client_execution='in_process' or 'tff' for this model.")
    self._stacked, self._head = served
    self._optimizer, self._weighting = optimizer, weighting
    self._clip_scale = bool(clip_scale)
    self._max_chunk_bytes, self._max_chunk_clients = max_chunk_bytes, max_chunk_clients
    with tf.Graph().as_default():
      model = model_fn()
      input_spec = model.input_spec
      metrics = model.report_local_unfinalized_metrics()
      self.metric_finalizers = model.metric_finalizers()
      self._weight_specs = [tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables]
      self._widest = max([int(np.prod(v.shape[1:])) for v in model.trainable_variables]
                         + [1])
    self._accuracy_key = stacked_training.ACCURACY_METRIC[self._head]
    if set(metrics) != {self._accuracy_key, *_METRIC_KEYS}:
      raise ValueError(f"client_execution='vectorized' computes the metrics "
                       f"{[self._accuracy_key, *_METRIC_KEYS]}; this model reports "
                       f"{list(metrics)}. Use client_execution='in_process'.")
    self._metric_names = list(metrics)
    self.stats_type = tff.types.tensorflow_to_type(tf.nest.map_structure(
        lambda t: tf.TensorSpec(t.shape, t.dtype), metrics))
    self.metrics_type = self.stats_type
    # One trace for every cohort: the chunk's clients, steps and examples are dynamic.
    self._train = tf.function(self._train_fn, input_signature=self._signature(input_spec))

  # -- the computation --------------------------------------------------------------------

  def _signature(self, input_spec: Mapping[str, tf.TensorSpec]) -> list:
    """``_train_fn``'s input signature: hparams, weights, examples [rows, ...], index, mask."""
    examples = stacked_training.examples_spec(input_spec)
    hparams = self._optimizer.get_hparams(self._optimizer.initialize(self._weight_specs))
    hparams_spec = tf.nest.map_structure(
        lambda v: tf.TensorSpec.from_tensor(tf.convert_to_tensor(v)), hparams)
    return [hparams_spec, list(self._weight_specs), examples,
            stacked_training.STEPS_SPEC, stacked_training.MASK_SPEC]

  def _train_fn(self, hparams, initial_weights, examples, index, mask):
    """One chunk: ``(Δ stacked, per-client statistics)`` after every client's local steps."""
    return stacked_training.local_steps(self._stacked, self._head, self._optimizer,
                                        initial_weights, examples, index, mask,
                                        hparams=hparams)

  # -- inputs -----------------------------------------------------------------------------

  def _unwrap(self, client_input: Any) -> tuple[Any, Optional[float]]:
    """(data, clip scale or None), refusing what the per-client update refuses."""
    data, scale_input = in_process.split_scaled_input(client_input, self._clip_scale)
    if not isinstance(data, (tf.data.Dataset, cohort_arrays.ClientArrays)):
      raise ClientInputError(
          "the vectorized client execution takes each client's tf.data.Dataset or "
          f"tff_idp.engine.cohort_arrays.ClientArrays; got {type(data).__name__}.")
    return data, (None if scale_input is None else _scale_value(scale_input))

  def _batches(self, data: Sequence[Any]) -> tuple[list, list]:
    """Every client's examples and local-step batches (index arrays into its examples)."""
    examples: list = [None] * len(data)
    batches: list = [None] * len(data)
    arrays = [i for i, d in enumerate(data) if isinstance(d, cohort_arrays.ClientArrays)]
    orders = cohort_arrays.cohort_orders([data[i] for i in arrays])
    for i, order in zip(arrays, orders):
      examples[i] = data[i].examples
      batches[i] = cohort_stack.order_batches(order, data[i].batch_size)
    for i, d in enumerate(data):
      if examples[i] is None:
        examples[i], batches[i] = stacked_training.dataset_batches(d)
    return examples, batches

  def _bytes_per_client(self, batches: Sequence[list]) -> int:
    return stacked_training.bytes_per_client(self._weight_specs, batches, self._widest)

  # -- the call ---------------------------------------------------------------------------

  def __call__(self, hparams: Any, initial_weights: Any, client_inputs: Sequence[Any]
               ) -> list[tuple[Any, np.float32, Any]]:
    """Per client, in order: (Δ as numpy arrays, update weight, unfinalized metrics)."""
    unwrapped = [self._unwrap(c) for c in client_inputs]
    data = [d for d, _ in unwrapped]
    if not data:
      return []
    hparams = tf.nest.map_structure(tf.convert_to_tensor, hparams)
    trainable = [tf.convert_to_tensor(w) for w in _trainable_of(initial_weights)]
    examples, batches = self._batches(data)
    results: list = [None] * len(data)
    chunks = cohort_stack.plan_chunks([len(b) for b in batches],
                                      self._bytes_per_client(batches),
                                      self._max_chunk_bytes, self._max_chunk_clients)
    for chunk in chunks:
      steps = cohort_stack.stack_steps([examples[i] for i in chunk],
                                       [batches[i] for i in chunk])
      delta, stats = self._train(
          hparams, trainable, {k: tf.constant(steps.examples[k]) for k in ("x", "y")},
          tf.constant(steps.index), tf.constant(steps.mask))
      delta = [d.numpy() for d in delta]
      stats = {k: v.numpy() for k, v in stats.items()}
      for j, i in enumerate(chunk):
        results[i] = self._client_result(
            [d[j] for d in delta], {k: v[j] for k, v in stats.items()}, unwrapped[i][1])
    return results

  def _client_result(self, delta: list, stats: Mapping[str, Any], scale: Optional[float]
                     ) -> tuple[list, np.float32, collections.OrderedDict]:
    finite = bool(stats["finite"])
    count = np.float32(stats["count"]) if finite else np.float32(0.0)
    examples = np.int64(stats["count"]) if finite else np.int64(0)
    values = {
        self._accuracy_key: [np.float32(stats["correct_total"] if finite else 0.0), count],
        "loss": [np.float32(stats["loss_total"] if finite else 0.0), count],
        "num_examples": [examples],
        "num_batches": [np.int64(stats["num_batches"]) if finite else np.int64(0)]}
    metrics = collections.OrderedDict((k, values[k]) for k in self._metric_names)
    if scale is not None:
      weight = np.float32(scale)
    elif not finite:
      weight = np.float32(0.0)
    elif self._weighting == tff.learning.ClientWeighting.NUM_EXAMPLES:
      weight = np.float32(examples)
    else:
      weight = np.float32(1.0)
    return delta, weight, metrics


def _trainable_of(weights: Any) -> list:
  """The trainable weights of a ``ModelWeights`` (or of a plain list of them)."""
  trainable = getattr(weights, "trainable", weights)
  return list(trainable)


def _scale_value(value: Any) -> float:
  """SCALE's clip scale: a number, or the one element of its 1-element dataset (the last)."""
  if not isinstance(value, tf.data.Dataset):
    return float(value)
  last = None
  for last in value:
    pass
  if last is None:
    raise ValueError("a SCALE client input's clip_scale dataset is empty; it must hold "
                     "the client's clip scale (tff_idp.idp_fedavg.process.scaled_client_data).")
  return float(last)
