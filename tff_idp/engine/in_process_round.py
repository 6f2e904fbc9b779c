"""A TFF round whose clients train in this process: the families' shared fast path (issues 14, 23).

A TFF round ships every sampled client's ``tf.data`` pipeline to the TFF
worker and runs one client computation per client there, at ~15-30 ms per
client of serialisation, shipping and launch. :class:`InProcessLearningProcess`
runs the same round in two parts:

1. **Client training in the driver's Python process**: a family's *client
   update* (a :class:`ClientUpdate`: IDP-FedAvg's model-delta training,
   rPDP-FL's record-level DP-SGD), one traced ``tf.function`` per model copy,
   called once per sampled client;
2. **Aggregation and server update in TFF, unchanged** (:func:`build_server_step`):
   one federated computation calls the *same* ``AggregationProcess`` and the
   same finalizer (the server optimizer) as the family's TFF round, on the
   clients' results placed at ``tff.CLIENTS``, and reduces the clients'
   statistics to the round's training measurements as the TFF client work
   does. Every server-side privacy step (e.g. IDP-FedAvg's clipping and noise)
   runs where it runs in the TFF round.

The process has the interface of the TFF ``LearningProcess`` it was built
from (``reference``): the same ``initialize``, the same state structure (so
checkpoints are interchangeable) and the same metrics structure, so
:class:`tff_idp.engine.driver.RoundDriver`, the ledgers and the checkpoints
work unchanged. The families' tests check that its rounds equal the TFF
rounds within float tolerance.
"""
from __future__ import annotations

import collections
from concurrent import futures
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.engine import client_execution


class CohortUpdate(Protocol):
  """A whole cohort's local training in this process at once (the vectorized execution)."""

  stats_type: tff.types.Type

  def __call__(self, hparams: Any, initial_weights: Any, client_inputs: Sequence[Any]
               ) -> list[tuple[Any, np.float32, Any]]:
    """Per client, in order: (update as numpy arrays, update weight, statistics)."""


class PresummedAggregation(Protocol):
  """An aggregator split into the cohort's summed part here and a TFF server part (issue 35).

  For a cohort trained at once in this process, shipping every client's
  update to TFF only to sum it there costs more than the training. Such an
  aggregator (e.g. :meth:`tff_idp.idp_fedavg.aggregators.AdaptiveClipDPMeanFactory.create_presummed`)
  computes its client-side part on the whole cohort and sums it in this
  process (``client_sums``; nothing random), and does the rest, its noise
  included, in ``server_next``: a TFF computation ``(state@SERVER,
  sums@SERVER) -> MeasuredProcessOutput`` with the state and measurements
  of the ``AggregationProcess`` it replaces.
  """

  sums_type: tff.types.Type
  server_next: tff.Computation

  def client_sums(self, state: Any, updates: Sequence[Any], weights: Sequence[Any]) -> Any:
    """The cohort's client-side part, summed (of type ``sums_type``)."""


def cohort_as_one_client(updates: Sequence[Sequence[np.ndarray]], weights: Sequence[Any]
                         ) -> tuple[list, list]:
  """The cohort as one client of a weighted mean: ([Σ w_i u_i / Σ w_i], [Σ w_i]) (issue 49).

  A weighted mean over one client of weight W is that client's value, so a
  ``tff.aggregators.MeanFactory`` given this one client returns the cohort's
  weighted mean (summed here in float64) without one TFF client value per
  client, which at c = 1,000 was most of a non-private vectorized round. A
  cohort whose weights sum to 0 (only padding, or every update dropped as
  non-finite) gives zeros at weight 0, which the mean's ``no_nan_division``
  turns into no change, as with the clients themselves. No noise is involved:
  only for non-private means (a DP mean is presummed by its own aggregator,
  :class:`PresummedAggregation`). An empty cohort is returned as it is.
  """
  if not updates:
    return list(updates), list(weights)
  w = np.asarray(weights, np.float64)
  total = float(w.sum())
  mean = []
  for layer in zip(*updates):
    stacked = np.stack([np.asarray(u, np.float64) for u in layer])
    summed = np.tensordot(w, stacked, axes=1) if total > 0 else np.zeros(stacked.shape[1:])
    mean.append((summed / total if total > 0 else summed).astype(np.asarray(layer[0]).dtype))
  return [mean], [np.float32(total)]


class ClientUpdate(Protocol):
  """One client's local training in this process (one model copy)."""

  stats_type: tff.types.Type
  """The TFF type of one client's statistics (the third result of ``__call__``)."""

  def __call__(self, hparams: Any, initial_weights: Any, client_input: Any
               ) -> tuple[Any, np.float32, Any]:
    """(update as numpy arrays, update weight, statistics) for one client."""


