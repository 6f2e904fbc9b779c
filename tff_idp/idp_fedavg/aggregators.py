"""DP mean with adaptive clipping (Andrew et al. 2021) for IDP-FedAvg, and SCALE.

``AdaptiveClipDPMeanFactory`` is a TFF ``WeightedAggregationFactory``. For each
sampled client i with update Δ_i and weight s_i (its clip scale; 1 except for
SCALE) it computes, as in IDP-FedAvg Alg. 2 and Andrew et al. Alg. 1:

    Δ̃_i = Δ_i · min(1, s_i C / ‖Δ_i‖)                    (clip to s_i C)
    b_i  = s_i · (1[‖Δ_i‖ <= s_i C] - 1/2)                (scaled, centred clip bit)
           (0 for an absent client: all-zero or non-finite update)
    Δ̄   = (Σ_i Δ̃_i + N(0, (z_Δ C)² I)) / c               (c = expected cohort)
    b̄   = (Σ_i b_i + N(0, σ_b²)) / c_s + 1/2             (c_s = E[Σ_i s_i])
    C'   = C · exp(-η_C (b̄ - γ))                          (geometric update)

The normaliser is the *expected* number of clients per round c, not the
realised one, so the mean's sensitivity is fixed (McMahan et al. 2018). With a
total noise multiplier z, the value noise is z_Δ = (z⁻² - (2σ_b)⁻²)^(-1/2)
(Andrew et al. Thm. 1), so the pair (Δ̄, b̄) is as private as one Gaussian
mechanism with multiplier z for a client of scale 1.

**Why the clip bit is scaled by s_i (SCALE).** Adding or removing client i
changes the released pair (Σ Δ̃, Σ b) by at most (s_i C, s_i / 2). Against the
noise (z_Δ C, σ_b) that is an L2 distance of
s_i · sqrt(z_Δ⁻² + (2σ_b)⁻²) = s_i / z, i.e. one Gaussian mechanism with
multiplier z / s_i: exactly what ``accounting.scale`` calibrates and the
ledger charges. An *unscaled* bit (±1/2) would give the multiplier
(s_i² z_Δ⁻² + (2σ_b)⁻²)^(-1/2) < z / s_i, so every group with s_i < 1 would
spend more than it is charged (the D1 leak of the audit). Scaling the bit is
preferred to accounting with that smaller multiplier because it keeps the
calibration independent of σ_b and clips the strict groups less. What the
scaled bits estimate is the s-weighted unclipped fraction; dividing by the
expected weight c_s = Σ_i q_i s_i (``expected_clip_scale_sum``, a constant
fixed before sampling) keeps it an unbiased estimate of a fraction. Without
SCALE every s_i = 1 and c_s = c.

**Robustness.** A client weight is read as a clip scale, and a scale
outside (0, 1] would raise the sensitivity above what was accounted. Such a
weight is a caller error (typically a stock ``build_weighted_fed_avg`` with
its default example-count weighting, whose weight 20 would be read as clip
scale 20): the round **fails** with an ``InvalidArgumentError`` whose message
says to use ``client_weighting=UNIFORM``, :meth:`AdaptiveClipDPMeanFactory.unweighted`
or ``scaled_client_data`` (issue 31; before, the scale was clamped into
[0, 1] and only counted). The one weight 0 accepted is that of an absent
client, whose update is all zero (TFF's client work zeroes a non-finite
delta and gives it weight 0). ``diagnostics/invalid_clip_scales`` stays in
the measurements for the metrics schema; it is always 0 in a round that
completes. A non-finite update is treated as absent (it adds nothing to any
sum) and counted in ``diagnostics/nonfinite_updates``. Un-noised counts live under
``measurements["diagnostics"]``: they are not covered by the DP guarantee.

**Audit canaries** (``accept_canaries=True``, :mod:`tff_idp.audit.client_canaries`).
A client weight w >= ``CANARY_WEIGHT_OFFSET`` marks a canary client of clip
scale w − ``CANARY_WEIGHT_OFFSET`` (clamped into [0, 1] like any scale). A
canary enters the *value* sum exactly like a client (its update, far above
the clip, is clipped to s·C) but not the clip-bit sum nor the client count:
canaries are always clipped, so their bits would drag the adaptive clip up
at every round and wreck utility at audit-sized k, and the final-model audit
cannot observe the bit channel anyway. The normalisers c and c_s stay the
real clients' expected values, and the noise is unchanged, so the real
clients' guarantee and ledger are exactly those of a run without canaries.
Canaries are counted in ``diagnostics/canaries``.

**Noise randomness.** Noise is drawn with stateless RNG from a seed kept in
the aggregator (server) state: secret by default (drawn from OS entropy by
``initialize`` unless ``noise_seed`` is given), checkpointed with the state
for exact resume. Whoever can read that state can subtract the noise, so the
state, like a checkpoint, is as sensitive as the raw updates.
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
# A client weight at or above this marks an audit canary (accept_canaries=True).
CANARY_WEIGHT_OFFSET = 2.0


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
    noise_seed: seed of the stateless noise RNG. Default (None): drawn from OS
      entropy by every ``initialize()`` call, so no two runs share noise. A
      fixed seed makes the noise derivable by anyone who knows it: for tests
      and debugging only.
    expected_clip_scale_sum: c_s = Σ_i q_i s_i, the normaliser of the clip
      bits (default c, right whenever every s_i = 1).
    accept_canaries: read weights >= ``CANARY_WEIGHT_OFFSET`` as audit
      canaries (module docstring): value sum only, no clip bit, not counted.
  """

  def __init__(self, noise_multiplier: float, expected_clients_per_round: float,
               initial_clip: float = DEFAULT_INITIAL_CLIP,
               target_unclipped_quantile: float = DEFAULT_TARGET_QUANTILE,
               clip_learning_rate: float = DEFAULT_CLIP_LEARNING_RATE,
               clipped_count_stddev: Optional[float] = None,
               noise_seed: Optional[int] = None,
               expected_clip_scale_sum: Optional[float] = None,
               accept_canaries: bool = False):
    if not noise_multiplier >= 0 or math.isinf(noise_multiplier):
      raise ValueError(f"noise_multiplier={noise_multiplier} must be finite and >= 0.")
    if not expected_clients_per_round > 0:
      raise ValueError("expected_clients_per_round must be > 0.")
    if not initial_clip > 0:
      raise ValueError(f"initial_clip={initial_clip} must be > 0.")
    if not 0 <= target_unclipped_quantile <= 1:
      raise ValueError("target_unclipped_quantile must lie in [0, 1].")
    if expected_clip_scale_sum is None:
      expected_clip_scale_sum = expected_clients_per_round
    if not 0 < expected_clip_scale_sum <= expected_clients_per_round * (1 + 1e-9):
      raise ValueError(
          f"expected_clip_scale_sum={expected_clip_scale_sum} must lie in (0, c="
          f"{expected_clients_per_round}]: it is Σ_i q_i s_i with clip scales s_i <= 1.")
    if clipped_count_stddev is None:
      clipped_count_stddev = DEFAULT_CLIPPED_COUNT_STDDEV_FRACTION * expected_clients_per_round
    self.noise_multiplier = float(noise_multiplier)
    self.expected_clients_per_round = float(expected_clients_per_round)
    self.expected_clip_scale_sum = float(expected_clip_scale_sum)
    self.initial_clip = float(initial_clip)
    self.target_unclipped_quantile = float(target_unclipped_quantile)
    self.clip_learning_rate = float(clip_learning_rate)
    self.clipped_count_stddev = float(clipped_count_stddev) if noise_multiplier > 0 else 0.0
    self.value_noise_multiplier = value_noise_multiplier(
        self.noise_multiplier, self.clipped_count_stddev)
    self.noise_seed = noise_seed
    self.accept_canaries = bool(accept_canaries)

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    init_fn, noise_at_server = self._server_computations(value_type)
    accept_canaries = self.accept_canaries

    @tff.tensorflow.computation(value_type, weight_type, np.float32)
    def clip_at_client(value, clip_scale, clip):
      return clip_client_update(value, clip_scale, clip, accept_canaries)

    @tff.federated_computation(
        tff.FederatedType(init_fn.type_signature.result, tff.SERVER),
        tff.FederatedType(value_type, tff.CLIENTS),
        tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      clip = tff.federated_broadcast(state.clip)
      clipped, unclipped, diagnostics = tff.federated_map(
          clip_at_client, (value, weight, clip))
      new_state, mean, measurements = tff.federated_map(
          noise_at_server,
          (state, tff.federated_sum(clipped), tff.federated_sum(unclipped),
           tff.federated_sum(diagnostics)))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=mean, measurements=measurements)

    return tff.templates.AggregationProcess(
        tff.federated_computation(lambda: tff.federated_eval(init_fn, tff.SERVER)),
        next_fn)

  def create_presummed(self, value_type) -> "PresummedDPMean":
    """This DP mean split for a cohort trained at once in this process (issue 35).

    :meth:`create`'s ``next`` clips every client in a TFF client computation
    and sums the results with ``tff.federated_sum``; at c = 1,000 clients that
    per-client shipping is most of a vectorized round. The returned
    :class:`PresummedDPMean` does the same two steps in two parts: the
    clients' part, :func:`clip_client_update` (the same function) on a
    stacked cohort, summed in this process; and the server part, the same
    ``noise_at_server`` computation (noise once per round from the state's
    seed, the adaptive clip update) as a TFF computation on the sums. Its
    state and measurements are :meth:`create`'s, so checkpoints and metrics
    are interchangeable. Not for canaries (they run as TFF client work only).
    """
    if self.accept_canaries:
      raise ValueError("the presummed DP mean takes no audit canaries; use create().")
    return PresummedDPMean(self, value_type)

  def _diagnostics_type(self):
    return CANARY_DIAGNOSTICS_TYPE if self.accept_canaries else DIAGNOSTICS_TYPE

  def _server_computations(self, value_type):
    """``(init_fn, noise_at_server)``: the state's initializer and the server's noising step.

    ``noise_at_server(state, Σ_i Δ̃_i, Σ_i b_i, Σ diagnostics)`` adds the
    value noise N(0, (z_Δ C)² I) and the clip-bit noise N(0, σ_b²) from
    stateless draws seeded by (state seed, round), divides by c and c_s and
    updates C (module docstring). Shared by :meth:`create` and
    :meth:`create_presummed`, so both release exactly the same mechanism.
    """
    value_specs = tf.nest.flatten(tff.types.type_to_tf_tensor_specs(value_type))
    z_value = self.value_noise_multiplier
    sigma_b = self.clipped_count_stddev
    c = self.expected_clients_per_round
    c_s = self.expected_clip_scale_sum
    gamma = self.target_unclipped_quantile
    eta = self.clip_learning_rate
    initial_clip = self.initial_clip
    fixed_seed = self.noise_seed

    @tff.tensorflow.computation
    def init_fn():
      if fixed_seed is None:
        # An op seed of 0 with no graph seed: TensorFlow seeds this draw from
        # OS entropy at every execution, so each initialize() differs.
        seed = tf.random.uniform([], minval=0, maxval=2**62, dtype=tf.int64)
      else:
        seed = tf.constant(fixed_seed, tf.int64)
      return collections.OrderedDict(
          clip=tf.constant(initial_clip, tf.float32),
          noise_seed=seed,
          round=tf.constant(0, tf.int64))

    state_type = init_fn.type_signature.result

    @tff.tensorflow.computation(state_type, value_type, np.float32, self._diagnostics_type())
    def noise_at_server(state, value_sum, unclipped_sum, diagnostics):
      clip = state["clip"]
      seeds = tf.random.experimental.stateless_split(
          tf.stack([state["noise_seed"], state["round"]]), len(value_specs) + 1)
      leaves = tf.nest.flatten(value_sum)
      noised = []
      for i, (leaf, spec) in enumerate(zip(leaves, value_specs)):
        noise = tf.random.stateless_normal(tf.shape(leaf), seed=seeds[i],
                                           stddev=tf.cast(z_value * clip, spec.dtype),
                                           dtype=spec.dtype)
        noised.append((leaf + noise) / tf.constant(c, spec.dtype))
      mean = tf.nest.pack_sequence_as(value_sum, noised)
      count_noise = tf.random.stateless_normal([], seed=seeds[-1], stddev=sigma_b)
      unclipped_fraction = (unclipped_sum + count_noise) / c_s + 0.5
      new_clip = clip * tf.exp(-eta * (unclipped_fraction - gamma))
      new_state = collections.OrderedDict(
          clip=new_clip, noise_seed=state["noise_seed"], round=state["round"] + 1)
      measurements = collections.OrderedDict(
          clip=clip,
          noise_std=z_value * clip,
          mean_noise_std=z_value * clip / c,
          unclipped_fraction=unclipped_fraction,
          diagnostics=diagnostics)
      return new_state, mean, measurements

    return init_fn, noise_at_server

  def unweighted(self) -> "UnweightedAdaptiveClipDPMeanFactory":
    """This DP mean as an ``UnweightedAggregationFactory`` (every client at clip scale 1).

    For stock ``tff.learning.algorithms.build_unweighted_fed_avg(...,
    model_aggregator=factory.unweighted())`` and any other unweighted slot.
    """
    return UnweightedAdaptiveClipDPMeanFactory(self)


class UnweightedAdaptiveClipDPMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """:class:`AdaptiveClipDPMeanFactory` with every client's weight (clip scale) fixed to 1.

  The process is the weighted one's, fed weight 1 for every client at the
  clients: the same state, noise, clip update and measurements. SCALE's
  per-client clip scales need the weighted factory.
  """

  def __init__(self, weighted: AdaptiveClipDPMeanFactory):
    if not isinstance(weighted, AdaptiveClipDPMeanFactory):
      raise TypeError(f"expected an AdaptiveClipDPMeanFactory, got {type(weighted).__name__}.")
    self.weighted = weighted

  def create(self, value_type) -> tff.templates.AggregationProcess:
    inner = self.weighted.create(value_type, tff.TensorType(np.float32))

    @tff.tensorflow.computation(value_type)
    def unit_weight(value):
      del value
      return tf.constant(1.0, tf.float32)

    @tff.federated_computation(inner.next.type_signature.parameter[0],
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      return inner.next(state, value, tff.federated_map(unit_weight, value))

    return tff.templates.AggregationProcess(inner.initialize, next_fn)


# Clients clipped at once by PresummedDPMean.client_sums: bounds the stacked
# copy of their updates (4,096 clients of the MLP's 4,554 parameters: 75 MB).
PRESUMMED_CHUNK_CLIENTS = 4096


class PresummedDPMean:
  """:class:`AdaptiveClipDPMeanFactory`'s mechanism for a cohort trained in this process.

  Built by :meth:`AdaptiveClipDPMeanFactory.create_presummed` (its
  docstring). A round is ``sums = client_sums(state, updates, weights)``
  then ``server_next(state, sums)``, which returns what the factory's
  ``AggregationProcess.next(state, updates, weights)`` returns (the same
  state, mean and measurements, to float tolerance: only the order of the
  sums differs). ``client_sums`` runs :func:`clip_client_update` on every
  client (``tf.vectorized_map``; a scale outside (0, 1] fails the round as
  there) and sums the clipped updates, the scaled clip bits and the
  diagnostic counts; nothing random happens there. ``server_next`` is the
  factory's ``noise_at_server`` as a TFF computation on the sums.
  """

  def __init__(self, factory: AdaptiveClipDPMeanFactory, value_type):
    init_fn, noise_at_server = factory._server_computations(value_type)  # pylint: disable=protected-access
    state_type = init_fn.type_signature.result
    self.sums_type = tff.StructWithPythonType(
        [("value_sum", value_type), ("unclipped_sum", np.float32),
         ("diagnostics", DIAGNOSTICS_TYPE)], collections.OrderedDict)
    self.initialize = tff.federated_computation(
        lambda: tff.federated_eval(init_fn, tff.SERVER))

    @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                               tff.FederatedType(self.sums_type, tff.SERVER))
    def server_next(state, sums):
      new_state, mean, measurements = tff.federated_map(
          noise_at_server, (state, sums.value_sum, sums.unclipped_sum, sums.diagnostics))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=mean, measurements=measurements)

    self.server_next = server_next
    self._value_specs = tff.types.type_to_tf_tensor_specs(value_type)
    leaves = tf.nest.flatten(self._value_specs)
    stacked = [tf.TensorSpec([None, *spec.shape], spec.dtype) for spec in leaves]
    self._clip_and_sum = tf.function(
        _clip_and_sum_cohort,
        input_signature=[stacked, tf.TensorSpec([None], tf.float32),
                         tf.TensorSpec([], tf.float32)])

  def client_sums(self, state, updates, weights) -> collections.OrderedDict:
    """(Σ_i Δ̃_i, Σ_i b_i, Σ diagnostics) of a cohort at the state's clip C (module docstring).

    ``updates``: one update per client (its leaves as arrays, in the value
    type's structure); ``weights``: one clip scale per client. Clients are
    clipped in chunks of :data:`PRESUMMED_CHUNK_CLIENTS`; an empty cohort
    sums to zeros.
    """
    if len(updates) != len(weights):
      raise ValueError(f"{len(updates)} updates but {len(weights)} weights.")
    clip = tf.constant(state["clip"], tf.float32)
    leaf_specs = tf.nest.flatten(self._value_specs)
    value_sum = [np.zeros(spec.shape, spec.dtype.as_numpy_dtype) for spec in leaf_specs]
    unclipped_sum = np.float32(0.0)
    diagnostics = collections.OrderedDict(
        (name, np.float32(0.0)) for name in DIAGNOSTIC_NAMES)
    for start in range(0, len(updates), PRESUMMED_CHUNK_CLIENTS):
      chunk = [tf.nest.flatten(u) for u in updates[start:start + PRESUMMED_CHUNK_CLIENTS]]
      stacked = [np.stack([client[k] for client in chunk]).astype(spec.dtype.as_numpy_dtype)
                 for k, spec in enumerate(leaf_specs)]
      scales = np.asarray(weights[start:start + PRESUMMED_CHUNK_CLIENTS], np.float32)
      sums, unclipped, counts = self._clip_and_sum(stacked, scales, clip)
      value_sum = [total + part.numpy() for total, part in zip(value_sum, sums)]
      unclipped_sum = np.float32(unclipped_sum + unclipped.numpy())
      for name in diagnostics:
        diagnostics[name] = np.float32(diagnostics[name] + counts[name].numpy())
    return collections.OrderedDict(
        value_sum=tf.nest.pack_sequence_as(self._value_specs, value_sum),
        unclipped_sum=unclipped_sum, diagnostics=diagnostics)


