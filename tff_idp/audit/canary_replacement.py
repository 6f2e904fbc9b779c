"""Record-level gradient canaries as rPDP-FL's replaced-record hook.

Andrew et al., "One-shot Empirical Privacy Estimation for Federated
Learning" (ICLR 2024), applied to records: a canary record is Poisson-sampled
at its own q_j like any record, and its clipped gradient is replaced by
L_j·u_j, its clip threshold times its fixed unit direction
(:func:`tff_idp.audit.directions.canary_direction`): a contribution of
exactly the clip norm. It plugs into the local step through
:class:`tff_idp.rpdp.dp_sgd.RecordReplacement`, so the family's code holds no
audit code.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from tff_idp.audit import directions
from tff_idp.rpdp import per_example


class CanaryReplacement:
  """Replaces a batch's canary records by L_j·u_j (a ``RecordReplacement``).

  ``seeds``: int64 [k, 2] direction seeds (:func:`directions.canary_seeds`);
  canary row r has direction ``canary_direction(seeds[r])``.
  """

  def __init__(self, seeds: np.ndarray):
    table = np.asarray(seeds, np.int64)
    if table.ndim != 2 or table.shape[1] != 2:
      raise ValueError(f"canary seeds must be int64 [k, 2] (got shape {table.shape}).")
    self.seeds = table
    self.num_rows = int(table.shape[0])

  def __call__(self, canary_index: tf.Tensor, thresholds: tf.Tensor
               ) -> Callable[[list], per_example.ExampleReplacement]:
    """``canary_index``: int32 [B] (−1 = real record); ``thresholds``: float32 [B] L_j."""
    seeds_table = tf.constant(self.seeds)

    def make(variables: list) -> per_example.ExampleReplacement:
      specs = [tf.TensorSpec(v.shape, v.dtype) for v in variables]
      is_canary = canary_index >= 0
      rows = tf.boolean_mask(canary_index, is_canary)
      scales = tf.boolean_mask(thresholds, is_canary)
      seeds = tf.gather(seeds_table, rows)

      def body(i, acc):
        u = directions.canary_direction(seeds[i], specs)
        return i + 1, [a + tf.cast(scales[i], a.dtype) * d for a, d in zip(acc, u)]

      _, sums = tf.while_loop(
          lambda i, _: i < tf.shape(rows)[0], body,
          (tf.constant(0), [tf.zeros(s.shape, s.dtype) for s in specs]))
      return per_example.ExampleReplacement(
          replaced=is_canary, sums={v.ref(): g for v, g in zip(variables, sums)})

    return make