def num_trainable_parameters(model_fn: Callable[[], Any]) -> int:
  """Trainable parameters of the model ``model_fn`` builds (in a throw-away graph)."""
  with tf.Graph().as_default():
    model = model_fn()
    return int(sum(np.prod(v.shape) for v in model.trainable_variables))


def resolve_for_model(requested: str, model_fn: Callable[[], Any], canaries: str,
                      parallel_clients: Any, vectorizable: bool = False) -> str:
  """A builder's ``client_execution`` resolved and checked (the families' one preamble).

  ``auto`` follows :func:`tff_idp.engine.client_execution.resolve_client_execution`
  with the model's parameter count and ``vectorizable`` (the family has a
  vectorized client update for this model). ``canaries`` names the audit's
  canaries the process carries ("" if none); they run as TFF client work
  only, so ``"in_process"`` or ``"vectorized"`` with canaries is refused, as
  is ``"vectorized"`` where it is not served. ``parallel_clients`` must be
  None or a whole number ≥ 1.
  """
  execution = client_execution.resolve_client_execution(
      requested, num_trainable_parameters(model_fn) if requested == "auto" else None,
      canaries=bool(canaries), vectorizable=vectorizable)
  if parallel_clients is not None:
    client_execution.check_parallel_clients(parallel_clients)
  if execution in ("in_process", "vectorized") and canaries:
    raise ValueError(f"client_execution={execution!r} does not run {canaries}; build the "
                     "audit process with client_execution='tff'.")
  if execution == "vectorized" and not vectorizable:
    raise ValueError("client_execution='vectorized' serves models of Dense layers built by "
                     "tff_idp.models.tff_model_fn (the logistic regression, the MLP) in "
                     "IDP-FedAvg, rPDP-FL (with the head's loss and no per-example weights) "
                     "and APES; use client_execution='tff' (or 'in_process' where the family "
                     "has it) here.")
  return execution


