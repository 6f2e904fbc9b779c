"""TF Clip-Laplace and Laplace randomizers (APES Def. 4, Thm 1, Eq. (1)) against the NumPy reference.

Pure TensorFlow (no TFF computation is executed). Every random test is
seeded, so it is deterministic; the stated flake rates are what a fresh
seed would give.
"""
import numpy as np
import pytest
import tensorflow as tf

from tff_idp.accounting.shuffle import clip_laplace_reference as ref
from tff_idp.errors import ToolkitValueError
from tff_idp.apes import clip_laplace
from tff_idp.engine.privacy_randomness import PrivacyRandomness

C = 0.1
EPSILONS = [1e-3, 0.05, 0.5, 1.0, 5.0, 50.0]

from tests.clip_laplace_vectors import TABLE  # noqa: E402


@pytest.mark.parametrize("eps,x,mean,_var", TABLE)
def test_expected_value_table(eps, x, mean, _var):
  assert float(clip_laplace.expected_value(x, eps, C)) == pytest.approx(mean, abs=5e-9)


@pytest.mark.parametrize("eps", EPSILONS)
def test_expected_value_matches_reference_over_the_range(eps):
  x = np.linspace(-C, C, 401)
  got = clip_laplace.expected_value(x.astype(np.float32), eps, C).numpy()
  want = ref.mean(x.astype(np.float32).astype(np.float64), eps, C)
  assert got.dtype == np.float32
  # float32 output: relative 3e-7 plus a floor far below the signal (≈ xε/4).
  np.testing.assert_allclose(got, want, rtol=3e-7, atol=1e-12)


def test_expected_value_clips_its_input_and_broadcasts():
  got = clip_laplace.expected_value(np.array([[5.0], [-5.0]], np.float32),
                                    np.array([0.5, 1.0], np.float32), C).numpy()
  assert got.shape == (2, 2)
  np.testing.assert_allclose(got[0], ref.mean(C, np.array([0.5, 1.0]), C), rtol=1e-6)
  np.testing.assert_allclose(got[1], -got[0], rtol=1e-7)


@pytest.mark.parametrize("eps", EPSILONS)
def test_sampler_matches_reference_on_the_same_uniforms(eps):
  x = np.linspace(-C, C, 201).astype(np.float32)
  u = tf.random.stateless_uniform([201], seed=[3, 4]).numpy()
  got = clip_laplace.sample_from_uniforms(x, eps, C, u).numpy()
  want = ref.sample(x.astype(np.float64), eps, C, u.astype(np.float64))
  assert got.dtype == np.float32
  np.testing.assert_allclose(got, want, rtol=0, atol=5e-7)


def test_sampler_end_points_and_extreme_uniforms():
  # u = 0 and u → 1 hit the ends of [−C, C]; never NaN, never outside.
  for eps in EPSILONS:
    x = np.array([-C, 0.0, C, 7.0, -7.0], np.float32)
    for u in (0.0, 2.0**-24, 0.5, 1.0 - 2.0**-24):
      z = clip_laplace.sample_from_uniforms(x, eps, C, np.full(5, u, np.float32)).numpy()
      assert np.all(np.isfinite(z)) and np.all(np.abs(z) <= C)
      with np.errstate(divide="ignore"):  # the reference's log1p(−1) at u = 0, clipped
        want = ref.sample(np.clip(x, -C, C).astype(np.float64), eps, C, np.full(5, u))
      np.testing.assert_allclose(z, want, atol=1e-6)


def test_perturb_is_the_sampler_on_stateless_uniforms():
  x = tf.random.stateless_normal([500], seed=[1, 1], stddev=0.2)
  seed = tf.constant([11, 12], tf.int64)
  got = clip_laplace.perturb(x, 0.7, C, seed).numpy()
  u = tf.random.stateless_uniform([500], seed=seed, dtype=tf.float32)
  np.testing.assert_array_equal(
      got, clip_laplace.sample_from_uniforms(x, 0.7, C, u).numpy())


@pytest.mark.parametrize("eps", [1e-3, 50.0])
def test_perturb_output_in_range_for_any_input(eps):
  x = tf.constant([-1e6, -1.0, -C, 0.0, C, 1.0, 1e6] * 100, tf.float32)
  z = clip_laplace.perturb(x, eps, C, [5, 6]).numpy()
  assert np.all(np.abs(z) <= C) and np.all(np.isfinite(z))