def _clip_and_sum_cohort(stacked_leaves, clip_scales, clip):
  """:func:`clip_client_update` on each client of a stacked cohort, then the three sums."""

  def one_client(args):
    leaves, scale = args
    return clip_client_update(list(leaves), scale, clip)

  clipped, unclipped, diagnostics = tf.vectorized_map(
      one_client, (list(stacked_leaves), clip_scales), fallback_to_while_loop=False)
  return ([tf.reduce_sum(leaf, axis=0) for leaf in clipped], tf.reduce_sum(unclipped),
          collections.OrderedDict((k, tf.reduce_sum(v)) for k, v in diagnostics.items()))


# Un-noised per-round counts (not covered by the DP guarantee).
DIAGNOSTIC_NAMES = ("num_clients", "nonfinite_updates", "invalid_clip_scales")
DIAGNOSTICS_TYPE = tff.StructWithPythonType(
    [(name, np.float32) for name in DIAGNOSTIC_NAMES], collections.OrderedDict)
CANARY_DIAGNOSTICS_TYPE = tff.StructWithPythonType(
    [(name, np.float32) for name in (*DIAGNOSTIC_NAMES, "canaries")], collections.OrderedDict)


INVALID_WEIGHT_MESSAGE = (
    "AdaptiveClipDPMeanFactory reads each client's update weight as its clip scale, "
    "which must lie in (0, 1] (0 only for an absent client with an all-zero update); "
    "a stock weighted FedAvg weights by example counts: build it with "
    "client_weighting=tff.learning.ClientWeighting.UNIFORM, or use "
    "build_unweighted_fed_avg(model_aggregator=factory.unweighted()), or give SCALE "
    "clients their clip scale with tff_idp.scaled_client_data.")