def client_data_options() -> tf.data.Options:
  """``tf.data`` options for iterating a client's data in a client update (issue 23).

  Autotuning off: a client pipeline is iterated once per round, and starting
  tf.data's autotuner with each iterator cost ~1.6 ms per client (2.4 vs
  0.9 ms for the iterator alone, measured on 2 cores), more than it can win on
  a pipeline of a few batches. The elements and their order are unchanged.
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  return options


def build_server_step(aggregator: tff.templates.AggregationProcess,
                      finalizer: tff.learning.templates.FinalizerProcess,
                      stats_type: Optional[tff.types.Type],
                      aggregate_stats: Optional[Callable[[Any], Any]],
                      stats_at_server: bool = False,
                      presummed: Optional[PresummedAggregation] = None) -> tff.Computation:
  """The round's server part as one TFF computation (the composed process's lines, unchanged).

  ``(aggregator state, finalizer state, global weights@SERVER, updates@CLIENTS,
  update weights@CLIENTS, statistics@CLIENTS) -> OrderedDict`` of the
  aggregator's and finalizer's outputs, called as
  ``tff.learning.templates.compose_learning_process`` calls them, and
  ``train_metrics = aggregate_stats(statistics)`` (a federated function from
  client-placed statistics to the server's training measurements).
  ``stats_type=None``: the clients send no statistics (APES: nothing
  unrandomized leaves a client); the computation then takes no statistics
  and ``train_metrics`` is ``()``. ``stats_at_server``: the statistics come
  already summed over the cohort, placed at ``tff.SERVER``
  (:func:`sum_client_stats`; the vectorized executions), and
  ``aggregate_stats`` only finalizes them: the same training measurements
  (sums of the same numbers) without one TFF client value per client, which
  was half of the server step at c = 1,000 (issue 35). ``presummed`` (a
  :class:`PresummedAggregation` of the same mechanism as ``aggregator``):
  the computation takes the cohort's sums at ``tff.SERVER`` in place of the
  updates and update weights and calls ``presummed.server_next`` in place of
  ``aggregator.next``; otherwise the aggregator gets every client's update
  and weight as its own client value.
  """
  agg_state_type, value_type, weight_type = aggregator.next.type_signature.parameter
  fin_state_type, weights_type, _ = finalizer.next.type_signature.parameter
  if presummed is not None:
    return _presummed_server_step(presummed, agg_state_type, finalizer, fin_state_type,
                                  weights_type, stats_type, aggregate_stats, stats_at_server)

  def step(agg_state, fin_state, global_weights, updates, update_weights, train_metrics):
    return _step_outputs(aggregator.next(agg_state, updates, update_weights), finalizer,
                         fin_state, global_weights, train_metrics)

  if stats_type is None:
    @tff.federated_computation(agg_state_type, fin_state_type, weights_type, value_type,
                               weight_type)
    def server_step_without_stats(agg_state, fin_state, global_weights, updates,
                                  update_weights):
      return step(agg_state, fin_state, global_weights, updates, update_weights, ())

    return server_step_without_stats

  placement = tff.SERVER if stats_at_server else tff.CLIENTS

  @tff.federated_computation(agg_state_type, fin_state_type, weights_type, value_type,
                             weight_type, tff.FederatedType(stats_type, placement))
  def server_step(agg_state, fin_state, global_weights, updates, update_weights, stats):
    return step(agg_state, fin_state, global_weights, updates, update_weights,
                aggregate_stats(stats))

  return server_step


def _step_outputs(aggregated, finalizer, fin_state, global_weights, train_metrics):
  """The server step's outputs: the aggregator's, then the finalizer's on its result."""
  finalized = finalizer.next(fin_state, global_weights, aggregated.result)
  return collections.OrderedDict(
      aggregator_state=aggregated.state, aggregator_measurements=aggregated.measurements,
      finalizer_state=finalized.state, new_weights=finalized.result,
      finalizer_measurements=finalized.measurements, train_metrics=train_metrics)


def _presummed_server_step(presummed: PresummedAggregation, agg_state_type, finalizer,
                           fin_state_type, weights_type, stats_type, aggregate_stats,
                           stats_at_server: bool) -> tff.Computation:
  """:func:`build_server_step` on the cohort's sums (its ``presummed`` argument)."""
  if stats_type is not None and not stats_at_server:
    raise ValueError("a presummed aggregation takes the statistics summed too "
                     "(stats_at_server=True).")
  sums_type = tff.FederatedType(presummed.sums_type, tff.SERVER)

  def step(agg_state, fin_state, global_weights, sums, train_metrics):
    return _step_outputs(presummed.server_next(agg_state, sums), finalizer, fin_state,
                         global_weights, train_metrics)

  if stats_type is None:
    @tff.federated_computation(agg_state_type, fin_state_type, weights_type, sums_type)
    def presummed_step_without_stats(agg_state, fin_state, global_weights, sums):
      return step(agg_state, fin_state, global_weights, sums, ())

    return presummed_step_without_stats

  @tff.federated_computation(agg_state_type, fin_state_type, weights_type, sums_type,
                             tff.FederatedType(stats_type, tff.SERVER))
  def presummed_step(agg_state, fin_state, global_weights, sums, stats):
    return step(agg_state, fin_state, global_weights, sums, aggregate_stats(stats))

  return presummed_step


def sum_client_stats(stats: Sequence[Any], stats_type: tff.types.Type) -> Any:
  """The clients' statistics summed leaf by leaf in their own dtypes (zeros for no client).

  What ``tff.federated_sum`` computes of them, for a server step built with
  ``stats_at_server=True``.
  """
  specs = tff.types.type_to_tf_tensor_specs(stats_type)
  leaves = [tf.nest.flatten(s) for s in stats]
  summed = []
  for k, spec in enumerate(tf.nest.flatten(specs)):
    dtype = spec.dtype.as_numpy_dtype
    column = [np.asarray(client[k], dtype) for client in leaves]
    summed.append(np.sum(np.stack(column), axis=0, dtype=dtype) if column
                  else np.zeros(spec.shape, dtype))
  return tf.nest.pack_sequence_as(specs, summed)


def _train_measurements(train_metrics: Any) -> Any:
  """The client work's measurements of TFF's model-delta client works: ``OrderedDict(train=...)``."""
  return collections.OrderedDict(train=train_metrics)


class InProcessLearningProcess:
  """A TFF ``LearningProcess`` whose clients train in this process (module docstring).

  ``reference`` is the composed TFF process with the same components, or its
  state functions (:class:`~tff_idp.engine.state_functions.StateFunctions`,
  built without tracing the TFF round, as IDP-FedAvg's builder does): it
  provides ``initialize``, ``get_model_weights``, ``set_model_weights``,
  ``get_hparams`` and ``set_hparams``, so states and checkpoints are
  interchangeable with the TFF process.

  ``client_updates`` holds one :class:`ClientUpdate` (its own model copy) per
  client trained at once; each is called with the client work's state as its
  ``hparams``. ``next_client_work_state`` gives the client work's state after
  a round, as the reference's client work ``next`` does (identity by default;
  rPDP-FL advances its round counter). ``cohort_update`` (a
  :class:`CohortUpdate`), when given, trains every round's whole cohort
  instead (issue 35's vectorized execution; ``client_updates`` is then
  empty). ``presummed_aggregation`` (a :class:`PresummedAggregation`, for a
  server step built with it): the cohort's updates are clipped and summed
  here and the server step gets the sums. ``collapse_weighted_mean``: the
  server step's aggregator is a weighted mean (non-private IDP-FedAvg's
  ``MeanFactory``), so the cohort goes to it as one client, its weighted mean
  (:func:`cohort_as_one_client`, issue 49). ``client_work_measurements`` maps the server step's
  ``train_metrics`` to the reference's client work measurements
  (``OrderedDict(train=...)`` by default; APES reports ``()``). A server
  step built with ``stats_type=None`` takes no client statistics (the
  updates' third result is then ignored). Client ``i`` of a cohort always goes to copy
  ``i mod k``, and each copy trains its clients in cohort order, one thread
  per copy: which copy trains which client never depends on timing, so a
  model with seeded stateful random ops (Dropout) draws the same masks in
  every run of the same cohorts.
  """

  def __init__(self, reference: tff.learning.templates.LearningProcess,
               client_updates: Sequence[ClientUpdate], server_step: tff.Computation,
               next_client_work_state: Callable[[Any], Any] = lambda state: state,
               cohort_update: Optional[CohortUpdate] = None,
               client_work_measurements: Callable[[Any], Any] = _train_measurements,
               presummed_aggregation: Optional[PresummedAggregation] = None,
               collapse_weighted_mean: bool = False):
    if not client_updates and cohort_update is None:
      raise ValueError("an in-process learning process needs at least one client update.")
    self.cohort_update = cohort_update
    self.presummed_aggregation = presummed_aggregation
    if collapse_weighted_mean and presummed_aggregation is not None:
      raise ValueError("collapse_weighted_mean is for a weighted mean without a presummed "
                       "aggregation.")
    self.collapse_weighted_mean = collapse_weighted_mean
    self.reference = reference
    self.client_updates = list(client_updates)
    self.server_step = server_step
    self.next_client_work_state = next_client_work_state
    self.client_work_measurements = client_work_measurements
    parameters = server_step.type_signature.parameter
    # (agg state, fin state, weights, updates, update weights[, stats]), or with a
    # presummed aggregation (agg state, fin state, weights, sums[, stats]).
    arity = 5 if presummed_aggregation is not None else 6
    self._takes_stats = len(parameters) == arity
    self._stats_at_server = (self._takes_stats
                             and parameters[arity - 1].placement is tff.SERVER)
    self._summed_stats_type = parameters[arity - 1].member if self._stats_at_server else None
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
    if self.cohort_update is not None:
      return self.cohort_update(hparams, weights, client_data)
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
    """One round: the clients here, then the TFF server step."""
    weights = state.global_model_weights
    results = self._train_clients(state.client_work, weights, client_data)
    updates, update_weights = [r[0] for r in results], [r[1] for r in results]
    if self.presummed_aggregation is not None:
      args = [state.aggregator, state.finalizer, weights,
              self.presummed_aggregation.client_sums(state.aggregator, updates, update_weights)]
    else:
      if self.collapse_weighted_mean:
        updates, update_weights = cohort_as_one_client(updates, update_weights)
      args = [state.aggregator, state.finalizer, weights, updates, update_weights]
    if self._stats_at_server:
      args.append(sum_client_stats([r[2] for r in results], self._summed_stats_type))
    elif self._takes_stats:
      args.append([r[2] for r in results])
    out = self.server_step(*args)
    new_state = tff.learning.templates.LearningAlgorithmState(
        global_model_weights=out["new_weights"], distributor=state.distributor,
        client_work=self.next_client_work_state(state.client_work),
        aggregator=out["aggregator_state"],
        finalizer=out["finalizer_state"])
    measurements = collections.OrderedDict(
        distributor=(),
        client_work=self.client_work_measurements(out["train_metrics"]),
        aggregator=out["aggregator_measurements"],
        finalizer=out["finalizer_measurements"])
    return tff.learning.templates.LearningProcessOutput(new_state, measurements)

  def close(self) -> None:
    """Stops the client threads (idle ones also end when the interpreter exits)."""
    for pool in self._threads:
      pool.shutdown(wait=False, cancel_futures=True)


default_parallel_clients = client_execution.default_parallel_clients
