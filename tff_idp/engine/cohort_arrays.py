"""A client's local data as arrays, and a whole cohort's data orders in one call (issue 35).

The vectorized client execution (:mod:`tff_idp.engine.cohort_stack`) trains a
round's clients from arrays, not from one ``tf.data`` pipeline per client:
building and iterating a pipeline costs milliseconds per client, more than a
small model's whole local training. :class:`ClientArrays` is what a client
hands it: its examples and the recipe of its local data order, the recipe
every toolkit client pipeline follows::

    Dataset.from_tensor_slices(examples)
        .shuffle(shuffle_buffer, seed=shuffle_seed, reshuffle_each_iteration=True)
        .repeat(epochs).batch(batch_size)

:func:`cohort_orders` computes every client's example order of that recipe
with **one** ``tf.data`` pipeline for the whole cohort (``flat_map`` over the
clients' sizes and seeds), so each client sees exactly the order its own
pipeline gives (tested element for element), at ~0.1 ms per client instead
of ~5 ms. :func:`examples_of_dataset` turns any client dataset (unbatched,
or batched as in the recipe) into its arrays, once, for a cache.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
# The global seed a tf.function's shuffle seeds combine with (no public getter in TF 2.14).
from tensorflow.python.eager import context

from tff_idp import client_arrays


@dataclasses.dataclass(frozen=True)
class ClientArrays:
  """One client's round input for the vectorized execution (module docstring's recipe).

  Attributes:
    examples: feature name -> array whose first axis is the example (e.g.
      ``OrderedDict(x=float32[n, d], y=int32[n])``); n may be 0.
    shuffle_seed: the ``tf.data`` shuffle seed; None: no shuffle.
    epochs: passes over the examples (``repeat``).
    batch_size: examples per local step (``batch``; the last step may hold fewer,
      and batches run across epoch boundaries as ``repeat().batch()`` does).
    shuffle_buffer: the shuffle's buffer size (the toolkit's clients use 1024).
  """

  examples: Mapping[str, np.ndarray]
  shuffle_seed: Optional[int]
  epochs: int
  batch_size: int
  shuffle_buffer: int = 1024

  @property
  def num_examples(self) -> int:
    return int(len(next(iter(self.examples.values()))))

  def dataset(self) -> tf.data.Dataset:
    """The same data as the ``tf.data`` pipeline the recipe describes (per-client executions)."""
    ds = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(self.examples))
    if self.shuffle_seed is not None:
      ds = ds.shuffle(self.shuffle_buffer, seed=self.shuffle_seed,
                      reshuffle_each_iteration=True)
    return ds.repeat(self.epochs).batch(self.batch_size)


def cohort_orders(clients: Sequence[ClientArrays]) -> list[np.ndarray]:
  """Each client's example indices in local-training order (all its epochs), in one pipeline.

  Equal to iterating each client's own pipeline (``ClientArrays.dataset``),
  because ``tf.data``'s shuffle order depends only on the element count, the
  buffer and the seed, not on the elements: the pipeline shuffles the
  indices ``range(n)`` of every client with the client's seed.
  """
  if not clients:
    return []
  sizes = np.asarray([c.num_examples for c in clients], np.int64)
  epochs = np.asarray([c.epochs for c in clients], np.int64)
  seeds = np.asarray([c.shuffle_seed or 0 for c in clients], np.int64)
  # A buffer of 1 keeps the order: the unshuffled clients' recipe.
  buffers = np.asarray([1 if c.shuffle_seed is None else c.shuffle_buffer for c in clients],
                       np.int64)
  lengths = sizes * epochs
  if not lengths.sum():
    return [np.zeros([0], np.int64) for _ in clients]
  flat = _orders_fn()(tf.constant(sizes), tf.constant(seeds), tf.constant(buffers),
                      tf.constant(epochs), tf.constant(int(lengths.sum()), tf.int64)).numpy()
  return np.split(flat, np.cumsum(lengths)[:-1])


_ORDERS_FNS: dict = {}


def _orders_fn() -> Callable:
  """The cohort-orders function traced under the current global seed (one trace per seed).

  A shuffle seed combines with the global seed (``tf.random.set_seed``) when
  the pipeline is built: eagerly for the clients' own pipelines, at tracing
  for a ``tf.function``. One traced function per global seed therefore gives
  the eager pipelines' orders (tested with and without a global seed) and
  saves re-tracing the per-client pipeline each round (~35 ms).
  """
  global_seed = context.global_seed()
  fn = _ORDERS_FNS.get(global_seed)
  if fn is None:
    vector = tf.TensorSpec([None], tf.int64)
    fn = _ORDERS_FNS[global_seed] = tf.function(
        _orders_pipeline, input_signature=[vector] * 4 + [tf.TensorSpec([], tf.int64)])
  return fn


def _orders_pipeline(sizes, seeds, buffers, epochs, total):
  ds = tf.data.Dataset.from_tensor_slices((sizes, seeds, buffers, epochs)).flat_map(
      lambda n, seed, buffer, e: tf.data.Dataset.range(n).shuffle(
          buffer, seed=seed, reshuffle_each_iteration=True).repeat(e))
  return ds.batch(total).get_single_element()


def examples_of_dataset(dataset: tf.data.Dataset) -> collections.OrderedDict:
  """A client dataset's examples as numpy arrays (first axis: the example), in its order.

  Takes an unbatched dataset of ``OrderedDict`` examples, read as one batch
  in one call (~3 ms a client on 2 cores, as much as building its pipeline;
  iterating it cost ~15-20 ms), or a batched one (every feature's first
  dimension unknown; its batches are concatenated). An empty dataset gives
  arrays with 0 rows of the element spec's shape and dtype.
  """
  spec = dataset.element_spec
  batched = all(s.shape.rank and s.shape[0] is None for s in spec.values())
  options = tf.data.Options()
  options.autotune.enabled = False  # a one-off read: the autotuner costs more than it wins
  if batched:
    rows = [r for r in dataset.with_options(options).as_numpy_iterator()]
  else:
    try:
      rows = [dataset.batch(_ALL_EXAMPLES).with_options(options).get_single_element()]
      rows = [{k: v.numpy() for k, v in rows[0].items()}]
    except tf.errors.InvalidArgumentError:  # no element at all
      rows = []
  out = collections.OrderedDict()
  for key, s in spec.items():
    if rows:
      out[key] = np.concatenate([r[key] for r in rows])
    else:
      shape = s.shape[1:] if batched else s.shape
      out[key] = np.zeros([0] + [int(d or 0) for d in shape], s.dtype.as_numpy_dtype)
  return out


_ALL_EXAMPLES = 2**62
"""A batch size no client reaches: the whole client in one batch (tf.data reserves at most 65,536)."""


class ExampleCache:
  """Every client's examples as arrays, read from its ``ClientData`` once (first use).

  ``cache(client_id)`` is :func:`examples_of_dataset` of
  ``client_data.create_tf_dataset_for_client(client_id)`` (its unshuffled
  examples, in the order the client's own pipeline shuffles). Reading a
  client costs one pipeline iteration (milliseconds); later rounds reuse it.
  A ``ClientData`` marked by :func:`tff_idp.client_arrays.attach` (splits from
  ``datasets.from_arrays``, saved splits, the embedded federations) is read
  from its arrays directly, with no pipeline (microseconds a client).
  The cache holds at most the federation's training data, once, which is
  what a run over tabular data (the vectorized execution's models) can hold.
  """

  def __init__(self, client_data: Any):
    self._client_data = client_data
    self._direct = client_arrays.of(client_data)
    self._examples: dict[str, collections.OrderedDict] = {}

  def __call__(self, client_id: str) -> collections.OrderedDict:
    found = self._examples.get(client_id)
    if found is None:
      if self._direct is not None:
        found = collections.OrderedDict(self._direct(client_id))
      else:
        found = examples_of_dataset(self._client_data.create_tf_dataset_for_client(client_id))
      self._examples[client_id] = found
    return found

  def empty(self) -> collections.OrderedDict:
    """0 examples of the federation's element structure (a padding client's input)."""
    spec = self._client_data.element_type_structure
    return collections.OrderedDict(
        (k, np.zeros([0] + [int(d or 0) for d in s.shape], s.dtype.as_numpy_dtype))
        for k, s in spec.items())