def test_perturb_shape_and_determinism():
  x = tf.fill([3, 4, 5], 0.05)
  a = clip_laplace.perturb(x, 1.0, C, [1, 2])
  b = clip_laplace.perturb(x, 1.0, C, [1, 2])
  c = clip_laplace.perturb(x, 1.0, C, [1, 3])
  assert a.shape == (3, 4, 5) and a.dtype == tf.float32
  np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert np.mean(a.numpy() == c.numpy()) < 0.01


@pytest.mark.parametrize("eps,x,mean,var", TABLE)
def test_sample_moments(eps, x, mean, var):
  """200,000 draws: mean within 5 standard errors, variance within 2% (≈ 6.3 SE for the
  near-uniform shapes here, whose kurtosis is < 3). Flake rate with a fresh seed < 1e-6."""
  n = 200_000
  z = clip_laplace.perturb(tf.fill([n], x), eps, C, [2024, 7]).numpy().astype(np.float64)
  assert np.mean(z) == pytest.approx(mean, abs=5 * np.sqrt(var / n))
  assert np.var(z) == pytest.approx(ref.variance(x, eps, C), rel=0.02)
  assert ref.variance(x, eps, C) == pytest.approx(var, abs=5e-9)


def test_samples_follow_the_reference_cdf():
  """Kolmogorov-Smirnov against the reference density integrated on a fine grid.

  n = 50,000: the KS statistic's 1e-6 quantile is ≈ 2.63/√n = 0.0118."""
  eps, x, n = 1.0, 0.06, 50_000
  z = np.sort(clip_laplace.perturb(tf.fill([n], x), eps, C, [9, 9]).numpy())
  grid = np.linspace(-C, C, 200_001)
  pdf = ref.density(grid, x, eps, C)
  cdf = np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) / 2 * np.diff(grid))])
  model = np.interp(z, grid, cdf)
  empirical_hi = np.arange(1, n + 1) / n
  ks = max(np.max(empirical_hi - model), np.max(model - (empirical_hi - 1 / n)))
  assert ks < 2.63 / np.sqrt(n)


def test_laplace_perturb_moments_and_clipping():
  """Laplace(2C/ε) around the clipped input: mean x within 5 SE, variance 2λ² within 3%
  (Laplace kurtosis 6: SE of the variance ≈ 0.55% at n = 200,000). Flake rate < 1e-6."""
  n, eps = 200_000, 0.5
  lam = 2 * C / eps
  z = clip_laplace.laplace_perturb(tf.fill([n], 3.0), eps, C, [4, 4]).numpy().astype(np.float64)
  assert np.mean(z) == pytest.approx(C, abs=5 * np.sqrt(2 * lam**2 / n))
  assert np.var(z) == pytest.approx(2 * lam**2, rel=0.03)
  assert np.all(np.isfinite(z))
  same = clip_laplace.laplace_perturb(tf.fill([n], 3.0), eps, C, [4, 4]).numpy()
  np.testing.assert_array_equal(same, z.astype(np.float32))


