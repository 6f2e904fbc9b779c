"""APES's cohort-vectorized client work: every user's FedProx and local randomizer at once (issue 35).

The client side of an APES round (APES paper Alg. 1 lines 3-5, Alg. 2 for
S-APES) for the whole cohort in one ``tf.function`` call per chunk of users,
instead of one TFF client computation per user
(:func:`tff_idp.apes.client_work.build_ldp_client_work`). Each user's report
is what its own client computation gives, within float tolerance
(``tests/apes/test_vectorized.py`` compares whole rounds):

* its own local FedProx: its batches in its order, ``local_epochs`` passes
  (the batched data repeated, as the client work's ``data.repeat``), the
  proximal term μ·(w − w₀), its own SGD state
  (:func:`tff_idp.engine.stacked_training.local_steps`); Δ zeroed if not
  finite, as TFF's client update;
* its own randomizer at its **own ε** and its **own secret seed**, with the
  round number folded in (:func:`tff_idp.apes.clip_laplace.round_seed`: fresh
  noise every round even if a driver reuses a seed), through the very
  function the TFF client work calls
  (:func:`tff_idp.apes.client_work.randomize_vector`), one user at a time
  inside the graph (``tf.map_fn``), so the noise is the same draw from the
  same stateless seed;
* nothing else leaves the client: the report, with weight 1. The local
  training statistics are dropped here, as in the TFF client work.

The server step (the average, the de-bias with the budget multiset, the
server optimizer) is the unchanged TFF computation
(:func:`tff_idp.engine.in_process_round.build_server_step`), fed the reports
placed at ``tff.CLIENTS``.

**Client input**: a :class:`LdpClientArrays` (the user's examples, batch
size, ε and seed: no ``tf.data`` pipeline per user, the fast path of the
runner) or the TFF client work's own input
(:func:`tff_idp.apes.client_work.make_client_input`: its batched data and
its one-element privacy dataset, read here; any other length of the privacy
dataset is refused, as in the TFF computation).

**In your own TFF pipeline**: :meth:`VectorizedLdpUpdate.tff_computation` is
the same client work as a ``tff.tensorflow.computation`` over a stacked
cohort (:meth:`VectorizedLdpUpdate.cohort_arguments`), for a TFF client that
holds a whole cohort of users.

Models served: the logistic regression and the MLP of :mod:`tff_idp.models`
(:func:`tff_idp.engine.stacked_training.vectorizable`).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.apes import clip_laplace
from tff_idp.apes import client_work as client_work_lib
from tff_idp.apes import debias
from tff_idp.engine import cohort_stack
from tff_idp.engine import stacked_training
from tff_idp.errors import ClientInputError, ToolkitValueError

ModelFn = client_work_lib.ModelFn
vectorizable = stacked_training.vectorizable


@dataclasses.dataclass(frozen=True)
class LdpClientArrays:
  """One user's round input for the vectorized execution (its data and its privacy).

  Attributes:
    examples: ``OrderedDict(x=..., y=...)``, the user's records (first axis:
      the record), in the order its batches take them; may hold 0 records.
    batch_size: records per local step; an epoch is ``ceil(n / batch_size)``
      steps, the last one possibly short (``Dataset.batch``).
    epsilon: the user's own budget (> 0, finite).
    seed: int64[2], the user's secret randomizer seed
      (:func:`tff_idp.apes.clip_laplace.client_seed`; never write it out).
  """

  examples: Mapping[str, np.ndarray]
  batch_size: int
  epsilon: float
  seed: np.ndarray

  def __post_init__(self):
    clip_laplace.check_epsilon(self.epsilon)
    seed = np.asarray(self.seed, np.int64)
    if seed.shape != (2,):
      raise ToolkitValueError(f"seed must be two integers (a stateless RNG seed); got {seed!r}.")
    object.__setattr__(self, "seed", seed)
    if isinstance(self.batch_size, bool) or int(self.batch_size) != self.batch_size \
        or self.batch_size < 1:
      raise ToolkitValueError(f"batch_size={self.batch_size!r} must be an integer >= 1.")

  @property
  def num_examples(self) -> int:
    return int(len(next(iter(self.examples.values()))))

  def epoch_batches(self) -> list[np.ndarray]:
    """One epoch's batches, as index arrays into ``examples``."""
    n, b = self.num_examples, int(self.batch_size)
    return [np.arange(i, min(n, i + b)) for i in range(0, n, b)]

  def client_input(self) -> collections.OrderedDict:
    """The same user as the TFF client work's input (:func:`~tff_idp.apes.client_work.make_client_input`)."""
    data = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(self.examples))
    return client_work_lib.make_client_input(data.batch(int(self.batch_size)),
                                             float(self.epsilon), self.seed)


