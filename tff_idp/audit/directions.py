"""Canary directions and the cosine test statistic (Andrew et al., ICLR 2024, §3-4).

A canary j owns a random unit direction u_j in model space, drawn isotropically
(i.i.d. standard normal coordinates, normalised to global L2 norm 1 over all
trainable tensors) from a stateless seed. The same seed regenerates the same
direction inside a TFF client computation (where the canary's update is built)
and at the end of the run (where the cosine is measured), so no direction is
ever shipped or stored.

The audit's test statistic for canary j is cos(U, u_j), where U is the final
model delta θ_0 − θ_T in TFF's update convention (initial − final trainable
weights), accumulated over every round the canaries could join. A canary that
was never inserted has cos ~ N(0, 1/d) approximately; an inserted one is
shifted by its clipped contributions (Andrew et al. Thm. 3.1).

The canary seeds are the *auditor's* randomness, not the run's privacy
randomness: knowing them reveals nothing about real clients.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import tensorflow as tf

_SEED_DOMAIN = 0x5EED_CA7A  # separates canary directions from every other stream


def canary_seeds(audit_seed: int, num_canaries: int) -> np.ndarray:
  """int64 [num_canaries, 2] stateless seeds, one per canary, from the audit seed."""
  if num_canaries < 0:
    raise ValueError(f"num_canaries={num_canaries} must be >= 0.")
  return np.stack([np.full(num_canaries, _SEED_DOMAIN, np.int64),
                   np.int64(audit_seed) * 1_000_003 + np.arange(num_canaries, dtype=np.int64)],
                  axis=1).astype(np.int64)


def canary_direction(seed, specs: Sequence[tf.TensorSpec]) -> list[tf.Tensor]:
  """The unit direction u_j of the canary with int64[2] ``seed``, over ``specs``' leaves.

  Plain TF (usable inside a ``tf.function`` or a TFF computation): i.i.d.
  N(0, 1) coordinates from ``tf.random.stateless_normal``, divided by their
  global L2 norm, so ‖u_j‖ = 1 over all leaves together.
  """
  seed = tf.cast(seed, tf.int64)
  leaf_seeds = tf.random.experimental.stateless_split(seed, len(specs))
  leaves = [tf.random.stateless_normal(spec.shape, seed=leaf_seeds[i], dtype=tf.float32)
            for i, spec in enumerate(specs)]
  norm = tf.linalg.global_norm(leaves)
  return [tf.cast(leaf / norm, spec.dtype) for leaf, spec in zip(leaves, specs)]


def leaf_specs(leaves: Sequence) -> list[tf.TensorSpec]:
  """TensorSpecs (shape, float32) of a list of arrays or tensors."""
  return [tf.TensorSpec(np.shape(v), tf.float32) for v in leaves]


def canary_cosines(model_delta: Sequence, seeds: np.ndarray) -> np.ndarray:
  """cos(U, u_j) for every canary seed: U = ``model_delta`` (a list of arrays).

  Computed one canary at a time, so memory stays O(d) whatever the number of
  canaries. Returns float64 [k]. A zero model delta has no direction: raises.
  """
  leaves = [tf.constant(np.asarray(v, np.float32)) for v in model_delta]
  norm = float(tf.linalg.global_norm(leaves).numpy())
  if not np.isfinite(norm) or norm == 0.0:
    raise ValueError(f"the model delta has norm {norm}: no cosine can be measured "
                     "(did the run train at all?).")
  specs = leaf_specs(leaves)

  @tf.function
  def dot(seed):
    direction = canary_direction(seed, specs)
    return tf.add_n([tf.reduce_sum(tf.cast(u, tf.float64) * tf.cast(v, tf.float64))
                     for u, v in zip(direction, leaves)])

  seeds = np.asarray(seeds, np.int64).reshape(-1, 2)
  return np.array([float(dot(tf.constant(s))) / norm for s in seeds], np.float64)


def model_delta(process: Any, state: Any) -> list[np.ndarray]:
  """θ₀ − θ_T of a run (TFF's update convention), over the trainable weights.

  θ₀ comes from ``process.initialize()``, so model initialisation must be
  deterministic (seeded initialisers, as ``tff_idp.models`` builds them);
  two initialisations that differ raise ValueError.
  """
  first = process.get_model_weights(process.initialize()).trainable
  second = process.get_model_weights(process.initialize()).trainable
  if any(not np.array_equal(a, b) for a, b in zip(first, second)):
    raise ValueError("process.initialize() gives different model weights each call: the "
                     "audit needs θ₀, so seed the model's initialisers.")
  final = process.get_model_weights(state).trainable
  return [np.asarray(a, np.float64) - np.asarray(b, np.float64)
          for a, b in zip(first, final)]
