"""TFF composition helpers shared by every family's learning process.

* :data:`CLIENT_LOOP`: how a client's local training loop is built;
* :func:`map_client_results`: a client work whose result is post-processed
  per client with a side input (SCALE's clip scale, an audit's canaries).
"""
from __future__ import annotations

import collections
from typing import Any

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


# The secret start of a client work's seed counter is drawn in [0, 2^62): adding
# any realistic number of rounds cannot overflow int64.
SEED_COUNTER_START_BOUND = 2**62


def round_counter() -> tuple[tff.Computation, tff.Computation]:
  """A client work's seed counter as TFF computations: ``(initial, advance)``.

  ``initial() -> s`` and ``advance(r) -> r + 1``, where the start ``s`` is a
  secret drawn from OS entropy at **every** ``initialize()`` (an unseeded
  TensorFlow draw with no graph seed: TensorFlow seeds it from OS entropy at
  each execution). rPDP-FL's and APES's client works keep the counter as
  their server state and broadcast it, and each client folds it into its
  secret seed, so the noise is fresh

  * every round, even when a pipeline feeds the same client data again
    (issue 31: the counter moves), and
  * every run, even when two runs (a hyperparameter sweep, a second
    ``initialize()``) feed the same client dataset objects (issue 48: the
    counters start at independent secrets). Two runs of T rounds draw the
    same stream only if their starts lie within T of each other:
    probability below 2T/2^62.

  The toolkit's runners replace the start with one derived from the run's
  privacy randomness (:class:`WithSeedCounterStart`), so a run resumes
  exactly from its checkpoint and the insecure debug mode stays reproducible.
  """

  @tff.tensorflow.computation
  def initial():
    return tf.random.uniform([], minval=0, maxval=SEED_COUNTER_START_BOUND, dtype=tf.int64)

  @tff.tensorflow.computation(np.int64)
  def advance(round_num):
    return round_num + 1

  return initial, advance


class WithSeedCounterStart:
  """A learning process whose client work's seed counter starts at a given secret.

  Wraps an rPDP-FL or APES process (their client work state is the seed
  counter of :func:`round_counter`): ``initialize()`` returns the process's
  own initial state with ``client_work`` set to ``start``. Runners pass
  ``PrivacyRandomness.seed_counter_start()``: secret and fresh per run by
  default, derived from the seed in the loudly labelled insecure debug mode.
  Everything else is the wrapped process's.
  """

  def __init__(self, process: Any, start: int):
    if isinstance(start, bool) or not 0 <= int(start) < SEED_COUNTER_START_BOUND:
      raise ValueError(f"a seed counter start must be an integer in [0, 2^62); got {start!r}.")
    self._process = process
    self._start = np.int64(start)

  def initialize(self) -> Any:
    state = self._process.initialize()
    return state._replace(client_work=self._start)

  def __getattr__(self, name: str) -> Any:
    return getattr(self._process, name)

  def __repr__(self) -> str:
    return f"WithSeedCounterStart({self._process!r}, <secret start>)"
