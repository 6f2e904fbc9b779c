"""AdaptiveClipDPMeanFactory: exact clipping arithmetic, noise statistics, clip update,
and the privacy of what it actually releases (SCALE included)."""
import collections
import math

import numpy as np
import pytest

tff = pytest.importorskip("tensorflow_federated")

from tff_idp.idp_fedavg import aggregators  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.usefixtures("tff_runtime")

VALUE_TYPE = tff.to_type(collections.OrderedDict(
    a=tff.TensorType(np.float32, [2000]), b=tff.TensorType(np.float32, [2])))
WEIGHT_TYPE = tff.TensorType(np.float32)


def _value(a_fill, b):
  return collections.OrderedDict(a=np.full(2000, a_fill, np.float32),
                                 b=np.asarray(b, np.float32))


def test_type_signatures():
  process = aggregators.AdaptiveClipDPMeanFactory(0.5, 30).create(VALUE_TYPE, WEIGHT_TYPE)
  assert str(process.initialize.type_signature) == (
      "( -> <clip=float32,noise_seed=int64,round=int64>@SERVER)")
  assert str(process.next.type_signature.result.result) == (
      "<a=float32[2000],b=float32[2]>@SERVER")
  assert str(process.next.type_signature.result.measurements) == (
      "<clip=float32,noise_std=float32,mean_noise_std=float32,"
      "unclipped_fraction=float32,diagnostics=<num_clients=float32,"
      "nonfinite_updates=float32,invalid_clip_scales=float32>>@SERVER")


def test_zero_noise_clipping_is_exact():
  # Noise multiplier 0: result = Σ_i clip(Δ_i, s_i C) / c.
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=4, initial_clip=1.0, clip_learning_rate=0.0)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  state = process.initialize()
  # ‖Δ_1‖ = 5 (b = [3, 4]), scale 1 -> clipped to norm 1: b = [0.6, 0.8].
  # ‖Δ_2‖ = 0.5, scale 1 -> unchanged.
  # ‖Δ_3‖ = 5, scale 0.5 -> clipped to norm 0.5: b = [0.3, 0.4].
  values = [_value(0.0, [3, 4]), _value(0.0, [0.3, 0.4]), _value(0.0, [3, 4])]
  out = process.next(state, values, [1.0, 1.0, 0.5])
  np.testing.assert_allclose(out.result["b"], np.array([0.6 + 0.3 + 0.3, 0.8 + 0.4 + 0.4]) / 4,
                             rtol=1e-6)
  np.testing.assert_array_equal(out.result["a"], np.zeros(2000))
  # One of three is unclipped; the bits are scaled by s_i; with σ_b = 0 the
  # estimate is exact: b̄ = Σ s_i(b_i - 1/2)/c_s + 1/2 = (0.5 - 0.5 - 0.25)/4 + 0.5.
  assert out.measurements["unclipped_fraction"] == pytest.approx(0.4375)
  assert out.measurements["diagnostics"]["num_clients"] == 3


def test_noise_std_matches_sigma_times_clip():
  """Empirical std of the noised mean over 10 rounds × 2002 coordinates.

  Relative standard error of a std estimate from n=20,020 Gaussian draws is
  1/sqrt(2n) = 0.5%; the 3% tolerance is 6 standard errors (seeded anyway).
  """
  z, c, clip = 1.2, 30.0, 0.7
  factory = aggregators.AdaptiveClipDPMeanFactory(
      z, c, initial_clip=clip, clip_learning_rate=0.0, noise_seed=11)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  state = process.initialize()
  draws = []
  for _ in range(10):
    out = process.next(state, [_value(0.0, [0, 0])], [1.0])
    state = out.state
    draws.append(np.concatenate([out.result["a"], out.result["b"]]))
  expected_value_multiplier = (z**-2 - (2 * 0.05 * c)**-2) ** -0.5
  expected_std = expected_value_multiplier * clip / c
  assert np.std(np.concatenate(draws)) == pytest.approx(expected_std, rel=0.03)
  assert out.measurements["mean_noise_std"] == pytest.approx(expected_std, rel=1e-5)
  # The released σ of the sum is z_value·C at this round's C (here C = 0.7, not 1).
  assert out.measurements["noise_std"] == pytest.approx(expected_value_multiplier * clip, rel=1e-5)
  assert out.measurements["clip"] == pytest.approx(clip)
  # Successive rounds use fresh noise.
  assert not np.allclose(draws[0], draws[1])


