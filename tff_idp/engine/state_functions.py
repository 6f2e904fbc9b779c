"""A composed ``LearningProcess``'s state functions, without tracing its round (issue 52).

An in-process round (:mod:`tff_idp.engine.in_process_round`) trains its
clients in Python and takes from the TFF process it stands for only
``initialize``, ``get_model_weights``, ``set_model_weights``,
``get_hparams`` and ``set_hparams``. Building that TFF process traces its
client work's ``next`` (the model's forward and backward pass as a TFF client
computation): about 3 CPU-s for a logistic regression, more for a CNN, per
run specification, for a computation an in-process run never calls.

:func:`compose_state_functions` builds the five from the same components
exactly as ``tff.learning.templates.compose_learning_process`` does, so the
state (its type and its values) is the composed process's, and checkpoints
stay interchangeable. A client work supplies its state part as a
:class:`ClientWorkState`: :func:`model_delta_client_work_state` is TFF's
model-delta client work's (IDP-FedAvg's), :func:`seed_counter_client_work_state`
that of a client work whose state is its secret seed counter (rPDP-FL's).
"""
from __future__ import annotations

import collections
from typing import NamedTuple

import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.engine import tff_composition


class ClientWorkState(NamedTuple):
  """A client work's state computations (a ``ClientWorkProcess`` less its ``next``)."""
  initialize: tff.Computation
  get_hparams: tff.Computation
  set_hparams: tff.Computation


class StateFunctions:
  """``initialize`` / ``get_model_weights`` / ``set_model_weights`` / ``get_hparams`` /
  ``set_hparams`` of a composed ``LearningProcess``, with no ``next``.

  Holds the state functions an :class:`~tff_idp.engine.in_process_round.InProcessLearningProcess`
  uses in place of the TFF process it stands for; the TFF process itself comes
  from the family's ``build_*_process``.
  """

  def __init__(self, initialize: tff.Computation, get_model_weights: tff.Computation,
               set_model_weights: tff.Computation, get_hparams: tff.Computation,
               set_hparams: tff.Computation):
    self.initialize = initialize
    self.get_model_weights = get_model_weights
    self.set_model_weights = set_model_weights
    self.get_hparams = get_hparams
    self.set_hparams = set_hparams

  @property
  def next(self):
    raise AttributeError(
        "these are a TFF LearningProcess's state functions, built without its round (the "
        "in-process round trains the clients itself); the family's build_*_process builds "
        "the TFF process with its next")


def model_delta_client_work_state(optimizer: tff.learning.optimizers.Optimizer
                                  ) -> ClientWorkState:
  """The state of ``tff.learning.templates.build_model_delta_client_work(…, optimizer)``.

  As TFF 0.87 builds it: the client optimizer's hyperparameters, read from
  the optimizer initialised on a scalar placeholder spec, at the server;
  ``get_hparams`` returns the state and ``set_hparams`` replaces it.
  """
  initial_hparams = optimizer.get_hparams(
      optimizer.initialize(tf.TensorSpec(shape=(), dtype=tf.float32)))

  @tff.federated_computation
  def initialize():
    return tff.federated_value(initial_hparams, tff.SERVER)

  state_type = initialize.type_signature.result.member

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams(state, hparams):
    del state
    return hparams

  return ClientWorkState(initialize, get_hparams, set_hparams)


def seed_counter_client_work_state() -> ClientWorkState:
  """The state of a client work whose state is its seed counter and which has no hyperparameters.

  ``initialize`` places :func:`tff_idp.engine.tff_composition.round_counter`'s
  secret start at the server; ``get_hparams`` / ``set_hparams`` are what a
  ``ClientWorkProcess`` built without them has (an empty ``OrderedDict``; the
  state unchanged).
  """
  initial, _ = tff_composition.round_counter()

  @tff.federated_computation
  def initialize():
    return tff.federated_eval(initial, tff.SERVER)

  state_type = initialize.type_signature.result.member

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    del state
    return collections.OrderedDict()

  @tff.tensorflow.computation(state_type, get_hparams.type_signature.result)
  def set_hparams(state, hparams):
    del hparams
    return state

  return ClientWorkState(initialize, get_hparams, set_hparams)


def compose_state_functions(
    initial_model_weights_fn: tff.Computation,
    distributor: tff.templates.MeasuredProcess, client_work: ClientWorkState,
    aggregator: tff.templates.AggregationProcess,
    finalizer: tff.learning.templates.FinalizerProcess) -> StateFunctions:
  """The state functions ``compose_learning_process`` builds from these components.

  Same computations, same order of the state's parts
  (``LearningAlgorithmState(global_model_weights, distributor, client_work,
  aggregator, finalizer)``), same hyperparameters
  (``OrderedDict(client_work=…, finalizer=…)``).
  """
  state_class = tff.learning.templates.LearningAlgorithmState

  @tff.federated_computation()
  def initialize():
    weights = tff.federated_eval(initial_model_weights_fn, tff.SERVER)
    return tff.federated_zip(state_class(weights, distributor.initialize(),
                                         client_work.initialize(), aggregator.initialize(),
                                         finalizer.initialize()))

  state_type = initialize.type_signature.result.member

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    return state.global_model_weights

  @tff.tensorflow.computation(state_type, state_type.global_model_weights)
  def set_model_weights(state, model_weights):
    return state_class(global_model_weights=model_weights, distributor=state.distributor,
                       client_work=state.client_work, aggregator=state.aggregator,
                       finalizer=state.finalizer)

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    return collections.OrderedDict(client_work=client_work.get_hparams(state.client_work),
                                   finalizer=finalizer.get_hparams(state.finalizer))

  @tff.tensorflow.computation(state_type, get_hparams.type_signature.result)
  def set_hparams(state, hparams):
    return state_class(
        global_model_weights=state.global_model_weights, distributor=state.distributor,
        client_work=client_work.set_hparams(state.client_work, hparams["client_work"]),
        aggregator=state.aggregator,
        finalizer=finalizer.set_hparams(state.finalizer, hparams["finalizer"]))

  return StateFunctions(initialize, get_model_weights, set_model_weights, get_hparams,
                        set_hparams)
