"""A cohort's local steps as padded, masked index tensors, chunked to bound memory (issue 35).

Vectorized client training runs step s of every client of a chunk at once.
:func:`stack_steps` lays the clients' data orders
(:func:`tff_idp.engine.cohort_arrays.cohort_orders`, cut into batches by
:func:`order_batches`) out as one gather index
``[clients, steps, batch]`` into the chunk's concatenated examples, with a
mask that is 1 on real examples and 0 on padding. Padding points at one extra
all-zero example row and is masked out of every loss, gradient and metric,
so it contributes nothing; a client with fewer steps than the longest of its
chunk simply takes no step there (its weights and optimizer state are held).

**Memory.** The examples are gathered one step at a time inside the training
function, so a chunk holds its clients' examples once (not once per epoch),
the ``[clients, steps, batch]`` int32 index and mask, and per client its
stacked weights, optimizer state and one step's activations.
:func:`plan_chunks` sorts the cohort by step count (bucketing by size: a chunk
pads only to its own longest client) and cuts it into consecutive chunks of
at most ``max_chunk_bytes`` of that per-client memory (and at most
``max_chunk_clients`` clients), so a cohort of any size trains in bounded
memory; results are returned in the cohort's order.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Sequence

import numpy as np

DEFAULT_MAX_CHUNK_BYTES = 256 * 2**20
"""Per-chunk budget of the per-client memory above (256 MiB)."""
DEFAULT_MAX_CHUNK_CLIENTS = 4096
"""At most this many clients per chunk."""


@dataclasses.dataclass(frozen=True)
class StackedSteps:
  """One chunk's local steps, ready for a vectorized training function.

  Attributes:
    examples: feature -> ``[total + 1, ...]`` array: the chunk's clients'
      examples concatenated, then one all-zero padding row.
    index: int32 ``[clients, steps, batch]``: row of ``examples`` of each
      client's step's batch slot (the padding row where the mask is 0).
    mask: float32 ``[clients, steps, batch]``: 1 on real examples.
  """

  examples: Mapping[str, np.ndarray]
  index: np.ndarray
  mask: np.ndarray

  @property
  def num_steps(self) -> int:
    return int(self.index.shape[1])


def order_batches(order: np.ndarray, batch_size: int) -> list[np.ndarray]:
  """A client's order (all epochs) cut into its local steps' batches, as ``batch(B)`` cuts it.

  Batches run across epoch boundaries, as ``repeat(epochs).batch(B)`` does;
  the last batch may be short.
  """
  b = int(batch_size)
  return [order[i:i + b] for i in range(0, len(order), b)]


def stack_steps(examples: Sequence[Mapping[str, np.ndarray]],
                batches: Sequence[Sequence[np.ndarray]]) -> StackedSteps:
  """Client i's step s trains on ``examples[i][batches[i][s]]`` (module docstring).

  ``examples`` are the chunk's clients' example arrays (same keys, shapes and
  dtypes); ``batches[i]`` is client i's local steps, each an index array into
  its own examples (any sizes: a short last batch, or uneven batches of a
  dataset batched before it was repeated).
  """
  if len(examples) != len(batches) or not examples:
    raise ValueError("stack_steps needs the batches of every client and at least one client.")
  sizes = np.asarray([len(next(iter(e.values()))) for e in examples], np.int64)
  offsets = np.concatenate([[0], np.cumsum(sizes)])
  pad_row = int(offsets[-1])
  steps = max([len(b) for b in batches] + [1])
  width = max([len(batch) for b in batches for batch in b] + [1])
  index = np.full((len(batches), steps, width), pad_row, np.int32)
  mask = np.zeros((len(batches), steps, width), np.float32)
  for i, client in enumerate(batches):
    for s, batch in enumerate(client):
      index[i, s, :len(batch)] = batch + offsets[i]
      mask[i, s, :len(batch)] = 1.0
  stacked = {}
  for key in examples[0]:
    parts = [np.asarray(e[key]) for e in examples]
    zero = np.zeros((1,) + parts[0].shape[1:], parts[0].dtype)
    stacked[key] = np.concatenate(parts + [zero])
  return StackedSteps(stacked, index, mask)


def plan_chunks(step_counts: Sequence[int], bytes_per_client: int,
                max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
                max_chunk_clients: int = DEFAULT_MAX_CHUNK_CLIENTS) -> list[np.ndarray]:
  """The cohort's positions in chunks (module docstring): sorted by steps, then cut.

  ``bytes_per_client`` is one client's stacked weights, optimizer state and
  step activations; a chunk holds at most ``max_chunk_bytes // bytes_per_client``
  clients (at least 1) and at most ``max_chunk_clients``. The sort is stable,
  so equal-sized clients keep their cohort order.
  """
  if not len(step_counts):
    return []
  per_chunk = max(1, min(int(max_chunk_clients),
                         int(max_chunk_bytes) // max(1, int(bytes_per_client))))
  order = np.argsort(np.asarray(step_counts), kind="stable")
  return [order[i:i + per_chunk] for i in range(0, len(order), per_chunk)]


def chunk_count(num_clients: int, bytes_per_client: int,
                max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES,
                max_chunk_clients: int = DEFAULT_MAX_CHUNK_CLIENTS) -> int:
  """How many chunks :func:`plan_chunks` makes of ``num_clients`` clients."""
  per_chunk = max(1, min(int(max_chunk_clients),
                         int(max_chunk_bytes) // max(1, int(bytes_per_client))))
  return math.ceil(num_clients / per_chunk)