def test_noise_is_reproducible_from_the_seed():
  process = aggregators.AdaptiveClipDPMeanFactory(1.0, 30, noise_seed=5).create(
      VALUE_TYPE, WEIGHT_TYPE)
  a = process.next(process.initialize(), [_value(0.1, [1, 1])], [1.0]).result
  b = process.next(process.initialize(), [_value(0.1, [1, 1])], [1.0]).result
  np.testing.assert_array_equal(a["a"], b["a"])


def test_clip_follows_the_target_quantile():
  # All updates have norm 10 >> C = 0.1: the unclipped fraction is ~0, so the
  # clip grows by exp(η γ) per round (no count noise: σ_b = 0 with z = 0).
  factory = aggregators.AdaptiveClipDPMeanFactory(0.0, 10, initial_clip=0.1,
                                                  clip_learning_rate=0.2)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  state = process.initialize()
  big = [_value(0.0, [6, 8])] * 10
  for _ in range(3):
    state = process.next(state, big, [1.0] * 10).state
  assert state["clip"] == pytest.approx(0.1 * math.exp(0.2 * 0.5) ** 3, rel=1e-5)


def test_empty_cohort_still_releases_noise():
  process = aggregators.AdaptiveClipDPMeanFactory(1.0, 30, noise_seed=1).create(
      VALUE_TYPE, WEIGHT_TYPE)
  out = process.next(process.initialize(), [], [])
  assert out.measurements["diagnostics"]["num_clients"] == 0
  assert np.std(out.result["a"]) > 0


def test_value_noise_multiplier_and_errors():
  # Andrew et al. Thm 1: z^-2 = z_Δ^-2 + (2σ_b)^-2.
  zd = aggregators.value_noise_multiplier(1.0, 1.5)
  assert zd**-2 + 3.0**-2 == pytest.approx(1.0)
  with pytest.raises(ValueError, match="clipped_count_stddev"):
    aggregators.value_noise_multiplier(1.0, 0.5)
  with pytest.raises(ValueError, match="noise_multiplier"):
    aggregators.AdaptiveClipDPMeanFactory(-1.0, 30)
  with pytest.raises(ValueError, match="initial_clip"):
    aggregators.AdaptiveClipDPMeanFactory(1.0, 30, initial_clip=0.0)


def test_all_zero_updates_are_absent():
  # Padding clients send exactly zero: no effect on sum, clip count or count.
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=4, initial_clip=1.0, clip_learning_rate=0.0)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  real = [_value(0.0, [3, 4]), _value(0.0, [0.3, 0.4])]
  base = process.next(process.initialize(), real, [1.0, 1.0])
  padded = process.next(process.initialize(), real + [_value(0.0, [0, 0])] * 3,
                        [1.0] * 5)
  np.testing.assert_allclose(padded.result["b"], base.result["b"])
  assert padded.measurements["diagnostics"]["num_clients"] == 2
  assert padded.measurements["unclipped_fraction"] == pytest.approx(
      base.measurements["unclipped_fraction"])


def test_default_noise_seed_is_fresh_per_initialize():
  """No fixed seed: every run draws its own secret noise seed (audit D2)."""
  process = aggregators.AdaptiveClipDPMeanFactory(1.0, 30).create(VALUE_TYPE, WEIGHT_TYPE)
  seeds = {int(process.initialize()["noise_seed"]) for _ in range(8)}
  assert len(seeds) == 8
  # Drawn from all of [0, 2^62): 8 draws all below 2^40 have probability 2^-176,
  # while a seed from a small range (say [0, 124)) could be found by trying them all.
  assert all(0 <= seed < 2**62 for seed in seeds) and max(seeds) > 2**40
  a = process.next(process.initialize(), [_value(0.1, [1, 1])], [1.0]).result
  b = process.next(process.initialize(), [_value(0.1, [1, 1])], [1.0]).result
  assert not np.allclose(a["a"], b["a"])