def clip_client_update(value, clip_scale, clip, accept_canaries: bool = False):
  """One client's contribution (Δ̃_i, b_i) and its diagnostic counts (plain TF).

  See the module docstring: the update is clipped to s_i·C and the centred
  clip bit is scaled by s_i, so the pair's sensitivity is s_i·(C, 1/2). A
  scale outside (0, 1] fails the round (``INVALID_WEIGHT_MESSAGE``), except
  weight 0 with an all-zero update (an absent client); a non-finite update
  is absent.
  With ``accept_canaries``, a weight >= ``CANARY_WEIGHT_OFFSET`` is a canary:
  clipped the same way, but with no clip bit and not counted as a client.
  """
  leaves = tf.nest.flatten(value)
  raw_scale = tf.cast(clip_scale, tf.float32)
  is_canary = tf.constant(False)
  if accept_canaries:
    is_canary = raw_scale >= CANARY_WEIGHT_OFFSET
    raw_scale = tf.where(is_canary, raw_scale - CANARY_WEIGHT_OFFSET, raw_scale)
  all_zero = tf.reduce_all([tf.reduce_all(tf.equal(v, 0)) for v in leaves])
  in_unit_interval = tf.logical_and(raw_scale > 0.0, raw_scale <= 1.0)
  absent = tf.logical_and(tf.equal(raw_scale, 0.0), all_zero)
  check = tf.debugging.Assert(
      tf.logical_or(in_unit_interval, absent),
      [INVALID_WEIGHT_MESSAGE, "weight:", raw_scale])
  with tf.control_dependencies([check]):
    raw_scale = tf.identity(raw_scale)
  scale_is_valid = tf.logical_or(in_unit_interval, absent)
  scale = tf.clip_by_value(tf.where(tf.math.is_nan(raw_scale), 0.0, raw_scale), 0.0, 1.0)
  finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in leaves])
  norm = tf.where(finite, tf.cast(_global_norm(
      [tf.where(tf.math.is_finite(v), v, tf.zeros_like(v)) for v in leaves]), tf.float32), 0.0)
  bound = scale * clip
  factor = tf.minimum(1.0, bound / tf.maximum(norm, 1e-12))
  # tf.where, not a product: 0 · inf would be NaN.
  clipped = tf.nest.map_structure(
      lambda v: tf.where(finite, v * tf.cast(factor, v.dtype), tf.zeros_like(v)), value)
  # An exactly-zero update (a padding client with no data) or a non-finite
  # one is "absent": it adds nothing to the sum, the clip bits or the count.
  present = tf.cast(tf.logical_and(finite, norm > 0.0), tf.float32)
  real = 1.0 - tf.cast(is_canary, tf.float32)
  unclipped = real * present * scale * (tf.cast(norm <= bound, tf.float32) - 0.5)
  diagnostics = collections.OrderedDict(
      num_clients=real * present,
      nonfinite_updates=1.0 - tf.cast(finite, tf.float32),
      invalid_clip_scales=1.0 - tf.cast(scale_is_valid, tf.float32))
  if accept_canaries:
    diagnostics["canaries"] = (1.0 - real) * present
  return clipped, unclipped, diagnostics


def _global_norm(leaves):
  """‖(leaves)‖₂ as ``tf.linalg.global_norm`` computes it, in ops ``tf.vectorized_map`` converts.

  (``global_norm`` sums ``l2_loss`` halves, and ``L2Loss`` has no
  vectorized form, so :class:`PresummedDPMean` could not clip a stacked
  cohort with it.)
  """
  return tf.sqrt(tf.reduce_sum(tf.stack([tf.reduce_sum(tf.square(v)) for v in leaves])))

