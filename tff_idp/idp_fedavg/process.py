"""IDP-FedAvg as native TFF ``LearningProcess`` objects (IDP-FedAvg paper, Alg. 2).

Four modes share one round loop and differ only in the process built here
and the sampling rates the driver uses:

* ``nonprivate``: FedAvg, example-weighted mean, no clipping or noise.
* ``uniform``:    DP-FedAvg with adaptive clipping, one rate for everybody.
* ``idp``:        DP-FedAvg with adaptive clipping and σ_SAMPLE; the
                  individual rates live in the sampler (the aggregator is the
                  same as for ``uniform``: sampling is the only difference).
* ``scale``:      uniform sampling, per-group clip scales s_p at one shared
                  noise level (see ``tff_idp.accounting.client.scale``). Its client
                  data is ``OrderedDict(data=<dataset>, clip_scale=<dataset of one float32>)``
                  (TFF requires client data to be sequences); see
                  ``scaled_client_data``.
"""
from __future__ import annotations

import collections
import collections.abc
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.engine.tff_composition import CLIENT_LOOP
from tff_idp.engine.tff_composition import map_client_results
from tff_idp.engine import in_process_round
from tff_idp.engine import state_functions
from tff_idp.engine import stock_keywords
from tff_idp.errors import ToolkitValueError
from tff_idp.idp_fedavg.aggregators import AdaptiveClipDPMeanFactory
from tff_idp.idp_fedavg import in_process
from tff_idp.idp_fedavg import vectorized

ModelFn = Callable[[], tff.learning.models.VariableModel]

def build_scaled_client_work(model_fn: ModelFn,
                             client_optimizer: tff.learning.optimizers.Optimizer,
                             metrics_aggregator: Optional[Any] = None,
                             ) -> tff.learning.templates.ClientWorkProcess:
  """Model-delta client work whose update weight is the client's clip scale.

  Wraps TFF's ``build_model_delta_client_work`` (unweighted) and replaces the
  update weight by ``client_data.clip_scale``, which the DP aggregator reads
  as the client's clip scale s_i (SCALE baseline).
  """
  inner = tff.learning.templates.build_model_delta_client_work(
      model_fn, client_optimizer, tff.learning.ClientWeighting.UNIFORM,
      metrics_aggregator=metrics_aggregator, loop_implementation=CLIENT_LOOP)
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
  """Client input for the SCALE process: the data and the client's clip scale s_i ∈ (0, 1].

  A scale outside (0, 1] (SCALE's s_i = C_i / C never exceeds 1) is refused
  here, in one line, rather than at the round (issue 51).
  """
  if isinstance(dataset, collections.abc.Mapping) and "clip_scale" in dataset:
    raise ToolkitValueError("scaled_client_data got a SCALE client input already (data and "
                            "clip_scale); pass the client's tf.data.Dataset itself.")
  if not isinstance(dataset, tf.data.Dataset):
    raise ToolkitValueError(f"scaled_client_data takes the client's tf.data.Dataset, got "
                            f"{type(dataset).__name__}.")
  scale = float(clip_scale)
  if not 0.0 < scale <= 1.0:
    raise ToolkitValueError(f"clip_scale={clip_scale!r} must be in (0, 1]: SCALE's s_i is the "
                            "client's clip bound over the largest one (get_group_clip_scales).")
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
    canary_client_work: Optional[Callable[[tff.learning.templates.ClientWorkProcess],
                                          tff.learning.templates.ClientWorkProcess]] = None,
    metrics_aggregator: Optional[Any] = None,
    model_aggregator: Optional[Any] = None,
    client_weighting: Optional[Any] = None,
    client_execution: Optional[str] = None,
    parallel_clients: Optional[int] = None,
) -> tff.learning.templates.LearningProcess:
  """IDP-FedAvg (Alg. 2) as a native ``tff.learning.templates.LearningProcess``, whatever the model.

  Every client trains as a TFF client computation, so the result composes
  with stock TFF (``tff.federated_computation``, a ``LearningProcess``
  rebuild, ``tff.learning.programs.train_model``). For the faster
  in-process rounds when you drive ``next`` from Python, use
  :func:`build_idp_fedavg_driver_process` (issue 31 item 7).

  Args:
    model_fn: builds a ``tff.learning.models.VariableModel``.
    client_optimizer / server_optimizer: TFF optimizers (e.g. Adam / SGD 1.0).
    noise_multiplier: σ_SAMPLE (or the uniform σ). ``None`` builds plain,
      non-private FedAvg.
    expected_clients_per_round: Σ_i q_i, the DP mean's fixed normaliser.
    per_client_clip_scale: SCALE: every client's data is
      ``scaled_client_data(dataset, clip_scale)``.
    aggregator_kwargs: passed to ``AdaptiveClipDPMeanFactory`` (initial_clip,
      target_unclipped_quantile, clip_learning_rate, clipped_count_stddev,
      noise_seed).
    canary_client_work: the client-level audit's hook (see
      :func:`build_idp_fedavg_driver_process`).
    metrics_aggregator: as in ``tff.learning.algorithms.build_weighted_fed_avg``
      (the clients' training metrics; they are not noised, see docs/api.md).
    model_aggregator / client_weighting: stock keywords for the non-private run
      (``noise_multiplier=None``) only. A DP run refuses a model aggregator (it
      would replace the DP mean) and any weighting but ``UNIFORM``.
    client_execution / parallel_clients: refused here, with the builder they
      belong to (:func:`build_idp_fedavg_driver_process`).
  """
  builder = "build_idp_fedavg_process"
  stock_keywords.refuse_driver_keywords(builder, "build_idp_fedavg_driver_process",
                                        client_execution=client_execution,
                                        parallel_clients=parallel_clients)
  if noise_multiplier is not None:
    stock_keywords.refuse_model_aggregator(
        builder, model_aggregator, "the adaptive-clip DP mean (AdaptiveClipDPMeanFactory)")
    stock_keywords.check_client_weighting(builder, client_weighting)
  return _build_tff_process(
      model_fn, client_optimizer=client_optimizer, server_optimizer=server_optimizer,
      noise_multiplier=noise_multiplier,
      expected_clients_per_round=expected_clients_per_round,
      per_client_clip_scale=per_client_clip_scale, aggregator_kwargs=aggregator_kwargs,
      canary_client_work=canary_client_work, metrics_aggregator=metrics_aggregator,
      model_aggregator=model_aggregator, client_weighting=client_weighting)