def test_nonfinite_update_is_absent_and_counted():
  """One client sending inf/NaN must not turn the aggregate into NaN (audit D4)."""
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=4, initial_clip=1.0, clip_learning_rate=0.0)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  real = [_value(0.0, [3, 4]), _value(0.0, [0.3, 0.4])]
  base = process.next(process.initialize(), real, [1.0, 1.0])
  bad = [_value(np.inf, [1, 1]), _value(0.0, [np.nan, 1.0]), _value(-np.inf, [0, 0])]
  out = process.next(process.initialize(), real + bad, [1.0] * 5)
  assert np.all(np.isfinite(out.result["a"])) and np.all(np.isfinite(out.result["b"]))
  np.testing.assert_allclose(out.result["b"], base.result["b"])
  np.testing.assert_array_equal(out.result["a"], np.zeros(2000))
  assert out.measurements["unclipped_fraction"] == pytest.approx(
      base.measurements["unclipped_fraction"])
  assert out.measurements["diagnostics"]["nonfinite_updates"] == 3
  assert out.measurements["diagnostics"]["num_clients"] == 2
  assert out.state["clip"] == pytest.approx(1.0)


@pytest.mark.parametrize("scale", [5.0, 20.0, np.inf, -2.0, np.nan, 1.5])
def test_a_weight_outside_the_unit_interval_fails_the_round(scale):
  """Privacy (issue 31 item 3): a weight that is not a clip scale in (0, 1] is refused loudly.

  Bug caught: clamping it into [0, 1] silently (as before issue 31), which
  let a stock weighted FedAvg's example-count weights pass as clip scales.
  The error names the fixes (client_weighting=UNIFORM, unweighted()).
  """
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=1, initial_clip=1.0, clip_learning_rate=0.0)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  with pytest.raises(Exception, match="client_weighting=tff.learning.ClientWeighting.UNIFORM"):
    process.next(process.initialize(), [_value(0.0, [30, 40])], [scale])


def test_valid_scales_and_absent_clients_pass():
  """A scale in (0, 1] clips to s·C; weight 0 is accepted only with an all-zero update."""
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=1, initial_clip=1.0, clip_learning_rate=0.0)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  big = _value(0.0, [30, 40])  # norm 50
  for scale in (0.5, 1.0):
    out = process.next(process.initialize(), [big], [scale])
    assert np.linalg.norm(out.result["b"]) == pytest.approx(scale, abs=1e-6)
    assert out.measurements["diagnostics"]["invalid_clip_scales"] == 0.0
  out = process.next(process.initialize(), [big, _value(0.0, [0, 0])], [1.0, 0.0])
  assert out.measurements["diagnostics"]["num_clients"] == 1.0
  with pytest.raises(Exception, match="clip scale"):
    process.next(process.initialize(), [big], [0.0])


def test_unweighted_factory_equals_the_weighted_one_at_weight_one():
  """``factory.unweighted()`` is an UnweightedAggregationFactory with every weight 1."""
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.5, expected_clients_per_round=20, initial_clip=1.0, noise_seed=7)
  unweighted = factory.unweighted()
  assert isinstance(unweighted, tff.aggregators.UnweightedAggregationFactory)
  weighted_process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  process = unweighted.create(VALUE_TYPE)
  values = [_value(0.01, [3, 4]), _value(-0.02, [0.3, 0.4])]
  want = weighted_process.next(weighted_process.initialize(), values, [1.0, 1.0])
  got = process.next(process.initialize(), values)
  np.testing.assert_array_equal(want.result["a"], got.result["a"])
  np.testing.assert_array_equal(want.result["b"], got.result["b"])
  assert want.state["clip"] == got.state["clip"]


def test_expected_clip_scale_sum_is_checked():
  with pytest.raises(ValueError, match="expected_clip_scale_sum"):
    aggregators.AdaptiveClipDPMeanFactory(1.0, 30, expected_clip_scale_sum=31.0)
  with pytest.raises(ValueError, match="expected_clip_scale_sum"):
    aggregators.AdaptiveClipDPMeanFactory(1.0, 30, expected_clip_scale_sum=0.0)


