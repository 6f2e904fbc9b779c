"""rPDP-FL's client data: one client's records with their rates and the round's seed.

A client's data is a ``tf.data.Dataset`` of record batches with the model's
features and labels plus two fields (:func:`record_dataset`):

* ``q``: float32 [B], each record's current sampling rate (0 = excluded);
* ``seed``: int64 [B, 2], the client's seed for this round, repeated on every
  record so that the element stays a plain batch (TFF client data must be a
  sequence). It drives the client's record sampling and DP-SGD noise, so it
  is the client's secret: it lives in client-placed data that no server
  computation reads.

Both client executions read it: the TFF client work with
:func:`collect_records` inside its computation, the in-process one with
:func:`collect_records_eagerly`.

**Fresh randomness every round, whatever the caller feeds** (issue 31). The
seed in the data is never used as is: both executions fold the process's
round counter (the client work's server state, broadcast to the clients)
into it with :func:`round_seed`. A stock TFF loop that feeds the *same*
client datasets every round (``tff.learning.programs.train_model``,
``DatasetDataSource``) therefore still draws fresh record samples and fresh
DP-SGD noise each round; identical noise in two rounds would cancel when the
two updates are differenced.

**Fresh randomness every run** (issue 48). The counter starts at a secret
drawn at every ``initialize()``
(:func:`tff_idp.engine.tff_composition.round_counter`), so two runs on the
same dataset objects (a sweep over the clip norm, a restart with a new
``initialize()``) draw independent noise, also with
``record_dataset(seed=None)``, whose seed is drawn once per dataset.
"""
from __future__ import annotations

import collections
import dataclasses
import secrets
from typing import Optional

import numpy as np
import tensorflow as tf

RATE_KEY = "q"
SEED_KEY = "seed"
CANARY_KEY = "canary"


def record_element_spec(input_spec, with_canaries: bool = False) -> collections.OrderedDict:
  """The model's (x, y) batch spec plus per-record ``q`` and ``seed`` (and ``canary``)."""
  x_spec, y_spec = (input_spec["x"], input_spec["y"]) if isinstance(input_spec, dict) \
      else input_spec
  spec = collections.OrderedDict(
      x=x_spec, y=y_spec,
      q=tf.TensorSpec([None], tf.float32),
      seed=tf.TensorSpec([None, 2], tf.int64))
  if with_canaries:
    spec[CANARY_KEY] = tf.TensorSpec([None], tf.int32)
  return spec


def secret_client_seed() -> tuple[int, int]:
  """A fresh stateless seed from OS entropy (``secrets``): never derivable from a user's seed."""
  return (secrets.randbits(63), secrets.randbits(63))


def round_seed(seed: tf.Tensor, round_num: tf.Tensor) -> tf.Tensor:
  """The seed a client draws with in one round: its data's seed with the counter folded in.

  ``stateless_fold_in(seed, counter)``, where ``round_num`` is the client
  work's seed counter (the run's secret start plus the round): distinct
  rounds and distinct runs give independent streams even when ``seed``
  repeats (module doc).
  """
  return tf.random.experimental.stateless_fold_in(tf.cast(seed, tf.int64),
                                                  tf.cast(round_num, tf.int64))