def build_idp_fedavg_driver_process(
    model_fn: ModelFn, *,
    client_optimizer: tff.learning.optimizers.Optimizer,
    server_optimizer: tff.learning.optimizers.Optimizer,
    noise_multiplier: Optional[float],
    expected_clients_per_round: float,
    per_client_clip_scale: bool = False,
    aggregator_kwargs: Optional[dict] = None,
    canary_client_work: Optional[Callable[[tff.learning.templates.ClientWorkProcess],
                                          tff.learning.templates.ClientWorkProcess]] = None,
    client_execution: str = "auto",
    parallel_clients: Optional[int] = None,
) -> "tff.learning.templates.LearningProcess | in_process.InProcessLearningProcess":
  """IDP-FedAvg (Alg. 2) for rounds driven from Python: the fast in-process path where it pays.

  What the toolkit's runners, experiments and :class:`~tff_idp.engine.driver.RoundDriver`
  build. With ``client_execution="tff"`` (or ``"auto"`` on a small model or
  with canaries) it returns the native ``LearningProcess`` of
  :func:`build_idp_fedavg_process`; otherwise an
  :class:`~tff_idp.engine.in_process_round.InProcessLearningProcess`, which
  has the same ``initialize`` / ``next(state, client_data)`` / state and
  equal rounds (within float tolerance), but is **not** a TFF computation:
  call its ``next`` from Python, not inside a ``tff.federated_computation``
  or ``train_model``. Its ``reference`` holds the TFF process's state functions
  (:mod:`tff_idp.engine.state_functions`), built without tracing the TFF round
  it does not run. Arguments as :func:`build_idp_fedavg_process`, plus:

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
    canary_client_work: the hook a client-level audit plugs into: a wrapper
      of the client work that adds canary clients (e.g.
      :func:`tff_idp.audit.client_canaries.build_canary_client_work`, whose
      client data is ``OrderedDict(data=<as without>, canary=<element>)``);
      the aggregator then accepts canary clients (value sum only; normaliser
      and noise unchanged).
    client_execution: ``"tff"`` runs the clients' local training as TFF
      client computations; ``"in_process"`` trains them in this Python
      process and runs the same aggregator and server update in TFF
      (:mod:`tff_idp.idp_fedavg.in_process`: same state, same results within
      float tolerance, faster). ``"vectorized"`` trains the whole cohort at
      once on stacked weights (:mod:`tff_idp.idp_fedavg.vectorized`; models
      of Dense layers made by :func:`tff_idp.models.tff_model_fn`), with the
      same aggregator and server update in TFF. Neither with
      ``canary_client_work``. The default ``"auto"`` picks the way the
      experiments' ``--client_execution=auto`` does
      (:func:`~tff_idp.idp_fedavg.in_process.resolve_client_execution`): TFF
      client computations with canaries, vectorized where the model is
      served, in process from 10,000 trainable parameters up (the paper's
      CNN), TFF client computations for other small models. Build an
      in-process process after any other TFF process you build: Keras
      invalidates models made outside a graph once another model is made
      inside one, as every TFF builder does.
    parallel_clients: in-process only: clients trained at once, each on its
      own model copy (default :func:`tff_idp.idp_fedavg.in_process.default_parallel_clients`);
      the vectorized execution trains the cohort at once and ignores it.
  """
  client_execution = in_process_round.resolve_for_model(
      client_execution, model_fn,
      "the audit's canary clients" if canary_client_work is not None else "",
      parallel_clients, vectorizable=vectorized.vectorizable(model_fn))
  if client_execution == "tff":
    return _build_tff_process(
        model_fn, client_optimizer=client_optimizer, server_optimizer=server_optimizer,
        noise_multiplier=noise_multiplier,
        expected_clients_per_round=expected_clients_per_round,
        per_client_clip_scale=per_client_clip_scale, aggregator_kwargs=aggregator_kwargs,
        canary_client_work=canary_client_work)
  if noise_multiplier is None and per_client_clip_scale:
    raise ValueError("per-client clip scales need a noise multiplier (SCALE is DP).")
  factory = _model_aggregator(noise_multiplier, expected_clients_per_round, aggregator_kwargs)
  weighting = (tff.learning.ClientWeighting.NUM_EXAMPLES if noise_multiplier is None
               else tff.learning.ClientWeighting.UNIFORM)
  initial_weights_fn = _initial_model_weights_fn(model_fn)
  weights_type = initial_weights_fn.type_signature.result
  aggregator = factory.create(weights_type.trainable, tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                                     weights_type)
  # The state functions of the TFF process (same state), without tracing its round.
  process = state_functions.compose_state_functions(
      initial_weights_fn, tff.learning.templates.build_broadcast_process(weights_type),
      state_functions.model_delta_client_work_state(client_optimizer), aggregator, finalizer)
  if client_execution == "vectorized":
    cohort_update = vectorized.VectorizedModelDeltaUpdate(
        model_fn, client_optimizer, weighting, clip_scale=per_client_clip_scale)
    # The DP mean clips and sums the stacked cohort here and noises the sums in
    # TFF (the same mechanism, issue 35).
    presummed = (factory.create_presummed(weights_type.trainable)
                 if isinstance(factory, AdaptiveClipDPMeanFactory) else None)
    # The non-private mean takes the cohort as one client, its weighted mean (issue 49).
    return in_process.InProcessLearningProcess(
        process, [], in_process.build_server_step(aggregator, finalizer, cohort_update,
                                                  stats_at_server=True, presummed=presummed),
        cohort_update=cohort_update, presummed_aggregation=presummed,
        collapse_weighted_mean=noise_multiplier is None)
  copies = parallel_clients or in_process.default_parallel_clients()
  client_updates = [in_process.ModelDeltaClientUpdate(model_fn, client_optimizer, weighting,
                                                     clip_scale=per_client_clip_scale)
                    for _ in range(copies)]
  server_step = in_process.build_server_step(aggregator, finalizer, client_updates[0])
  return in_process.InProcessLearningProcess(process, client_updates, server_step)