class VectorizedLdpUpdate:
  """A cohort's APES client work in one computation per chunk (module docstring).

  Called as ``update(round_num, initial_weights, client_inputs)`` with the
  client work's state (the seed counter) and the round's client inputs;
  returns one ``(OrderedDict(ldp_report=<report as numpy arrays>), 1.0, None)``
  per user, in order (the TFF client work's ``ClientResult``).
  Arguments as :func:`tff_idp.apes.client_work.build_ldp_client_work`;
  ``max_chunk_bytes`` / ``max_chunk_clients`` bound a chunk's memory
  (:func:`tff_idp.engine.cohort_stack.plan_chunks`).
  """

  stats_type = None  # nothing but the report leaves a client

  def __init__(self, model_fn: ModelFn, *, mechanism: str,
               client_optimizer: tff.learning.optimizers.Optimizer,
               clip: Optional[float] = None, keep: Optional[int] = None,
               proximal_strength: float = 0.01, local_epochs: int = 1,
               max_chunk_bytes: int = cohort_stack.DEFAULT_MAX_CHUNK_BYTES,
               max_chunk_clients: int = cohort_stack.DEFAULT_MAX_CHUNK_CLIENTS):
    self._clip, self._mu, self._epochs = client_work_lib.check_settings(
        mechanism, clip, keep, proximal_strength, local_epochs)
    served = stacked_training.stacked_model_of(model_fn)
    if served is None:
      raise ToolkitValueError(
          "client_execution='vectorized' serves models of Dense layers built by "
          "tff_idp.models.tff_model_fn (the logistic regression, the MLP); use "
          "client_execution='tff' for this model.")
    self._stacked, self._head = served
    self._mechanism, self._optimizer = mechanism, client_optimizer
    input_spec, self._weight_specs, self._widest = stacked_training.model_shapes(model_fn)
    self._shapes = [s.shape.as_list() for s in self._weight_specs]
    self._sizes = [int(np.prod(s)) for s in self._shapes]
    dimension = sum(self._sizes)
    self._keep = None if keep is None else debias.check_keep(keep, dimension)
    self._max_chunk_bytes, self._max_chunk_clients = max_chunk_bytes, max_chunk_clients
    self._signature = [tf.TensorSpec([], tf.int64), list(self._weight_specs),
                       stacked_training.examples_spec(input_spec), stacked_training.STEPS_SPEC,
                       stacked_training.MASK_SPEC, tf.TensorSpec([None], tf.float32),
                       tf.TensorSpec([None, 2], tf.int64)]
    # One trace for every cohort: the chunk's users, steps and records are dynamic.
    self._train = tf.function(self._train_fn, input_signature=self._signature)

  def _train_fn(self, round_num, initial_weights, examples, index, mask, epsilons, seeds):
    """One chunk's reports: local FedProx, then each user's randomizer at its ε and seed."""
    delta, _ = stacked_training.local_steps(  # the training statistics stay here
        self._stacked, self._head, self._optimizer, initial_weights, examples, index, mask,
        proximal_strength=self._mu)
    if self._mechanism == "none":
      return delta
    num_clients = tf.shape(index)[0]
    # Row-major leaves in tf.nest.flatten order: the TFF client work's flattening.
    flat = tf.concat([tf.reshape(d, [-1, size]) for d, size in zip(delta, self._sizes)], axis=1)
    mechanism, clip, keep = self._mechanism, self._clip, self._keep

    def one_user(args):
      vector, epsilon, seed = args
      return client_work_lib.randomize_vector(
          vector, mechanism, epsilon, clip_laplace.round_seed(seed, round_num),
          clip=clip, keep=keep)

    reports = tf.map_fn(one_user, (flat, epsilons, seeds),
                        fn_output_signature=tf.TensorSpec([sum(self._sizes)], tf.float32))
    parts = tf.split(reports, self._sizes, axis=1)
    return [tf.reshape(p, [num_clients] + s) for p, s in zip(parts, self._shapes)]

  # -- for your own TFF computations -----------------------------------------------------

  def cohort_arguments(self, round_num: int, initial_weights: Any, client_inputs: Sequence[Any]
                       ) -> tuple:
    """The arguments of :meth:`tff_computation` for a whole cohort (one chunk, in its order)."""
    users = [self._unwrap(c) for c in client_inputs]
    if not users:
      raise ToolkitValueError("a cohort needs at least one user.")
    steps = cohort_stack.stack_steps([u[0] for u in users], [u[1] for u in users])
    trainable = [np.asarray(w) for w in getattr(initial_weights, "trainable", initial_weights)]
    return (np.int64(round_num), trainable,
            collections.OrderedDict((k, steps.examples[k]) for k in ("x", "y")),
            steps.index, steps.mask, np.asarray([u[2] for u in users], np.float32),
            np.stack([u[3] for u in users]).astype(np.int64))

  def tff_computation(self) -> tff.Computation:
    """The vectorized client work as a ``tff.tensorflow.computation``, for your TFF pipelines.

    ``(round, trainable weights, examples, index, mask, ε [users], seeds
    [users, 2]) -> reports``: every user's randomized report (one tensor per
    trainable weight, with a leading user axis), as :meth:`__call__` computes
    them; build the arguments with :meth:`cohort_arguments`. Where it is
    valid: inside a client computation that holds a whole cohort of users
    (e.g. a silo of users, each randomizing at its own ε before anything
    leaves it), ``tff.federated_map`` it and sum the reports over the user
    axis before the server's analyzer (which then needs the number of
    reports: the users, not the silos). The seeds are secret: build them
    with :func:`tff_idp.apes.clip_laplace.client_seed`.
    """
    types = [tff.types.tensorflow_to_type(s) for s in self._signature]
    train = self._train  # the traced tf.function (AutoGraph turns its step loop into a graph loop)

    def reports(round_num, initial_weights, examples, index, mask, epsilons, seeds):
      return train(round_num, initial_weights, examples, index, mask, epsilons, seeds)

    return tff.tensorflow.computation(reports, *types)

  # -- inputs -----------------------------------------------------------------------------

  def _unwrap(self, client_input: Any) -> tuple[Mapping[str, np.ndarray], list, float,
                                                 np.ndarray]:
    """(examples, all local steps' batches, ε, seed) of one user's input (module docstring)."""
    if isinstance(client_input, LdpClientArrays):
      batches = client_input.epoch_batches() * self._epochs
      return (client_input.examples, batches, float(client_input.epsilon),
              client_input.seed)
    if (isinstance(client_input, Mapping)
        and set(client_input) == {client_work_lib.DATA_KEY, client_work_lib.PRIVACY_KEY}):
      examples, batches = stacked_training.dataset_batches(
          client_input[client_work_lib.DATA_KEY])
      epsilon, seed = _read_privacy(client_input[client_work_lib.PRIVACY_KEY])
      return examples, batches * self._epochs, epsilon, seed
    raise ClientInputError(
        "the vectorized APES client work takes each user's "
        "tff_idp.apes.vectorized.LdpClientArrays or the TFF client work's input "
        f"(tff_idp.apes.make_client_input); got {type(client_input).__name__}.")

  # -- the call ---------------------------------------------------------------------------

  def __call__(self, round_num: Any, initial_weights: Any, client_inputs: Sequence[Any]
               ) -> list[tuple[collections.OrderedDict, np.float32, None]]:
    """Per user, in order: (``OrderedDict(ldp_report=<numpy arrays>)``, weight 1, no statistics)."""
    users = [self._unwrap(c) for c in client_inputs]
    if not users:
      return []
    round_num = tf.constant(int(np.asarray(round_num)), tf.int64)
    trainable = [tf.convert_to_tensor(w) for w in getattr(initial_weights, "trainable",
                                                          initial_weights)]
    batches = [u[1] for u in users]
    results: list = [None] * len(users)
    chunks = cohort_stack.plan_chunks(
        [len(b) for b in batches],
        stacked_training.bytes_per_client(self._weight_specs, batches, self._widest),
        self._max_chunk_bytes, self._max_chunk_clients)
    for chunk in chunks:
      steps = cohort_stack.stack_steps([users[i][0] for i in chunk],
                                       [batches[i] for i in chunk])
      reports = self._train(
          round_num, trainable, {k: tf.constant(steps.examples[k]) for k in ("x", "y")},
          tf.constant(steps.index), tf.constant(steps.mask),
          tf.constant([users[i][2] for i in chunk], tf.float32),
          tf.constant(np.stack([users[i][3] for i in chunk]), tf.int64))
      reports = [r.numpy() for r in reports]
      for j, i in enumerate(chunk):
        results[i] = (client_work_lib.as_report([r[j] for r in reports]), np.float32(1.0), None)
    return results


def _read_privacy(privacy: tf.data.Dataset) -> tuple[float, np.ndarray]:
  """(ε, seed) of the one-element privacy dataset; any other length is refused."""
  elements = list(privacy.take(2).as_numpy_iterator())
  if len(elements) != 1:
    raise ClientInputError(
        "the client's privacy dataset must hold exactly one {epsilon, seed} element "
        f"(use make_client_input); it holds {'none' if not elements else 'more than one'}.")
  return float(elements[0]["epsilon"]), np.asarray(elements[0]["seed"], np.int64)
