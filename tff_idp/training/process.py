"""IDP-FedAvg as native TFF ``LearningProcess`` objects (IDP-FedAvg paper, Alg. 2).

Four modes share one round loop and differ only in the process built here
and the sampling rates the driver uses:

* ``nonprivate``: FedAvg, example-weighted mean, no clipping or noise.
* ``uniform``:    DP-FedAvg with adaptive clipping, one rate for everybody.
* ``idp``:        DP-FedAvg with adaptive clipping and σ_SAMPLE; the
                  individual rates live in the sampler (the aggregator is the
                  same as for ``uniform``: sampling is the only difference).
* ``scale``:      uniform sampling, per-group clip scales s_p at one shared
                  noise level (see ``tff_idp.accounting.scale``). Its client
                  data is ``OrderedDict(data=<dataset>, clip_scale=<dataset of one float32>)``
                  (TFF requires client data to be sequences); see
                  ``scaled_client_data``.
"""
from __future__ import annotations

import collections
from typing import Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.aggregators import AdaptiveClipDPMeanFactory

ModelFn = Callable[[], tff.learning.models.VariableModel]


def map_client_results(inner: tff.learning.templates.ClientWorkProcess, side_name: str,
                       side_type, result_fn) -> tff.learning.templates.ClientWorkProcess:
  """A client work whose result is ``result_fn(inner result, side input)``, per client.

  The client data becomes ``OrderedDict(data=<inner's data>, <side_name>=<side_type>)``;
  ``result_fn`` is a ``tff.tensorflow.computation`` of (the inner
  ``ClientResult``, the side input) returning a ``ClientResult``. Shared by
  SCALE's clip-scale weight and the audit's canary clients.
  """
  state_type, weights_type, data_type = inner.next.type_signature.parameter
  client_data_type = tff.FederatedType(
      tff.StructWithPythonType([("data", data_type.member), (side_name, side_type)],
                               collections.OrderedDict), tff.CLIENTS)

  @tff.federated_computation(state_type, weights_type, client_data_type)
  def next_fn(state, weights, client_data):
    output = inner.next(state, weights, client_data.data)
    result = tff.federated_map(result_fn, (output.result, client_data[side_name]))
    return tff.templates.MeasuredProcessOutput(output.state, result, output.measurements)

  return tff.learning.templates.ClientWorkProcess(
      inner.initialize, next_fn, get_hparams_fn=inner.get_hparams,
      set_hparams_fn=inner.set_hparams)


def build_scaled_client_work(model_fn: ModelFn,
                             client_optimizer: tff.learning.optimizers.Optimizer
                             ) -> tff.learning.templates.ClientWorkProcess:
  """Model-delta client work whose update weight is the client's clip scale.

  Wraps TFF's ``build_model_delta_client_work`` (unweighted) and replaces the
  update weight by ``client_data.clip_scale``, which the DP aggregator reads
  as the client's clip scale s_i (SCALE baseline).
  """
  inner = tff.learning.templates.build_model_delta_client_work(
      model_fn, client_optimizer, tff.learning.ClientWeighting.UNIFORM)
  result_type = inner.next.type_signature.result.result.member

  @tff.tensorflow.computation(result_type, tff.SequenceType(np.float32))
  def with_clip_scale(result, clip_scale):
    # TFF requires client data to be sequences, so the scale is a 1-element one.
    scale = clip_scale.reduce(tf.constant(0.0), lambda _, x: x)
    return tff.learning.templates.ClientResult(
        update=result.update, update_weight=scale)

  return map_client_results(inner, "clip_scale", tff.SequenceType(np.float32),
                            with_clip_scale)


def scaled_client_data(dataset: tf.data.Dataset, clip_scale: float
                       ) -> collections.OrderedDict:
  """Client input for the SCALE process: the data and the client's clip scale."""
  return collections.OrderedDict(
      data=dataset,
      clip_scale=tf.data.Dataset.from_tensors(tf.constant(clip_scale, tf.float32)))


def build_idp_fedavg_process(
    model_fn: ModelFn, *,
    client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer,
    noise_multiplier: Optional[float],
    expected_clients_per_round: float,
    per_client_clip_scale: bool = False,
    aggregator_kwargs: Optional[dict] = None,
    audit_canaries: bool = False,
) -> tff.learning.templates.LearningProcess:
  """IDP-FedAvg (Alg. 2) as a ``tff.learning.templates.LearningProcess``.

  Args:
    model_fn: builds a ``tff.learning.models.VariableModel``.
    client_optimizer / server_optimizer: TFF optimizers (e.g. Adam / SGD 1.0).
    noise_multiplier: σ_SAMPLE (or the uniform σ). ``None`` builds plain,
      non-private FedAvg.
    expected_clients_per_round: Σ_i q_i, the DP mean's fixed normaliser.
    per_client_clip_scale: SCALE: client data carries ``clip_scale``.
    aggregator_kwargs: passed to ``AdaptiveClipDPMeanFactory`` (initial_clip,
      target_unclipped_quantile, clip_learning_rate, clipped_count_stddev,
      noise_seed).
    audit_canaries: build for the client-level audit
      (:mod:`tff_idp.audit.client_canaries`): client data becomes
      ``OrderedDict(data=<as without>, canary=<element>)`` and the aggregator
      accepts canary clients (value sum only; normaliser and noise unchanged).
  """
  if noise_multiplier is None:
    if per_client_clip_scale:
      raise ValueError("per-client clip scales need a noise multiplier (SCALE is DP).")
    if audit_canaries:
      raise ValueError("the canary audit needs a DP run (a noise multiplier): a "
                       "non-private run has no DP aggregator to audit.")
    return tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer, server_optimizer,
        client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES,
        # A round whose cohort is empty (or only padding) leaves the model as is.
        model_aggregator=tff.aggregators.MeanFactory(no_nan_division=True))
  aggregator = AdaptiveClipDPMeanFactory(
      noise_multiplier, expected_clients_per_round, **(aggregator_kwargs or {}),
      accept_canaries=audit_canaries)
  if not per_client_clip_scale and not audit_canaries:
    return tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer, server_optimizer,
        client_weighting=tff.learning.ClientWeighting.UNIFORM,
        model_aggregator=aggregator)
  if per_client_clip_scale:
    client_work = build_scaled_client_work(model_fn, client_optimizer)
  else:
    client_work = tff.learning.templates.build_model_delta_client_work(
        model_fn, client_optimizer, tff.learning.ClientWeighting.UNIFORM)
  if audit_canaries:
    from tff_idp.audit import client_canaries  # pylint: disable=g-import-not-at-top
    client_work = client_canaries.build_canary_client_work(client_work)
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(model_fn)
  initial_weights_fn = _initial_model_weights_fn(model_fn)
  return tff.learning.templates.compose_learning_process(
      initial_weights_fn,
      tff.learning.templates.build_broadcast_process(weights_type),
      client_work,
      aggregator.create(weights_type.trainable, tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                              weights_type))


def _initial_model_weights_fn(model_fn: ModelFn):

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    model = model_fn()
    return tff.learning.models.ModelWeights.from_model(model)

  return initial_model_weights_fn