def test_clip_count_noise_std_is_sigma_b_measured_from_draws():
  """The released unclipped fraction carries count noise of std σ_b, i.e. σ_b/c_s after the mean.

  Measured, not read (issue 32): one absent client (all-zero update), so
  each round's ``unclipped_fraction − ½`` is the count noise / c_s alone;
  200 rounds draw fresh noise (the round is folded into the seed). With
  σ_b = 2 and c_s = 4 the std is 0.5; the sample std of 200 normal draws
  lies within ±25% with probability > 1 − 1e-6 (its relative sd is 5%).
  Bug caught: count noise of std σ_b/c_s (4× too little: the clip-bit
  channel would spend more privacy than Andrew et al.'s split accounts for).
  """
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.5, expected_clients_per_round=4, initial_clip=1.0, clip_learning_rate=0.0,
      clipped_count_stddev=2.0)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  state = process.initialize()
  draws = []
  for _ in range(200):
    out = process.next(state, [_value(0.0, [0.0, 0.0])], [1.0])
    state = out.state
    draws.append(out.measurements["unclipped_fraction"] - 0.5)
  assert np.std(draws, ddof=1) == pytest.approx(2.0 / 4.0, rel=0.25)
  assert abs(np.mean(draws)) < 5 * 0.5 / math.sqrt(200)


def test_count_noise_is_independent_of_every_value_noise():
  """The clip-bit count noise is drawn from its own seed, not from a value leaf's.

  Each round releases the noised sum (one noise draw per value leaf) and the
  noised clip-bit count; Andrew et al.'s accounting of the pair assumes the
  two noises are independent. With one absent client (zero update, so the
  sums are noise alone), round r gives the standardised count noise
  m_r = (unclipped_fraction − ½)·c_s/σ_b and each leaf's first noise
  coordinate n_r = mean·c/(z_value·C). Over 60 rounds the sample correlation
  of independent normals has sd 1/√60 ≈ 0.13, so |corr| < 0.6 fails with
  probability < 1e-5 per leaf (the noise seed is fixed: the test is
  deterministic). Bug caught: the count drawn from a leaf's seed (seeds[1],
  seeds[-2], or a split into too few seeds), which makes it equal to that
  leaf's first noise coordinate (correlation 1).
  """
  z, c, sigma_b = 1.0, 4.0, 2.0
  factory = aggregators.AdaptiveClipDPMeanFactory(
      z, expected_clients_per_round=c, initial_clip=1.0, clip_learning_rate=0.0,
      clipped_count_stddev=sigma_b, noise_seed=7)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  state = process.initialize()
  counts, leaves = [], {"a": [], "b": []}
  for _ in range(60):
    out = process.next(state, [_value(0.0, [0.0, 0.0])], [1.0])
    state = out.state
    counts.append((out.measurements["unclipped_fraction"] - 0.5) * c / sigma_b)
    for key in leaves:
      leaves[key].append(out.result[key][0] * c / (factory.value_noise_multiplier * 1.0))
  assert np.std(counts) > 0.5  # the count noise is really there
  for key, draws in leaves.items():
    assert abs(np.corrcoef(counts, draws)[0, 1]) < 0.6, key


def test_canaries_add_their_clipped_update_but_no_clip_bit_and_are_not_counted():
  """With accept_canaries, a weight CANARY_WEIGHT_OFFSET + s is an audit canary at clip scale s.

  Property (σ = 0, exact): the canary's update is clipped to s·C and added to
  the sum; it adds no clip bit (the unclipped fraction is the real client's
  alone) and is counted under ``canaries``, not ``num_clients``. Without
  accept_canaries the same weight is an invalid clip scale and fails the
  round. Bugs caught: the flag not reaching the client-side clipping (the
  canary then fails the round or is counted as a client), and the canary
  diagnostics type dropped.
  """
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=2, initial_clip=1.0, clip_learning_rate=0.0,
      accept_canaries=True)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  assert "canaries=float32" in str(process.next.type_signature.result.measurements)
  canary_weight = aggregators.CANARY_WEIGHT_OFFSET + 0.5
  # Real client: norm 5 > C = 1, clipped to [0.6, 0.8], bit −½. Canary: norm 5, scale ½: [0.3, 0.4].
  out = process.next(process.initialize(), [_value(0.0, [3, 4]), _value(0.0, [3, 4])],
                     [1.0, canary_weight])
  np.testing.assert_allclose(out.result["b"], np.array([0.9, 1.2]) / 2, rtol=1e-6)
  assert out.measurements["unclipped_fraction"] == pytest.approx(-0.5 / 2 + 0.5)
  assert out.measurements["diagnostics"]["num_clients"] == 1
  assert out.measurements["diagnostics"]["canaries"] == 1
  plain = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=2, initial_clip=1.0).create(VALUE_TYPE, WEIGHT_TYPE)
  with pytest.raises(Exception, match="clip scale"):
    plain.next(plain.initialize(), [_value(0.0, [3, 4])], [canary_weight])


