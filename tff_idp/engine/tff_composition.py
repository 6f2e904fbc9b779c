"""TFF composition helpers shared by every family's learning process.

* :data:`CLIENT_LOOP`: how a client's local training loop is built;
* :func:`map_client_results`: a client work whose result is post-processed
  per client with a side input (SCALE's clip scale, an audit's canaries).
"""
from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# How every client's local training loop is built (issue 14, measured in
# ``benchmarks/bench_round_throughput.py``). TFF's default, ``DATASET_REDUCE``,
# runs each training step inside ``tf.data``'s ``reduce``, where TensorFlow
# gives an op a single intra-op thread: on the paper's CNN a round took about
# 1.5× as long as with ``DATASET_ITERATOR``, which iterates the dataset in the
# computation's own graph and runs each step with the full intra-op thread
# pool. Results are the same (the same batches in the same order).
CLIENT_LOOP = tff.learning.LoopImplementation.DATASET_ITERATOR


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


def round_counter() -> tuple[tff.Computation, tff.Computation]:
  """A client work's round counter as TFF computations: ``(initial, advance)``.

  ``initial() -> int64 0`` and ``advance(r) -> r + 1``. rPDP-FL's and APES's
  client works keep it as their server state and broadcast it, and each
  client folds it into its secret seed, so noise is fresh every round even
  when a pipeline feeds the same client data again (issue 31).
  """

  @tff.tensorflow.computation
  def initial():
    return tf.constant(0, tf.int64)

  @tff.tensorflow.computation(np.int64)
  def advance(round_num):
    return round_num + 1

  return initial, advance