def test_laplace_perturb_is_the_inverse_cdf_of_the_uniforms():
  x = np.array([-0.3, -0.02, 0.0, 0.05, 0.2], np.float32)
  seed = [8, 1]
  u = tf.random.stateless_uniform([5], seed=seed).numpy().astype(np.float64)
  lam = 2 * C / 2.0
  w = u - 0.5
  want = np.clip(x, -C, C) - lam * np.sign(w) * np.log1p(-2 * np.abs(w))
  np.testing.assert_allclose(clip_laplace.laplace_perturb(x, 2.0, C, seed).numpy(), want,
                             rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_epsilon_is_refused(bad):
  with pytest.raises(ToolkitValueError, match="epsilon"):
    clip_laplace.perturb([0.0], bad, C, [1, 2])
  with pytest.raises(ToolkitValueError, match="epsilon"):
    clip_laplace.laplace_perturb([0.0], bad, C, [1, 2])
  with pytest.raises(ToolkitValueError, match="epsilon"):
    clip_laplace.expected_value(0.0, bad, C)
  # A tensor budget (as inside the client computation) fails in the graph.
  with pytest.raises(tf.errors.InvalidArgumentError, match="epsilon"):
    clip_laplace.perturb([0.0], tf.constant(bad, tf.float32), C, [1, 2])


@pytest.mark.parametrize("bad", [0.0, -0.1, float("nan"), float("inf"), None, "x"])
def test_bad_clip_is_refused(bad):
  with pytest.raises(ToolkitValueError, match="clip"):
    clip_laplace.perturb([0.0], 1.0, bad, [1, 2])


def test_scale_is_two_c_over_epsilon():
  assert float(clip_laplace.scale(0.5, C)) == pytest.approx(ref.scale(0.5, C))


def test_client_seed_derivation():
  debug = PrivacyRandomness.from_seed(3, "apes-test")
  a = clip_laplace.client_seed(debug, "client-1", 0)
  assert a.dtype == np.int64 and a.shape == (2,)
  np.testing.assert_array_equal(
      a, clip_laplace.client_seed(PrivacyRandomness.from_seed(3, "apes-test"), "client-1", 0))
  assert not np.array_equal(a, clip_laplace.client_seed(debug, "client-2", 0))
  assert not np.array_equal(a, clip_laplace.client_seed(debug, "client-1", 1))
  # Secret by default: two runs never share seeds.
  s1 = clip_laplace.client_seed(PrivacyRandomness.secret(), "client-1", 0)
  s2 = clip_laplace.client_seed(PrivacyRandomness.secret(), "client-1", 0)
  assert not np.array_equal(s1, s2)


def test_round_seed_is_fresh_per_round():
  seeds = {tuple(clip_laplace.round_seed([5, 6], r).numpy()) for r in range(5)}
  assert len(seeds) == 5
  np.testing.assert_array_equal(clip_laplace.round_seed([5, 6], 2).numpy(),
                                clip_laplace.round_seed(np.array([5, 6], np.int64), 2).numpy())


@pytest.mark.parametrize("eps", [1e-3, 0.5, 5.0])
def test_tensor_budget_gives_the_same_draws_as_a_number(eps):
  """Property: a budget given as a tensor (as inside the client computation) is
  accepted for every valid ε, below 1 included, and gives exactly the draws of
  the same Python number. Bug caught: the in-graph check refusing valid
  budgets, or the tensor path computing another scale."""
  x = tf.linspace(-0.2, 0.2, 9)
  for fn in (clip_laplace.perturb, clip_laplace.laplace_perturb):
    np.testing.assert_array_equal(fn(x, tf.constant(eps), C, [3, 1]).numpy(),
                                  fn(x, eps, C, [3, 1]).numpy())
  np.testing.assert_allclose(clip_laplace.expected_value(x, tf.constant(eps), C).numpy(),
                             clip_laplace.expected_value(x, eps, C).numpy(), rtol=1e-6)


def test_check_epsilon_needs_at_least_one_budget_and_returns_float64():
  """Property: an empty budget list is refused (there is no λ = 2C/ε to use), a
  list with one bad budget is refused, a good list comes back as float64.
  Bug caught: an empty or partly invalid budget list accepted."""
  with pytest.raises(ToolkitValueError, match="epsilon"):
    clip_laplace.check_epsilon([])
  with pytest.raises(ToolkitValueError, match="budgets"):
    clip_laplace.check_epsilon([1.0, 0.0, 2.0], what="budgets")
  got = clip_laplace.check_epsilon([1, 2])
  assert got.dtype == np.float64
  np.testing.assert_array_equal(got, [1.0, 2.0])


def test_tensor_budget_check_runs_in_a_tf1_graph():
  """Property: a bad tensor budget fails even in a TF1-style graph (``tf.compat.v1``),
  where an op runs only if the fetched output depends on it; a good one runs. Bug
  caught: the in-graph ε check not tied to the output by a control dependency
  (eagerly it fires anyway), so such a graph would silently release NaN reports
  from λ = 2C/0 or randomize with a negative scale."""
  with tf.Graph().as_default():
    eps = tf.compat.v1.placeholder(tf.float32, [])
    report = clip_laplace.perturb(tf.fill([3], 0.05), eps, C, [1, 2])
    mean = clip_laplace.expected_value(tf.fill([3], 0.05), eps, C)
    with tf.compat.v1.Session() as session:
      assert np.all(np.abs(session.run(report, {eps: 0.5})) <= C)
      np.testing.assert_allclose(session.run(mean, {eps: 0.5}), 0.00556976, atol=5e-9)
      for bad in (0.0, -1.0):
        for fetch in (report, mean):
          with pytest.raises(tf.errors.InvalidArgumentError, match="epsilon"):
            session.run(fetch, {eps: bad})


def test_expected_value_keeps_float64_and_promotes_integers():
  """Property: E[z | x] (Eq. (1)) comes back in float64 for float64 input, equal to
  the paper's literal Eq. (1) to 1e-12 (at ε = 0.5 the literal form loses only ~1
  digit to cancellation), and matches the notes' calibration vector
  Ē(0.05; ε ∈ {0.05, 0.5, 1}) = 0.0056392044; integer input gives a float32 mean.
  Bug caught: float64 means rounded to float32 (≈ 1e-7 relative), or integer input
  returning a truncated integer mean."""
  x = np.linspace(-C, C, 41)
  got = clip_laplace.expected_value(x, 0.5, C).numpy()
  assert got.dtype == np.float64
  np.testing.assert_allclose(got, ref.mean_eq1(x, 0.5, C), rtol=1e-12, atol=1e-18)
  calibration = clip_laplace.expected_value(np.float64(0.05), np.array([0.05, 0.5, 1.0]), C)
  assert float(np.mean(calibration.numpy())) == pytest.approx(0.0056392044, abs=6e-11)
  ints = clip_laplace.expected_value(np.array([-1, 0, 1]), 1.0, 2.0)  # C = 2: not clipped
  assert ints.dtype == tf.float32
  np.testing.assert_allclose(ints.numpy(), ref.mean_eq1(np.array([-1.0, 0.0, 1.0]), 1.0, 2.0),
                             rtol=1e-6)
  assert abs(float(ints[2])) > 0.1  # a real mean, not an integer truncated to 0


def test_scale_in_the_requested_dtype():
  """Property: λ = 2C/ε is returned in the dtype asked for, for a number or a tensor
  budget, at that dtype's precision (float64: exactly 2C/ε). Bug caught: λ built
  from a float32 constant or budget (a dtype clash, or float32 rounding)."""
  for eps in (0.3, tf.constant(0.3, tf.float64)):
    lam = clip_laplace.scale(eps, C, tf.float64)
    assert lam.dtype == tf.float64
    assert float(lam) == pytest.approx(2 * C / 0.3, rel=1e-15)
  assert clip_laplace.scale(0.3, C).dtype == tf.float32


def test_laplace_perturb_is_finite_at_the_extreme_uniforms():
  """Property: the Laplace baseline's report is finite for every float32 uniform,
  u = 0 and u = ½ included. At u = 0, w = u − ½ = −½ makes −ln(1 − 2|w|) infinite,
  so w is moved to the next float32, −½ + 2⁻²⁵, and the noise is capped at
  λ·ln 2²⁴ ≈ 16.6λ (the cap the docstring states); at u = ½, w = 0 and the report
  is x itself. Bug caught: an infinite or NaN report once in ~2²³ coordinates
  (which would wipe out the server's mean). The 2²⁰ uniforms of seed [20, 0] hold
  u = 0 (index 114906) and u = ½ (index 818766), checked first (deterministic)."""
  n, seed, eps, x = 2**20, [20, 0], 1.0, 0.03
  u = tf.random.stateless_uniform([n], seed=seed, dtype=tf.float32).numpy()
  assert u[114906] == 0.0 and u[818766] == 0.5
  z = clip_laplace.laplace_perturb(tf.fill([n], x), eps, C, seed).numpy()
  assert np.all(np.isfinite(z))
  lam = 2 * C / eps
  assert z[114906] == pytest.approx(x - lam * 24 * np.log(2.0), rel=1e-6)
  assert z[818766] == np.float32(x)
  assert np.max(np.abs(z - np.float32(x))) <= lam * 24 * np.log(2.0) * (1 + 1e-6)