def test_an_absent_canary_at_the_offset_passes_and_canaries_need_the_flag():
  """A canary at weight CANARY_WEIGHT_OFFSET (scale 0) with a zero update is absent, as a
  client at weight 0 is; the plain-TF client step refuses a canary weight unless asked.

  Bugs caught: ``>`` for ``>=`` at the offset (the absent canary then fails
  the round as an invalid weight of 2), and ``clip_client_update``
  accepting canaries by default (any caller that forgets the flag would let
  a weight ≥ 2 through as a canary instead of failing loudly).
  """
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=2, initial_clip=1.0, clip_learning_rate=0.0,
      accept_canaries=True)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  out = process.next(process.initialize(), [_value(0.0, [0, 0])],
                     [aggregators.CANARY_WEIGHT_OFFSET])
  assert out.measurements["diagnostics"]["canaries"] == 0
  assert out.measurements["diagnostics"]["invalid_clip_scales"] == 0
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  value = collections.OrderedDict(a=tf.zeros([2000]), b=tf.constant([3.0, 4.0]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="clip scale"):
    aggregators.clip_client_update(value, tf.constant(aggregators.CANARY_WEIGHT_OFFSET + 0.5),
                                   tf.constant(1.0))


def test_float64_weights_get_float64_noise_and_mean():
  """A model with float64 weights: the noise is drawn and the mean divided in float64.

  Bug caught: the noise drawn or the normaliser built in the default
  float32, which fails on a float64 leaf (a type error at the first round).
  """
  value_type = tff.to_type(collections.OrderedDict(w=tff.TensorType(np.float64, [50])))
  process = aggregators.AdaptiveClipDPMeanFactory(1.0, 30.0, noise_seed=3).create(
      value_type, WEIGHT_TYPE)
  out = process.next(process.initialize(),
                     [collections.OrderedDict(w=np.full(50, 0.01, np.float64))], [1.0])
  assert out.result["w"].dtype == np.float64
  assert np.std(out.result["w"]) > 0


def test_the_target_quantile_and_cohort_are_checked_at_their_edges():
  """γ may be any quantile in [0, 1] (both ends included) and nothing else; c must be > 0.

  Bugs caught: an off-by-one edge (γ = 0 or γ = 1 refused, γ = 1.5 accepted)
  and a cohort of 0 accepted (the mean would divide by 0).
  """
  for gamma in (0.0, 1.0):
    assert aggregators.AdaptiveClipDPMeanFactory(
        1.0, 30, target_unclipped_quantile=gamma).target_unclipped_quantile == gamma
  for gamma in (-0.1, 1.5):
    with pytest.raises(ValueError, match="target_unclipped_quantile"):
      aggregators.AdaptiveClipDPMeanFactory(1.0, 30, target_unclipped_quantile=gamma)
  with pytest.raises(ValueError, match="expected_clients_per_round"):
    aggregators.AdaptiveClipDPMeanFactory(1.0, 0.0)


def test_an_update_shorter_than_one_is_clipped_to_the_bound_exactly():
  """C = 0.1 and an update of norm 0.5 (σ = 0): the mean is the update scaled to norm 0.1.

  Bug caught: the norm floored at 1 instead of a tiny guard (1e-12) in
  factor = min(1, C/max(‖Δ‖, ·)), which clips every update shorter than 1
  too hard (the zero-noise test's norms are 5 and 0.5 against C = 1).
  """
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=1, initial_clip=0.1, clip_learning_rate=0.0)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  out = process.next(process.initialize(), [_value(0.0, [0.3, 0.4])], [1.0])
  np.testing.assert_allclose(out.result["b"], [0.06, 0.08], rtol=1e-6)


def test_an_update_exactly_at_the_clip_counts_as_unclipped():
  """Andrew et al.'s clip bit is 1[‖Δ‖ ≤ C]: an update of norm exactly C = 1 is unclipped.

  With σ = 0 and one client the released fraction is exact: 1 for a bit of 1,
  0 for a bit of 0. Bug caught: ``<`` for ``<=`` in the bit.
  """
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.0, expected_clients_per_round=1, initial_clip=1.0, clip_learning_rate=0.0)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  out = process.next(process.initialize(), [_value(0.0, [0.0, 1.0])], [1.0])
  assert out.measurements["unclipped_fraction"] == pytest.approx(1.0)


# -- the presummed form (issue 35): the same mechanism on a cohort clipped and summed here --

