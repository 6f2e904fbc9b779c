"""rPDP-FL's cohort-vectorized client update: every sampled client's record-level DP-SGD at once (issue 35).

rPDP-FL Alg. 3 lines 9-17 (τ steps of Poisson DP-SGD at each record's own
rate q_j, per-example clipping at L, Gaussian noise σ·L, the noisy sum over
the **expected** batch Σ_j q_j) for a whole chunk of clients in one
computation on stacked per-client weights, instead of one call of
:func:`tff_idp.rpdp.dp_sgd.build_local_dp_sgd` per client
(:class:`tff_idp.rpdp.in_process.RecordDpClientUpdate`). Each client's update
is what its own DP-SGD gives, within float tolerance
(``tests/rpdp/test_vectorized.py``):

* **its own randomness, drawn as its own computation draws it**: the
  client's seed with the round folded in (:func:`tff_idp.rpdp.records.round_seed`),
  then per step s ``fold_in(seed, s)``, its record mask
  ``stateless_uniform([n_i], fold_in(step seed, 0)) < q`` over exactly its
  n_i records, and per trainable weight k its noise
  ``stateless_normal(shape_k, fold_in(fold_in(step seed, 1), k), σ·L)``; the
  draws run one client at a time inside the graph (``tf.map_fn``), so every
  client's sample and noise are the same draws, bit for bit;
* **its own per-example clipping**: the layer-wise per-example gradients of
  :mod:`tff_idp.rpdp.per_example` (a_j ⊗ ∂ℓ_j/∂z_j per Dense layer, their
  norms without forming them) on stacked weights
  (:meth:`tff_idp.engine.stacked_dense.StackedDenseModel.forward_recording`),
  each clipped to L, only the client's sampled records summed (padding and
  unsampled records get factor 0);
* **its own normaliser**: Σ_j q_j of its records, fixed before sampling; a
  client whose records are all excluded (q = 0) or who has none takes no
  step (update 0, weight 0), as in :func:`~tff_idp.rpdp.dp_sgd.build_local_dp_sgd`;
* its statistics (loss over sampled records, sampled, clipped, Σ q per step,
  steps) and its 0/1 update weight.

Served: the logistic regression and the MLP of :func:`tff_idp.models.tff_model_fn`
with the head's own loss (:func:`tff_idp.models.per_example_loss`), one clip
threshold, no per-example weights (INO-SGD's hook) and no replaced records
(the audit's canaries run as TFF client work); :func:`vectorizable` says
whether a configuration is served. The server step is the unchanged TFF
computation (record-level DP adds no server noise).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.errors import ClientInputError
from tff_idp.errors import ToolkitValueError
from tff_idp.engine import cohort_stack
from tff_idp.engine import stacked_training
from tff_idp.rpdp import dp_sgd
from tff_idp.rpdp import record_stats
from tff_idp.rpdp import records

# Clients whose draws run concurrently in the graph (tf.map_fn's parallel_iterations).
_PARALLEL_DRAWS = 64

ModelFn = Callable[[], tff.learning.models.VariableModel]


def _head_of_loss(loss_fn: Any) -> Optional[str]:
  if loss_fn is dp_sgd.sparse_categorical_crossentropy:
    return "softmax"
  return getattr(loss_fn, "head", None)


def vectorizable(model_fn: ModelFn, loss_fn: Any = dp_sgd.sparse_categorical_crossentropy,
                 example_weight_fn: Any = None, record_replacement: Any = None) -> bool:
  """Whether :class:`VectorizedRecordDpUpdate` serves this configuration (module docstring)."""
  served = stacked_training.stacked_model_of(model_fn)
  return (served is not None and example_weight_fn is None and record_replacement is None
          and _head_of_loss(loss_fn) == served[1])


class VectorizedRecordDpUpdate:
  """A cohort's record-level DP-SGD in one computation per chunk (module docstring).

  Called as ``update(round_num, initial_weights, client_inputs)`` with the
  client work's state (the seed counter) and the round's client datasets
  (:func:`tff_idp.rpdp.records.record_dataset`) or
  :class:`~tff_idp.rpdp.records.RecordArrays`; returns per client, in order,
  ``(Δ as numpy arrays, 0/1 update weight, statistics)`` as
  :class:`~tff_idp.rpdp.in_process.RecordDpClientUpdate` returns for one.
  """

  def __init__(self, model_fn: ModelFn, optimizer: tff.learning.optimizers.Optimizer, *,
               local_steps: int, noise_multiplier: float, clip_norm: float,
               loss_fn: dp_sgd.LossFn = dp_sgd.sparse_categorical_crossentropy,
               example_weight_fn: Optional[dp_sgd.ExampleWeightFn] = None,
               max_chunk_bytes: int = cohort_stack.DEFAULT_MAX_CHUNK_BYTES,
               max_chunk_clients: int = cohort_stack.DEFAULT_MAX_CHUNK_CLIENTS):
    if not vectorizable(model_fn, loss_fn, example_weight_fn):
      raise ValueError(
          "client_execution='vectorized' serves rPDP-FL with the logistic regression or the "
          "MLP of tff_idp.models.tff_model_fn, the head's own loss "
          "(tff_idp.models.per_example_loss) and no per-example weights; use "
          "client_execution='in_process' or 'tff' here.")
    self._noise_std = dp_sgd.noise_std_of(local_steps, noise_multiplier, clip_norm)
    self._stacked, self._head = stacked_training.stacked_model_of(model_fn)
    self._optimizer = optimizer
    self._steps = int(local_steps)
    self._clip = float(clip_norm)
    self._max_chunk_bytes, self._max_chunk_clients = max_chunk_bytes, max_chunk_clients
    input_spec, self._weight_specs, self._widest = stacked_training.model_shapes(model_fn)
    examples = stacked_training.examples_spec(input_spec)
    stats_spec = {k: tf.TensorSpec([], tf.float32) for k in record_stats.STAT_KEYS}
    self.stats_type = tff.types.tensorflow_to_type(
        record_stats.client_stats(stats_spec, tf.TensorSpec([], tf.float32)))
    self._signature = [list(self._weight_specs),
                 tf.TensorSpec([None, None] + examples["x"].shape[1:].as_list(),
                               examples["x"].dtype),
                 tf.TensorSpec([None, None] + examples["y"].shape[1:].as_list(),
                               examples["y"].dtype),
                 tf.TensorSpec([None, None], tf.float32), tf.TensorSpec([None], tf.int32),
                 tf.TensorSpec([None, 2], tf.int64)]
    # One trace for every cohort: the chunk's clients and records are dynamic.
    self._train = tf.function(self._train_fn, input_signature=self._signature)

  # -- the computation --------------------------------------------------------------------

  def _draw(self, fn, seeds, sizes, output):
    """``fn(seed, n)`` for every client, one client at a time in the graph (``tf.map_fn``)."""
    return tf.map_fn(lambda args: fn(args[0], args[1]), (seeds, sizes),
                     fn_output_signature=output, parallel_iterations=_PARALLEL_DRAWS)

  def _train_fn(self, initial_weights, x, y, q, sizes, seeds):
    """One chunk: ``(Δ stacked, statistics)`` after every client's τ DP-SGD steps.

    ``x``, ``y``, ``q``: ``[clients, N, ...]``, each client's records first,
    then padding (q = 0); ``sizes``: each client's record count;
    ``seeds``: each client's round seed.
    """
    num_clients, width = tf.shape(q)[0], tf.shape(q)[1]
    weights = stacked_training.stacked_copies(initial_weights, num_clients)
    state = stacked_training.stacked_optimizer_state(self._optimizer, weights)
    expected = tf.reduce_sum(q, axis=1)  # Σ_j q_j, fixed before sampling
    active = expected > 0.0
    zeros = tf.zeros([num_clients], tf.float32)
    loss_sum, sampled, clipped = zeros, zeros, zeros
    shapes = [s.shape for s in self._weight_specs]
    noise_std, clip, head = self._noise_std, self._clip, self._head

    def mask_of(step_seed, n):
      u = tf.random.stateless_uniform(
          [n], seed=tf.random.experimental.stateless_fold_in(step_seed, dp_sgd._SAMPLING_STREAM),  # pylint: disable=protected-access
          dtype=tf.float32)
      return tf.pad(u, [[0, width - n]], constant_values=2.0)  # padding: never sampled

    def noise_of(step_seed, n):
      del n
      noise_seed = tf.random.experimental.stateless_fold_in(step_seed, dp_sgd._NOISE_STREAM)  # pylint: disable=protected-access
      return [tf.random.stateless_normal(
          shape, seed=tf.random.experimental.stateless_fold_in(noise_seed, k),
          stddev=noise_std, dtype=tf.float32) for k, shape in enumerate(shapes)]

    for step in tf.range(self._steps):
      step_seeds = tf.map_fn(
          lambda s: tf.random.experimental.stateless_fold_in(s, tf.cast(step, tf.int64)),
          seeds, parallel_iterations=_PARALLEL_DRAWS)
      u = self._draw(mask_of, step_seeds, sizes, tf.TensorSpec([None], tf.float32))
      taken = tf.cast(u < q, tf.float32)  # [clients, N]; padding has q = 0
      with tf.GradientTape() as tape:
        logits, recorded = self._stacked.forward_recording(weights, x, tape)
        losses, _ = stacked_training.per_example_loss_and_correct(head, y, logits)
        total = tf.reduce_sum(losses)
      dzs = tape.gradient(total, [z for _, z, _ in recorded])
      sq_norms = tf.zeros(tf.shape(losses), tf.float32)
      for (a, _, has_bias), dz in zip(recorded, dzs):
        dz_sq = tf.reduce_sum(tf.square(dz), axis=2)
        sq_norms += tf.reduce_sum(tf.square(a), axis=2) * dz_sq
        if has_bias:
          sq_norms += dz_sq
      norms = tf.sqrt(sq_norms)
      factors = tf.minimum(1.0, clip / tf.maximum(norms, 1e-12)) * taken
      sums = []
      for (a, _, has_bias), dz in zip(recorded, dzs):
        sums.append(tf.einsum("cb,cbi,cbo->cio", factors, a, dz))
        if has_bias:
          sums.append(tf.einsum("cb,cbo->co", factors, dz))
      noise = self._draw(noise_of, step_seeds, sizes,
                         [tf.TensorSpec(s, tf.float32) for s in shapes])
      divisor = tf.maximum(expected, 1e-30)
      noisy = [(g + z) / tf.reshape(divisor, [-1] + [1] * (len(s))) for g, z, s in
               zip(sums, noise, shapes)]
      new_state, updated = self._optimizer.next(state, tuple(weights), tuple(noisy))
      weights = [stacked_training.hold(active, w_new, w) for w_new, w in zip(updated, weights)]
      state = tf.nest.map_structure(lambda a, b: stacked_training.hold(active, a, b),
                                    new_state, state)
      loss_sum += tf.reduce_sum(losses * taken, axis=1)
      sampled += tf.reduce_sum(taken, axis=1)
      clipped += tf.reduce_sum(tf.cast(norms > clip, tf.float32) * taken, axis=1)
    steps = tf.where(active, float(self._steps), 0.0)
    delta = [w0[tf.newaxis] - w for w0, w in zip(initial_weights, weights)]
    stats = dict(loss_sum=tf.where(active, loss_sum, 0.0),
                 sampled=tf.where(active, sampled, 0.0),
                 clipped=tf.where(active, clipped, 0.0),
                 expected_batch=expected * steps, steps=steps)
    return delta, stats

  # -- inputs -----------------------------------------------------------------------------

  @staticmethod
  def _unwrap(client: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, q, secret seed) of one client's records (module docstring)."""
    if isinstance(client, records.RecordArrays):
      x, y, q, seed = client.x, client.y, client.q, client.seed
    elif isinstance(client, tf.data.Dataset):
      x, y, q, seed = (t.numpy() for t in records.collect_records_eagerly(client))
    else:
      raise ClientInputError(
          "the vectorized rPDP-FL client update takes each client's record dataset "
          "(tff_idp.rpdp.records.record_dataset) or tff_idp.rpdp.records.RecordArrays; got "
          f"{type(client).__name__}.")
    return (np.asarray(x), np.asarray(y), np.asarray(q, np.float32),
            np.asarray(seed, np.int64))

  def _with_round_seeds(self, round_num: Any, clients: list[tuple]) -> list[tuple]:
    """``clients`` with each seed replaced by its round seed, folded in for all at once.

    :func:`tff_idp.rpdp.records.round_seed` per client, in one traced call
    (one eager call per client cost ~0.7 ms each on a loaded machine: 0.77 s of a 1.7 s
    cohort update at c = 1,000).
    """
    if not clients:
      return clients
    seeds = _round_seeds(tf.constant(np.stack([c[3] for c in clients])),
                         tf.constant(round_num, tf.int64)).numpy()
    return [(x, y, q, seed) for (x, y, q, _), seed in zip(clients, seeds)]

  @staticmethod
  def _stack(clients: Sequence[tuple], chunk: Sequence[int]) -> tuple[np.ndarray, ...]:
    """``(x, y, q, sizes, seeds)`` of the chunk's clients, padded to its widest client."""
    n = max([len(clients[i][1]) for i in chunk] + [1])
    return (np.stack([_pad(clients[i][0], n) for i in chunk]),
            np.stack([_pad(clients[i][1], n) for i in chunk]),
            np.stack([_pad(clients[i][2].astype(np.float32), n) for i in chunk]),
            np.asarray([len(clients[i][1]) for i in chunk], np.int32),
            np.stack([clients[i][3] for i in chunk]).astype(np.int64))

  # -- for your own TFF computations -----------------------------------------------------

  def cohort_arguments(self, round_num: int, initial_weights: Any,
                       client_datasets: Sequence[Any]) -> tuple:
    """The arguments of :meth:`tff_computation` for a whole cohort (one chunk, in its order).

    Each client's secret seed gets ``round_num`` folded in here
    (:func:`tff_idp.rpdp.records.round_seed`): pass the round the client work
    is in, a new one every round, or the same datasets draw the same noise.
    """
    clients = self._with_round_seeds(round_num, [self._unwrap(c) for c in client_datasets])
    if not clients:
      raise ToolkitValueError("a cohort needs at least one client.")
    trainable = [np.asarray(w) for w in getattr(initial_weights, "trainable", initial_weights)]
    return (trainable, *self._stack(clients, range(len(clients))))

  def tff_computation(self) -> tff.Computation:
    """The vectorized client update as a ``tff.tensorflow.computation``, for your TFF pipelines.

    ``(trainable weights, x [clients, N, ...], y, q [clients, N], sizes
    [clients], round seeds [clients, 2]) -> (Δ, statistics)``, each with a
    leading client axis, as :meth:`__call__` computes them (a client's update
    weight is ``statistics["steps"] > 0``); build the arguments with
    :meth:`cohort_arguments`. Where it is valid: inside a client computation
    that holds a whole cohort of clients (a silo), ``tff.federated_map`` it;
    each client's update is already private at the record level (its own
    Poisson sample and noise σ·L, rPDP-FL Alg. 3), so the silo may sum the
    updates before they leave it. The seeds are secret: they come from each
    client's record dataset (:func:`tff_idp.rpdp.records.record_dataset`).
    """
    types = [tff.types.tensorflow_to_type(s) for s in self._signature]
    train = self._train  # the traced tf.function (AutoGraph turns its step loop into a graph loop)

    def update(initial_weights, x, y, q, sizes, seeds):
      return train(initial_weights, x, y, q, sizes, seeds)

    return tff.tensorflow.computation(update, *types)

  # -- the call ---------------------------------------------------------------------------

  def __call__(self, round_num: Any, initial_weights: Any,
               client_datasets: Sequence[tf.data.Dataset]) -> list[tuple[list, np.float32, Any]]:
    """Per client, in order: (Δ as numpy arrays, 0/1 update weight, statistics)."""
    if not client_datasets:
      return []
    clients = self._with_round_seeds(round_num, [self._unwrap(c) for c in client_datasets])
    trainable = [tf.convert_to_tensor(w) for w in getattr(initial_weights, "trainable",
                                                          initial_weights)]
    # A step holds every record of the client (masked), as one batch of the widest client.
    widest_n = max([len(c[1]) for c in clients] + [1])
    per_client = stacked_training.bytes_per_client(self._weight_specs,
                                                   [[np.arange(widest_n)]], self._widest)
    results: list = [None] * len(clients)
    chunks = cohort_stack.plan_chunks([len(c[1]) for c in clients], per_client,
                                      self._max_chunk_bytes, self._max_chunk_clients)
    for chunk in chunks:
      delta, stats = self._train(trainable, *(tf.constant(a) for a in self._stack(clients, chunk)))
      delta = [d.numpy() for d in delta]
      stats = {k: v.numpy() for k, v in stats.items()}
      for j, i in enumerate(chunk):
        weight = np.float32(stats["steps"][j] > 0)
        results[i] = ([d[j] for d in delta], weight, record_stats.client_stats(
            {k: np.float32(stats[k][j]) for k in record_stats.STAT_KEYS}, weight))
    return results


@tf.function(input_signature=[tf.TensorSpec([None, 2], tf.int64), tf.TensorSpec([], tf.int64)])
def _round_seeds(seeds: tf.Tensor, round_num: tf.Tensor) -> tf.Tensor:
  """:func:`tff_idp.rpdp.records.round_seed` of every row of ``seeds``."""
  return tf.map_fn(lambda seed: records.round_seed(seed, round_num), seeds,
                   parallel_iterations=_PARALLEL_DRAWS)


def _pad(values: np.ndarray, n: int) -> np.ndarray:
  """``values`` with zero rows appended up to ``n`` rows."""
  pad = [(0, n - len(values))] + [(0, 0)] * (values.ndim - 1)
  return np.pad(values, pad)
