"""APES / S-APES and their baselines as one TFF ``LearningProcess`` (APES paper Alg. 1-2).

A round (Alg. 1, with the randomizer of the chosen mechanism):

1. broadcast the global model w;
2. every client runs local FedProx from w (μ = ``proximal_strength``, SGD at
   ``client_learning_rate``, ``local_epochs`` passes over its data) and
   randomizes its model delta with its own ε_i and secret seed, inside the
   client computation (:mod:`tff_idp.apes.client_work`);
3. the server averages the reports and, for APES / S-APES, de-biases the
   average with the budget multiset (:mod:`tff_idp.apes.aggregator`);
4. w ← w − η_s·û with SGD at ``server_learning_rate`` (1 adds the
   de-biased average delta, as the reference code does).

Mechanisms (:data:`tff_idp.apes.client_work.MECHANISMS`): "none"
(non-private FedProx, plain mean), "clip_laplace" (APES), "sparse_clip_laplace"
(S-APES with a secret random b-subset, ``keep=b``; the default S-APES),
"sparse_clip_laplace_top_b" (S-APES as published, post-top-b: sound only at
d·ε_i/b locally, see :mod:`tff_idp.apes.sparsify`), "laplace" (PLDP / UniS:
Laplace(2C/ε_i), plain mean; PLDP and UniS differ only in accounting).

Calling a round::

    process = build_apes_process(model_fn, mechanism="clip_laplace", clip=0.1,
                                 epsilons=eps, client_learning_rate=1.0)
    randomness = PrivacyRandomness.secret()          # once per run (checkpoint it)
    state = process.initialize()
    for round_num in range(rounds):
      inputs = make_round_inputs(datasets, eps, client_ids, randomness, round_num)
      # = [make_client_input(datasets[i], eps[i],
      #                      client_seed(randomness, client_ids[i], round_num)) ...]
      output = process.next(state, inputs)
      state = output.state

``output.metrics["aggregator"]`` holds the number of reports; there are no
client training metrics (they are not randomized; evaluate the global
model on held-out data instead).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.errors import ToolkitValueError
from tff_idp.apes import clip_laplace
from tff_idp.apes.aggregator import ShuffledPersonalizedMeanFactory
from tff_idp.apes.client_work import (SPARSE_SELECTION, ModelFn, build_ldp_client_work,
                                     check_mechanism)
from tff_idp.apes.debias import DEFAULT_GRID_POINTS
from tff_idp.apes import vectorized
from tff_idp.engine import in_process_round
from tff_idp.engine import stock_keywords


def _sparse_debias_for(mechanism: str, sparse_debias: Optional[str]) -> str:
  """The S-APES de-bias mode: the caller's, or the one that fits the selection."""
  selection = SPARSE_SELECTION.get(mechanism)
  if sparse_debias is None:
    return "threshold" if selection == "top_b" else "rescale"
  if selection == "random" and sparse_debias != "rescale":
    raise ToolkitValueError(
        f"sparse_debias={sparse_debias!r} does not fit mechanism='sparse_clip_laplace': its "
        "random b-subset keeps each coordinate with probability b/d, so 'rescale' is its "
        "exact de-bias ('threshold' approximates the post-top-b selection of "
        "'sparse_clip_laplace_top_b'). Leave sparse_debias unset.")
  return sparse_debias