def _cohort(rng, n, clip=1.0):
  """n updates of norms spread around the clip, with an absent, a non-finite and an exact-C one."""
  values = []
  for i in range(n):
    norm = clip * float(rng.choice([0.2, 0.9, 1.0, 1.5, 4.0]))
    a = rng.normal(size=2000).astype(np.float32)
    b = rng.normal(size=2).astype(np.float32)
    scale = norm / math.sqrt(float(np.sum(a.astype(np.float64)**2) + np.sum(b.astype(np.float64)**2)))
    values.append(collections.OrderedDict(a=a * np.float32(scale), b=b * np.float32(scale)))
  # The first client is a real one (a sum that skipped it would differ); then an
  # absent client, a non-finite one and one of norm exactly C.
  if n > 1:
    values[1] = _value(0.0, [0.0, 0.0])
  if n > 2:
    values[2]["a"][3] = np.inf
  if n > 3:
    values[3] = _value(0.0, [0.6 * clip, 0.8 * clip])
  return values


def _presummed_round(factory, state, values, weights):
  presummed = factory.create_presummed(VALUE_TYPE)
  return presummed.server_next(state, presummed.client_sums(state, values, weights))


def _assert_outputs_close(expected, actual):
  np.testing.assert_allclose(actual.result["a"], expected.result["a"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(actual.result["b"], expected.result["b"], rtol=1e-5, atol=1e-6)
  for key in ("clip", "noise_std", "mean_noise_std", "unclipped_fraction"):
    assert actual.measurements[key] == pytest.approx(expected.measurements[key], rel=1e-5)
  assert actual.measurements["diagnostics"] == expected.measurements["diagnostics"]
  assert actual.state["noise_seed"] == expected.state["noise_seed"]
  assert actual.state["round"] == expected.state["round"]
  assert actual.state["clip"] == pytest.approx(expected.state["clip"], rel=1e-6)


def test_presummed_rounds_equal_the_aggregation_process():
  """Property: ``create_presummed`` releases what ``create().next`` releases, round after round.

  Three rounds of 9 clients (clip scales in (0, 1], an absent client of weight 0,
  a non-finite one, one at exactly ‖Δ‖ = C) with a fixed seed: the noised mean,
  the clip update, the measurements and the state agree to float tolerance (the
  sums are added in another order). Bugs caught: any difference in clipping,
  clip bits, their scaling, the diagnostic counts, the noise or its round seed.
  """
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.7, expected_clients_per_round=8, initial_clip=1.0, clipped_count_stddev=2.0,
      noise_seed=5)
  process = factory.create(VALUE_TYPE, WEIGHT_TYPE)
  rng = np.random.default_rng(3)
  state = process.initialize()
  for _ in range(3):
    values = _cohort(rng, 9, clip=float(state["clip"]))
    weights = [0.5, 0.0, 1.0, 1.0, 0.25, 1.0, 0.75, 0.1, 1.0]
    expected = process.next(state, values, weights)
    _assert_outputs_close(expected, _presummed_round(factory, state, values, weights))
    state = expected.state


def test_presummed_chunks_and_an_empty_cohort(monkeypatch):
  """Chunks of 2 clients sum to the one-chunk result; no client gives the process's empty round."""
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.5, expected_clients_per_round=4, initial_clip=1.0, clipped_count_stddev=1.0,
      noise_seed=9)
  presummed = factory.create_presummed(VALUE_TYPE)
  state = presummed.initialize()
  values = _cohort(np.random.default_rng(4), 7)
  weights = [0.3, 0.0, 1.0, 1.0, 1.0, 0.6, 1.0]
  whole = presummed.client_sums(state, values, weights)
  monkeypatch.setattr(aggregators, "PRESUMMED_CHUNK_CLIENTS", 2)
  chunked = presummed.client_sums(state, values, weights)
  np.testing.assert_allclose(chunked["value_sum"]["a"], whole["value_sum"]["a"], atol=1e-6)
  np.testing.assert_allclose(chunked["value_sum"]["b"], whole["value_sum"]["b"], atol=1e-6)
  assert chunked["unclipped_sum"] == pytest.approx(whole["unclipped_sum"], abs=1e-6)
  assert chunked["diagnostics"] == whole["diagnostics"]
  assert whole["diagnostics"]["num_clients"] == 5  # 7 less the absent and the non-finite
  expected = factory.create(VALUE_TYPE, WEIGHT_TYPE).next(state, [], [])
  _assert_outputs_close(expected, _presummed_round(factory, state, [], []))


