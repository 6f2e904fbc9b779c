"""DP mean with adaptive clipping (Andrew et al. 2021) for IDP-FedAvg, and SCALE.

``AdaptiveClipDPMeanFactory`` is a TFF ``WeightedAggregationFactory``. For each
sampled client i with update Δ_i and weight s_i (its clip scale; 1 except for
SCALE) it computes, as in IDP-FedAvg Alg. 2 and Andrew et al. Alg. 1:

    Δ̃_i = Δ_i · min(1, s_i C / ‖Δ_i‖)                    (clip to s_i C)
    b_i  = 1[‖Δ_i‖ <= s_i C] - 1/2                        (centred clip bit)
           (0 for an all-zero update: padding clients are absent)
    Δ̄   = (Σ_i Δ̃_i + N(0, (z_Δ C)² I)) / c               (c = expected cohort)
    b̄   = (Σ_i b_i + N(0, σ_b²)) / c + 1/2
    C'   = C · exp(-η_C (b̄ - γ))                          (geometric update)

The normaliser is the *expected* number of clients per round c, not the
realised one, so the mean's sensitivity is fixed (McMahan et al. 2018). With a
total noise multiplier z, the value noise is z_Δ = (z⁻² - (2σ_b)⁻²)^(-1/2)
(Andrew et al. Thm. 1), so the pair (Δ̄, b̄) is as private as one Gaussian
mechanism with multiplier z: exactly what Alg. 1 calibrates.

Noise is drawn with stateless RNG from a seed kept in the aggregator state,
so runs are reproducible and resume exactly. That is right for simulation; a
deployment must not keep noise seeds where an adversary can read them.
"""
from __future__ import annotations

import collections
import math
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

# Andrew et al. 2021 / TFF ``gaussian_adaptive`` defaults ("standard setup").
DEFAULT_INITIAL_CLIP = 0.1
DEFAULT_TARGET_QUANTILE = 0.5
DEFAULT_CLIP_LEARNING_RATE = 0.2
DEFAULT_CLIPPED_COUNT_STDDEV_FRACTION = 0.05  # σ_b = 0.05 · c


def value_noise_multiplier(noise_multiplier: float, clipped_count_stddev: float) -> float:
  """z_Δ such that (z_Δ, σ_b) together are as private as Gaussian(z) (Andrew et al. Thm. 1)."""
  if noise_multiplier == 0:
    return 0.0
  if noise_multiplier >= 2.0 * clipped_count_stddev:
    raise ValueError(
        f"noise_multiplier={noise_multiplier:.4g} must be below 2·clipped_count_stddev="
        f"{2 * clipped_count_stddev:.4g} for adaptive clipping; raise "
        "clipped_count_stddev (or clients per round).")
  return (noise_multiplier**-2 - (2.0 * clipped_count_stddev)**-2) ** -0.5