def build_apes_process(
    model_fn: ModelFn, *, mechanism: str, client_learning_rate: Optional[float] = None,
    client_optimizer: Optional[tff.learning.optimizers.Optimizer] = None,
    server_optimizer: Optional[tff.learning.optimizers.Optimizer] = None,
    clip: Optional[float] = None, epsilons: Optional[Sequence[float]] = None,
    keep: Optional[int] = None, server_learning_rate: float = 1.0,
    proximal_strength: float = 0.01, local_epochs: int = 1,
    num_reports: Optional[int] = None, sparse_debias: Optional[str] = None,
    grid_points: int = DEFAULT_GRID_POINTS,
    metrics_aggregator: Optional[Any] = None,
    model_aggregator: Optional[Any] = None,
    client_weighting: Optional[Any] = None,
    client_execution: Optional[str] = None,
) -> tff.learning.templates.LearningProcess:
  """APES (Alg. 1), S-APES (Alg. 2) or a baseline as a ``tff.learning.templates.LearningProcess``.

  Args:
    model_fn: builds a ``tff.learning.models.VariableModel``.
    mechanism: "none", "clip_laplace", "sparse_clip_laplace" (S-APES with a
      secret random b-subset, sound at ε_i locally), "sparse_clip_laplace_top_b"
      (the paper's post-top-b; only d·ε_i/b locally) or "laplace".
    client_learning_rate: the clients' SGD learning rate; or
    client_optimizer: any TFF client optimizer, as the other families' builders
      take (issue 51; exactly one of the two). Local training happens before
      the clip and the randomizer, so the optimizer does not change what a
      report reveals.
    server_optimizer: any TFF server optimizer (post-processing of the
      de-biased mean); default server SGD at ``server_learning_rate``.
    clip: C > 0, the per-coordinate clip bound (all but "none").
    epsilons: the population's budget multiset, one per client ("clip_laplace"
      and "sparse_clip_laplace": the de-bias needs it; ignored otherwise).
    keep: b (the S-APES mechanisms only).
    server_learning_rate: server SGD learning rate (1: add the mean delta).
    proximal_strength: FedProx μ (0.01 in the paper's code).
    local_epochs: passes over each client's dataset per round.
    num_reports: static n of the mean (full participation); ``None``: the
      number of reports received.
    sparse_debias: S-APES de-bias; ``None`` picks the one that fits the
      selection: "rescale" (exact) for "sparse_clip_laplace", "threshold"
      for "sparse_clip_laplace_top_b" (see :mod:`tff_idp.apes.debias`).
      "threshold" with the random selection is refused.
    grid_points: size of the de-bias grid.

  Client data: :func:`tff_idp.apes.client_work.make_client_input`.
  Stock TFF keywords (issue 51): ``client_weighting`` may only be ``UNIFORM``;
  ``model_aggregator``, ``metrics_aggregator`` and ``client_execution`` (which
  belongs to :func:`build_apes_driver_process`) are refused with the reason.
  """
  builder = "build_apes_process"
  stock_keywords.refuse_driver_keywords(builder, "build_apes_driver_process",
                                        client_execution=client_execution)
  stock_keywords.refuse_model_aggregator(
      builder, model_aggregator, "the de-biased mean of the clients' locally randomized "
      "updates, whose de-bias needs every report's ε")
  stock_keywords.check_client_weighting(builder, client_weighting)
  stock_keywords.refuse_metrics_aggregator(
      builder, metrics_aggregator, "APES's client work reports its own training metrics, "
      "which its vectorized rounds reproduce exactly")
  if (client_learning_rate is None) == (client_optimizer is None):
    raise ToolkitValueError(
        f"{builder}: give client_learning_rate (client SGD) or client_optimizer (any TFF "
        "optimizer), exactly one of them.")
  if server_optimizer is not None and server_learning_rate != 1.0:
    raise ToolkitValueError(
        f"{builder}: server_learning_rate={server_learning_rate!r} applies to the default "
        "server SGD; with server_optimizer, set its learning rate there and drop "
        "server_learning_rate.")
  return _build_parts(
      model_fn, mechanism=mechanism, client_learning_rate=client_learning_rate, clip=clip,
      epsilons=epsilons, keep=keep, server_learning_rate=server_learning_rate,
      proximal_strength=proximal_strength, local_epochs=local_epochs,
      num_reports=num_reports, sparse_debias=sparse_debias, grid_points=grid_points,
      client_optimizer=client_optimizer, server_optimizer=server_optimizer).process


@dataclasses.dataclass(frozen=True)
class _ApesParts:
  """An APES process and the pieces its vectorized twin shares with it."""
  process: tff.learning.templates.LearningProcess
  aggregator: tff.templates.AggregationProcess
  finalizer: tff.learning.templates.FinalizerProcess
  client_optimizer: tff.learning.optimizers.Optimizer