@pytest.mark.parametrize("bad_weight", [1.5, -0.5, float("nan"), 20.0])
def test_presummed_refuses_a_weight_it_cannot_account_for(bad_weight):
  """A clip scale outside (0, 1] fails the round with the factory's message, as in TFF."""
  factory = aggregators.AdaptiveClipDPMeanFactory(0.5, 4, clipped_count_stddev=1.0,
                                                  noise_seed=1)
  presummed = factory.create_presummed(VALUE_TYPE)
  state = presummed.initialize()
  values = _cohort(np.random.default_rng(5), 3)
  with pytest.raises(Exception, match="client_weighting=tff.learning.ClientWeighting.UNIFORM"):
    presummed.client_sums(state, values, [1.0, 1.0, bad_weight])
  with pytest.raises(ValueError, match="^3 updates but 2 weights.$"):
    presummed.client_sums(state, values, [1.0, 1.0])


def test_presummed_takes_no_canaries_and_draws_fresh_noise_every_round():
  """Canary factories are refused; two rounds on the same sums release different noise."""
  with pytest.raises(ValueError, match=r"^the presummed DP mean takes no audit canaries; "
                                       r"use create\(\)\.$"):
    aggregators.AdaptiveClipDPMeanFactory(0.5, 4, clipped_count_stddev=1.0,
                                          accept_canaries=True).create_presummed(VALUE_TYPE)
  factory = aggregators.AdaptiveClipDPMeanFactory(0.5, 4, initial_clip=1.0,
                                                  clipped_count_stddev=1.0,
                                                  clip_learning_rate=0.0)
  presummed = factory.create_presummed(VALUE_TYPE)
  state = presummed.initialize()
  values = _cohort(np.random.default_rng(6), 4)
  sums = presummed.client_sums(state, values, [1.0] * 4)
  first = presummed.server_next(state, sums)
  second = presummed.server_next(first.state, sums)
  assert not np.allclose(first.result["a"], second.result["a"])
  # A second initialize() draws another secret seed: different noise on the same sums.
  other = presummed.server_next(presummed.initialize(), sums)
  assert not np.allclose(first.result["a"], other.result["a"])


def test_presummed_types_and_float64_leaves():
  """The sums' type is an OrderedDict of the value sum, the bit sum and the counts, and a
  float64 model is clipped, summed and noised in float64 as by ``create().next``."""
  factory = aggregators.AdaptiveClipDPMeanFactory(
      0.5, expected_clients_per_round=3, initial_clip=1.0, clipped_count_stddev=1.0,
      noise_seed=2)
  presummed = factory.create_presummed(VALUE_TYPE)
  assert presummed.sums_type.python_container is collections.OrderedDict
  assert str(presummed.server_next.type_signature) == (
      "(<state=<clip=float32,noise_seed=int64,round=int64>@SERVER,sums=<value_sum=<a=float32"
      "[2000],b=float32[2]>,unclipped_sum=float32,diagnostics=<num_clients=float32,"
      "nonfinite_updates=float32,invalid_clip_scales=float32>>@SERVER> -> <state=<clip=float32,"
      "noise_seed=int64,round=int64>@SERVER,result=<a=float32[2000],b=float32[2]>@SERVER,"
      "measurements=<clip=float32,noise_std=float32,mean_noise_std=float32,"
      "unclipped_fraction=float32,diagnostics=<num_clients=float32,nonfinite_updates=float32,"
      "invalid_clip_scales=float32>>@SERVER>)")
  value_type = tff.to_type(collections.OrderedDict(w=tff.TensorType(np.float64, [50])))
  rng = np.random.default_rng(8)
  values = [collections.OrderedDict(w=rng.normal(size=50) * 0.1) for _ in range(3)]
  process = factory.create(value_type, WEIGHT_TYPE)
  state = process.initialize()
  expected = process.next(state, values, [1.0, 0.5, 1.0])
  presummed = factory.create_presummed(value_type)
  actual = presummed.server_next(
      state, presummed.client_sums(state, values, [1.0, 0.5, 1.0]))
  assert actual.result["w"].dtype == np.float64
  np.testing.assert_allclose(actual.result["w"], expected.result["w"], rtol=1e-12, atol=1e-13)