class AdaptiveClipDPMeanFactory(tff.aggregators.WeightedAggregationFactory):
  """DP mean with adaptive clipping; the client weight is its clip scale s_i.

  Args:
    noise_multiplier: total noise multiplier z (σ_SAMPLE from Alg. 1).
    expected_clients_per_round: c, the fixed normaliser.
    initial_clip: C at round 0.
    target_unclipped_quantile: γ.
    clip_learning_rate: η_C.
    clipped_count_stddev: σ_b (default 0.05·c).
    noise_seed: seed of the stateless noise RNG (default: drawn at random once
      and stored in the state).
  """

  def __init__(self, noise_multiplier: float, expected_clients_per_round: float,
               initial_clip: float = DEFAULT_INITIAL_CLIP,
               target_unclipped_quantile: float = DEFAULT_TARGET_QUANTILE,
               clip_learning_rate: float = DEFAULT_CLIP_LEARNING_RATE,
               clipped_count_stddev: Optional[float] = None,
               noise_seed: Optional[int] = None):
    if not noise_multiplier >= 0 or math.isinf(noise_multiplier):
      raise ValueError(f"noise_multiplier={noise_multiplier} must be finite and >= 0.")
    if not expected_clients_per_round > 0:
      raise ValueError("expected_clients_per_round must be > 0.")
    if not initial_clip > 0:
      raise ValueError(f"initial_clip={initial_clip} must be > 0.")
    if not 0 <= target_unclipped_quantile <= 1:
      raise ValueError("target_unclipped_quantile must lie in [0, 1].")
    if clipped_count_stddev is None:
      clipped_count_stddev = DEFAULT_CLIPPED_COUNT_STDDEV_FRACTION * expected_clients_per_round
    self.noise_multiplier = float(noise_multiplier)
    self.expected_clients_per_round = float(expected_clients_per_round)
    self.initial_clip = float(initial_clip)
    self.target_unclipped_quantile = float(target_unclipped_quantile)
    self.clip_learning_rate = float(clip_learning_rate)
    self.clipped_count_stddev = float(clipped_count_stddev) if noise_multiplier > 0 else 0.0
    self.value_noise_multiplier = value_noise_multiplier(
        self.noise_multiplier, self.clipped_count_stddev)
    self.noise_seed = noise_seed

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    value_specs = tf.nest.flatten(tff.types.type_to_tf_tensor_specs(value_type))
    z_value = self.value_noise_multiplier
    sigma_b = self.clipped_count_stddev
    c = self.expected_clients_per_round
    gamma = self.target_unclipped_quantile
    eta = self.clip_learning_rate
    initial_clip = self.initial_clip
    fixed_seed = self.noise_seed

    @tff.tensorflow.computation
    def init_fn():
      if fixed_seed is None:
        seed = tf.random.uniform([], minval=0, maxval=2**62, dtype=tf.int64)
      else:
        seed = tf.constant(fixed_seed, tf.int64)
      return collections.OrderedDict(
          clip=tf.constant(initial_clip, tf.float32),
          noise_seed=seed,
          round=tf.constant(0, tf.int64))

    state_type = init_fn.type_signature.result

    @tff.tensorflow.computation(value_type, weight_type, np.float32)
    def clip_at_client(value, clip_scale, clip):
      leaves = tf.nest.flatten(value)
      norm = tf.linalg.global_norm(leaves)
      bound = tf.cast(clip_scale, tf.float32) * clip
      factor = tf.minimum(1.0, bound / tf.maximum(norm, 1e-12))
      clipped = tf.nest.map_structure(lambda v: v * tf.cast(factor, v.dtype), value)
      # An exactly-zero update (a padding client with no data) is "absent": it
      # adds nothing to the sum, the clip count or the client count.
      present = tf.cast(norm > 0.0, tf.float32)
      unclipped = present * (tf.cast(norm <= bound, tf.float32) - 0.5)
      return clipped, unclipped, present

    @tff.tensorflow.computation(state_type, value_type, np.float32, np.float32)
    def noise_at_server(state, value_sum, unclipped_sum, num_clients):
      clip = state["clip"]
      seeds = tf.random.experimental.stateless_split(
          tf.stack([state["noise_seed"], state["round"]]), len(value_specs) + 1)
      leaves = tf.nest.flatten(value_sum)
      noised = []
      for i, (leaf, spec) in enumerate(zip(leaves, value_specs)):
        noise = tf.random.stateless_normal(tf.shape(leaf), seed=seeds[i],
                                           stddev=z_value * clip, dtype=spec.dtype)
        noised.append((leaf + noise) / tf.constant(c, spec.dtype))
      mean = tf.nest.pack_sequence_as(value_sum, noised)
      count_noise = tf.random.stateless_normal([], seed=seeds[-1], stddev=sigma_b)
      unclipped_fraction = (unclipped_sum + count_noise) / c + 0.5
      new_clip = clip * tf.exp(-eta * (unclipped_fraction - gamma))
      new_state = collections.OrderedDict(
          clip=new_clip, noise_seed=state["noise_seed"], round=state["round"] + 1)
      measurements = collections.OrderedDict(
          clip=clip,
          noise_std=z_value * clip,
          mean_noise_std=z_value * clip / c,
          unclipped_fraction=unclipped_fraction,
          num_clients=num_clients)
      return new_state, mean, measurements

    @tff.federated_computation(
        tff.FederatedType(state_type, tff.SERVER),
        tff.FederatedType(value_type, tff.CLIENTS),
        tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      clip = tff.federated_broadcast(state.clip)
      clipped, unclipped, present = tff.federated_map(
          clip_at_client, (value, weight, clip))
      new_state, mean, measurements = tff.federated_map(
          noise_at_server,
          (state, tff.federated_sum(clipped), tff.federated_sum(unclipped),
           tff.federated_sum(present)))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=mean, measurements=measurements)

    return tff.templates.AggregationProcess(
        tff.federated_computation(lambda: tff.federated_eval(init_fn, tff.SERVER)),
        next_fn)