def _model_aggregator(noise_multiplier: Optional[float], expected_clients_per_round: float,
                      aggregator_kwargs: Optional[dict], accept_canaries: bool = False):
  """The model-update aggregator of both client executions (one place, so they cannot drift).

  Non-private: the example-weighted mean (an empty cohort, or only padding,
  leaves the model as is). DP: ``AdaptiveClipDPMeanFactory``.
  """
  if noise_multiplier is None:
    return tff.aggregators.MeanFactory(no_nan_division=True)
  return AdaptiveClipDPMeanFactory(noise_multiplier, expected_clients_per_round,
                                   **(aggregator_kwargs or {}), accept_canaries=accept_canaries)


def _build_tff_process(
    model_fn: ModelFn, *, client_optimizer, server_optimizer, noise_multiplier,
    expected_clients_per_round, per_client_clip_scale, aggregator_kwargs,
    canary_client_work, metrics_aggregator=None, model_aggregator=None,
    client_weighting=None) -> tff.learning.templates.LearningProcess:
  """``build_idp_fedavg_process`` with the clients as TFF client computations.

  ``model_aggregator`` and ``client_weighting`` reach the non-private FedAvg
  only (a DP run refuses them first); ``metrics_aggregator`` reaches the
  client work of every run.
  """
  audit_canaries = canary_client_work is not None
  if noise_multiplier is None:
    if per_client_clip_scale:
      raise ValueError("per-client clip scales need a noise multiplier (SCALE is DP).")
    if audit_canaries:
      raise ValueError("the canary audit needs a DP run (a noise multiplier): a "
                       "non-private run has no DP aggregator to audit.")
    return tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer, server_optimizer,
        client_weighting=client_weighting or tff.learning.ClientWeighting.NUM_EXAMPLES,
        model_aggregator=(model_aggregator
                          or _model_aggregator(None, expected_clients_per_round, None)),
        metrics_aggregator=metrics_aggregator, loop_implementation=CLIENT_LOOP)
  aggregator = _model_aggregator(noise_multiplier, expected_clients_per_round,
                                 aggregator_kwargs, accept_canaries=audit_canaries)
  if not per_client_clip_scale and not audit_canaries:
    return tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer, server_optimizer,
        client_weighting=tff.learning.ClientWeighting.UNIFORM,
        model_aggregator=aggregator, metrics_aggregator=metrics_aggregator,
        loop_implementation=CLIENT_LOOP)
  if per_client_clip_scale:
    client_work = build_scaled_client_work(model_fn, client_optimizer, metrics_aggregator)
  else:
    client_work = tff.learning.templates.build_model_delta_client_work(
        model_fn, client_optimizer, tff.learning.ClientWeighting.UNIFORM,
        metrics_aggregator=metrics_aggregator, loop_implementation=CLIENT_LOOP)
  if audit_canaries:
    client_work = canary_client_work(client_work)
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