def _build_parts(model_fn: ModelFn, *, mechanism: str, client_learning_rate: Optional[float],
                 clip: Optional[float], epsilons: Optional[Sequence[float]],
                 keep: Optional[int], server_learning_rate: float, proximal_strength: float,
                 local_epochs: int, num_reports: Optional[int], sparse_debias: Optional[str],
                 grid_points: int, client_optimizer: Optional[Any] = None,
                 server_optimizer: Optional[Any] = None) -> _ApesParts:
  """The checked settings' TFF process (:func:`build_apes_process`) and its parts.

  ``client_optimizer``/``server_optimizer`` replace the SGD of
  ``client_learning_rate``/``server_learning_rate`` where given.
  """
  check_mechanism(mechanism)
  if client_optimizer is None and not (
      isinstance(client_learning_rate, (int, float)) and client_learning_rate > 0):
    raise ToolkitValueError(f"client_learning_rate={client_learning_rate!r} must be > 0.")
  if not (isinstance(server_learning_rate, (int, float)) and server_learning_rate > 0):
    raise ToolkitValueError(f"server_learning_rate={server_learning_rate!r} must be > 0.")
  debiased = mechanism == "clip_laplace" or mechanism in SPARSE_SELECTION
  sparse_debias = _sparse_debias_for(mechanism, sparse_debias)
  if debiased and epsilons is None:
    raise ToolkitValueError(
        f"mechanism={mechanism!r} needs epsilons, the population's budget multiset: the "
        "server de-biases the mean with it.")
  if epsilons is not None:
    clip_laplace.check_epsilon(np.asarray(epsilons, np.float64).ravel(), "epsilons")
  if client_optimizer is None:
    client_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=client_learning_rate)
  client_work = build_ldp_client_work(
      model_fn, mechanism=mechanism, client_optimizer=client_optimizer,
      clip=clip, keep=keep, proximal_strength=proximal_strength, local_epochs=local_epochs)
  if debiased:
    factory = ShuffledPersonalizedMeanFactory(
        clip, epsilons, keep=keep, sparse_debias=sparse_debias, num_reports=num_reports,
        grid_points=grid_points)
  else:
    factory = ShuffledPersonalizedMeanFactory(debias=False, num_reports=num_reports)
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(model_fn)

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  aggregator = tff.aggregators.as_weighted_aggregator(factory).create(
      client_work.next.type_signature.result.result.member.update,
      tff.TensorType(np.float32))
  if server_optimizer is None:
    server_optimizer = tff.learning.optimizers.build_sgdm(learning_rate=server_learning_rate)
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                                     weights_type)
  process = tff.learning.templates.compose_learning_process(
      initial_model_weights_fn,
      tff.learning.templates.build_broadcast_process(weights_type),
      client_work, aggregator, finalizer)
  return _ApesParts(process, aggregator, finalizer, client_optimizer)


def build_apes_driver_process(
    model_fn: ModelFn, *, mechanism: str, client_learning_rate: float,
    client_execution: str = "auto", clip: Optional[float] = None,
    epsilons: Optional[Sequence[float]] = None, keep: Optional[int] = None,
    server_learning_rate: float = 1.0, proximal_strength: float = 0.01,
    local_epochs: int = 1, num_reports: Optional[int] = None,
    sparse_debias: Optional[str] = None, grid_points: int = DEFAULT_GRID_POINTS,
) -> "tff.learning.templates.LearningProcess | in_process_round.InProcessLearningProcess":
  """:func:`build_apes_process`, with the users' client work run where ``client_execution`` says.

  ``"tff"`` returns :func:`build_apes_process`'s TFF ``LearningProcess``
  (every user a TFF client computation). ``"vectorized"`` returns an
  :class:`~tff_idp.engine.in_process_round.InProcessLearningProcess` with the
  same ``initialize``, state and measurements, whose round trains and
  randomizes every user at once in this process
  (:mod:`tff_idp.apes.vectorized`; the logistic regression and the MLP) and
  runs the same TFF server step (analyzer, de-bias, server SGD) on the
  reports: the same round, within float tolerance, from the same seeds.
  Its client inputs are :class:`~tff_idp.apes.vectorized.LdpClientArrays` or
  :func:`~tff_idp.apes.client_work.make_client_input`'s. ``"auto"`` takes
  "vectorized" where the model is served and "tff" otherwise. APES has no
  per-user ``"in_process"`` execution; asking for it is refused. Other
  arguments: :func:`build_apes_process`.
  """
  if client_execution == "in_process":
    raise ToolkitValueError(
        "APES has no per-user in-process execution: use client_execution='vectorized' "
        "(dense models) or 'tff'.")
  execution = in_process_round.resolve_for_model(
      client_execution, model_fn, "", None, vectorizable=vectorized.vectorizable(model_fn))
  if execution == "in_process":  # "auto" on a large model that is not served
    execution = "tff"
  parts = _build_parts(
      model_fn, mechanism=mechanism, client_learning_rate=client_learning_rate, clip=clip,
      epsilons=epsilons, keep=keep, server_learning_rate=server_learning_rate,
      proximal_strength=proximal_strength, local_epochs=local_epochs,
      num_reports=num_reports, sparse_debias=sparse_debias, grid_points=grid_points)
  if execution == "tff":
    return parts.process
  cohort_update = vectorized.VectorizedLdpUpdate(
      model_fn, mechanism=mechanism, client_optimizer=parts.client_optimizer, clip=clip,
      keep=keep, proximal_strength=proximal_strength, local_epochs=local_epochs)
  server_step = in_process_round.build_server_step(parts.aggregator, parts.finalizer,
                                                   None, None)
  return in_process_round.InProcessLearningProcess(
      parts.process, [], server_step,
      # The client work's state is the seed counter (tff_composition.round_counter).
      next_client_work_state=lambda round_num: np.int64(round_num) + 1,
      cohort_update=cohort_update, client_work_measurements=lambda _: ())