def record_dataset(x: np.ndarray, y: np.ndarray, q: np.ndarray,
                   seed: Optional[tuple[int, int]] = None,
                   batch_size: int = 512,
                   canary_index: Optional[np.ndarray] = None) -> tf.data.Dataset:
  """One client's records with their rates and the client's secret seed, batched.

  ``seed``: two integers, the client's secret (the toolkit's driver derives
  one per client and round from the run's secret). ``None`` (default) draws
  a fresh one from OS entropy. Either way the process folds its round
  counter into it (module doc), so reusing the dataset in later rounds
  never repeats the noise.

  ``canary_index`` (int32 [N], −1 = real record) adds the ``canary`` field of
  an audit process (module doc); without it the dataset is the plain one.
  """
  if seed is None:
    seed = secret_client_seed()
  seed_array = np.asarray(seed)
  if seed_array.shape != (2,) or not np.issubdtype(seed_array.dtype, np.integer):
    raise ValueError(f"seed must be two integers (a stateless RNG seed) or None; got {seed!r}.")
  n = len(y)
  if not len(x) == len(q) == n:
    raise ValueError(f"x, y and q must have one row per record (got {len(x)}, {n}, {len(q)}).")
  seeds = np.broadcast_to(np.asarray(seed, dtype=np.int64), (n, 2))
  fields = collections.OrderedDict(x=x, y=y, q=np.asarray(q, np.float32), seed=seeds)
  if canary_index is not None:
    if len(canary_index) != n:
      raise ValueError(f"canary_index must have one entry per record (got "
                       f"{len(canary_index)} for {n}).")
    fields[CANARY_KEY] = np.asarray(canary_index, np.int32)
  return tf.data.Dataset.from_tensor_slices(fields).batch(batch_size)


@dataclasses.dataclass(frozen=True)
class RecordArrays:
  """One client's round input as arrays, for the vectorized execution (no ``tf.data`` read).

  The same records, rates and seed :func:`record_dataset` would carry
  (:meth:`dataset` gives that dataset, for the per-client executions). The
  seed is the client's secret; the process still folds its round counter in.
  """

  x: np.ndarray
  y: np.ndarray
  q: np.ndarray
  seed: np.ndarray

  def __post_init__(self):
    seed = np.asarray(self.seed)
    if seed.shape != (2,) or not np.issubdtype(seed.dtype, np.integer):
      raise ValueError(f"seed must be two integers (a stateless RNG seed); got {self.seed!r}.")
    if not len(self.x) == len(self.y) == len(self.q):
      raise ValueError(f"x, y and q must have one row per record (got {len(self.x)}, "
                       f"{len(self.y)}, {len(self.q)}).")
    object.__setattr__(self, "seed", seed.astype(np.int64))
    object.__setattr__(self, "q", np.asarray(self.q, np.float32))

  def dataset(self, batch_size: int = 512) -> tf.data.Dataset:
    """The same client as :func:`record_dataset` builds it."""
    return record_dataset(self.x, self.y, self.q, tuple(self.seed), batch_size)


def collect_records(dataset: tf.data.Dataset):
  """Concatenates every batch of a client's dataset into whole tensors.

  Returns (x, y, q, seed), plus the ``canary`` indices last when the dataset
  has that field.
  """
  spec = dataset.element_spec
  keys = ("x", "y", "q", "seed") + ((CANARY_KEY,) if CANARY_KEY in spec else ())

  def empty(s):
    return tf.zeros([0] + s.shape.as_list()[1:], s.dtype)

  initial = tuple(empty(spec[k]) for k in keys)

  def concat(state, batch):
    return tuple(tf.concat([s, batch[k]], axis=0) for s, k in zip(state, keys))

  x, y, q, seeds, *rest = dataset.reduce(initial, concat)
  seed = tf.cond(tf.shape(seeds)[0] > 0, lambda: seeds[0],
                 lambda: tf.zeros([2], tf.int64))
  return (x, y, q, seed, *rest)


def collect_records_eagerly(dataset: tf.data.Dataset, options: Optional[tf.data.Options] = None):
  """:func:`collect_records` in eager mode (no ``reduce``): (x, y, q, seed) as tensors."""
  if options is not None:
    dataset = dataset.with_options(options)
  spec = dataset.element_spec
  keys = ("x", "y", RATE_KEY, SEED_KEY)
  batches = list(dataset)
  if not batches:
    x, y, q, seeds = (tf.zeros([0] + spec[k].shape.as_list()[1:], spec[k].dtype) for k in keys)
  else:
    x, y, q, seeds = (tf.concat([b[k] for b in batches], axis=0) if len(batches) > 1
                      else batches[0][k] for k in keys)
  seed = seeds[0] if int(tf.shape(seeds)[0]) > 0 else tf.zeros([2], tf.int64)
  return x, y, q, seed
