"""INO-SGD importance scores ρ (paper Alg. 1 lines 4-8, Def. C.2).

The implementation integrates the *ascending*-loss BIF through its exact
antiderivative. The reference below is written independently from the paper's
*descending* Def. C.2 (Γ-dependent case split) and integrates it numerically
with scipy.integrate.quad, so agreement checks both the change of variables and
the closed forms.
"""
import math

import numpy as np
import pytest
from scipy import integrate
from scipy import special
import tensorflow as tf

from tff_idp.ino_sgd import importance

# ---------------------------------------------------------------------------
# Independent NumPy/SciPy reference (descending form, Def. C.2 + quadrature).


def _beta_tif(alpha, beta, gamma):
  """f_tail(c) = I_{1−c/γ}(α, β) on [0, γ] (Sec. 3.2)."""
  return lambda c: float(special.betainc(alpha, beta, min(1.0, max(0.0, 1.0 - c / gamma))))


def _steps_tif(s):
  """App. C.2.5: 1/2, 1/4, 1/8, 0 on four steps of length s (descending order)."""
  levels = (0.5, 0.25, 0.125, 0.0)
  return lambda c: levels[min(int(c // s), 3)]


def _reference_rho(losses, thresholds, f_tail, gamma, tail_kinks=(), mask=None):
  """ρ by Def. C.2: sort by descending loss, BIF on [0, Γ], average over each slot.

  Ties: the implementation's stable ascending order puts the lower index first,
  so in descending order the higher index comes first.
  """
  n = len(losses)
  mask = np.ones(n, bool) if mask is None else np.asarray(mask, bool)
  idx = [i for i in range(n) if mask[i]]
  order = sorted(idx, key=lambda i: (-losses[i], -i))
  widths = [float(thresholds[i]) for i in order]
  ends = np.cumsum([0.0] + widths)
  total = ends[-1]
  start = total - gamma  # where the tail begins (negative when Γ < γ)

  def bif(c):
    if gamma == 0 or c <= start:
      return 1.0
    return f_tail(c - start)  # equals f_tail(c + γ − Γ) in the Γ < γ case too

  kinks = [start] + [start + k for k in tail_kinks]
  rho = np.zeros(n)
  for k, i in enumerate(order):
    a, b = ends[k], ends[k + 1]
    pts = [p for p in kinks if a < p < b]
    val, _ = integrate.quad(bif, a, b, points=pts or None, epsabs=1e-13, epsrel=1e-12,
                            limit=200)
    rho[i] = val / widths[k]
  return rho


def _ascending_bif_integral(bif, x, kinks):
  pts = [p for p in kinks if 0 < p < x]
  return integrate.quad(bif, 0.0, x, points=pts or None, epsabs=1e-13, epsrel=1e-12,
                        limit=200)[0] if x > 0 else 0.0


def _scores(losses, thresholds, mask=None, **kwargs):
  return importance.importance_scores(
      tf.constant(losses, tf.float32), tf.constant(thresholds, tf.float32),
      None if mask is None else tf.constant(mask, tf.bool), **kwargs).numpy()


# ---------------------------------------------------------------------------
# Test vectors (notes §1.7).


def test_tv1_beta11_equal_thresholds():
  rho = _scores([0.4, 0.1, 0.3, 0.2], [1, 1, 1, 1], gamma=2.0)
  np.testing.assert_allclose(rho, [1, 0.25, 1, 0.75], atol=1e-7)
  assert rho.dtype == np.float32


def test_tv2_beta25_mixed_thresholds():
  losses = [2.3, 0.05, 1.1, 0.7, 0.2, 3.0]
  c = [0.5, 2, 0.5, 1, 2, 1]
  want = [1, 0.572996, 1, 1, 0.998432, 1]
  rho = _scores(losses, c, antiderivative=importance.beta_antiderivative(2, 5, 3))
  np.testing.assert_allclose(rho, want, atol=1e-6)
  np.testing.assert_allclose(_reference_rho(losses, c, _beta_tif(2, 5, 3), 3.0), want,
                             atol=1e-6)


def test_tv3_batch_shorter_than_tail():
  rho = _scores([2.3, 0.05], [0.5, 2], gamma=10.0)  # Γ = 2.5 < γ = 10
  np.testing.assert_allclose(rho, [0.225, 0.1], atol=1e-7)
  np.testing.assert_allclose(_reference_rho([2.3, 0.05], [0.5, 2], _beta_tif(1, 1, 10), 10.0),
                             [0.225, 0.1], atol=1e-9)


# ---------------------------------------------------------------------------
# Antiderivatives against quadrature.


@pytest.mark.parametrize("alpha, beta, gamma", [(1, 1, 2), (2, 5, 3), (0.5, 3.5, 7.3)])
def test_beta_closed_form_matches_quadrature(alpha, beta, gamma):
  xs = np.concatenate([[0.0, 1e-9], np.linspace(0.05, 1.6, 12) * gamma, [gamma]])
  assert len(xs) == 15
  got = importance.beta_antiderivative(alpha, beta, gamma)(tf.constant(xs, tf.float64)).numpy()
  bif = lambda x: float(special.betainc(alpha, beta, min(x / gamma, 1.0)))
  want = np.array([_ascending_bif_integral(bif, x, [gamma]) for x in xs])
  np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
  assert got[-1] == pytest.approx(gamma * beta / (alpha + beta), abs=1e-12)  # F(γ)


def test_antiderivative_keeps_dtype_and_shape():
  big_f = importance.beta_antiderivative(2, 5, 3)
  out = big_f(tf.constant([[0.0, 1.0], [3.0, 9.0]], tf.float32))
  assert out.dtype == tf.float32 and out.shape == (2, 2)
  np.testing.assert_allclose(out.numpy()[1], [3 * 5 / 7, 6 + 3 * 5 / 7], rtol=1e-6)


@pytest.mark.parametrize("s", [0.25, 1.0, 1.7])
def test_steps_antiderivative_and_scores_match_quadrature(s):
  tif = importance.steps_antiderivative(s)
  assert tif.gamma == 4 * s
  levels = (0.0, 0.125, 0.25, 0.5)
  bif = lambda x: 1.0 if x >= 4 * s else levels[int(x // s)]
  xs = np.linspace(0, 6 * s, 15)
  want = [_ascending_bif_integral(bif, x, [s, 2 * s, 3 * s, 4 * s]) for x in xs]
  np.testing.assert_allclose(tif(tf.constant(xs, tf.float64)).numpy(), want, atol=1e-9)

  rng = np.random.default_rng(int(s * 100))
  for n in (1, 3, 7, 12):
    losses = rng.normal(size=n)
    c = rng.choice([0.3, 1.0, 2.5], size=n)
    ref = _reference_rho(losses, c, _steps_tif(s), 4 * s, tail_kinks=(s, 2 * s, 3 * s))
    np.testing.assert_allclose(_scores(losses, c, antiderivative=tif), ref, atol=1e-6)


def test_random_batches_match_descending_reference():
  rng = np.random.default_rng(7)
  for _ in range(25):
    n = int(rng.integers(1, 13))
    losses = rng.exponential(size=n)
    c = rng.choice([0.3, 1.0, 2.5], size=n)
    alpha, beta = np.exp(rng.uniform(np.log(0.3), np.log(5), size=2))
    gamma = float(rng.uniform(0.1, 10))
    tif = importance.beta_antiderivative(alpha, beta, gamma)
    rho = _scores(losses, c, antiderivative=tif)
    ref = _reference_rho(losses, c, _beta_tif(alpha, beta, gamma), gamma)
    np.testing.assert_allclose(rho, ref, atol=2e-6)


def test_custom_antiderivative_callable():
  # f_tail(c) = 1 − c/γ by hand (= Beta(1,1)): bif(x) = x/γ, F(x) = x²/(2γ) on [0, γ].
  gamma = 2.0
  def big_f(x):
    return tf.where(x < gamma, x * x / (2 * gamma), x - gamma / 2)
  losses, c = [0.4, 0.1, 0.3, 0.2], [1.0, 1.0, 1.0, 1.0]
  want = [1, 0.25, 1, 0.75]
  np.testing.assert_allclose(_scores(losses, c, gamma=gamma, antiderivative=big_f), want,
                             atol=1e-7)
  tif = importance.TailImportance(big_f, gamma, "hand-ramp")
  np.testing.assert_allclose(_scores(losses, c, antiderivative=tif), want, atol=1e-7)


def test_invalid_custom_antiderivative_fails_loudly():
  # slope 2 > 1: would break the sensitivity bound, so it must not be clipped away.
  with pytest.raises(tf.errors.InvalidArgumentError, match="slope"):
    _scores([0.1, 0.2], [1.0, 1.0], gamma=5.0, antiderivative=lambda x: 2.0 * x)
  # concave (f_tail increasing): scores would fall with loss.
  with pytest.raises(tf.errors.InvalidArgumentError, match="convex"):
    _scores([0.1, 0.2, 0.3], [1.0, 1.0, 1.0], gamma=5.0,
            antiderivative=lambda x: tf.minimum(x, 1.5))


# ---------------------------------------------------------------------------
# Privacy-relevant properties.


def _random_tif(rng):
  if rng.random() < 0.2:
    return importance.steps_antiderivative(float(rng.uniform(0, 2)))
  gamma = 0.0 if rng.random() < 0.1 else float(rng.uniform(0.01, 12))
  alpha, beta = np.exp(rng.uniform(np.log(0.2), np.log(8), size=2))
  return importance.beta_antiderivative(alpha, beta, gamma)


def _clipped_vectors(rng, c, aligned):
  direction = rng.normal(size=(len(c), 5))
  if aligned:  # all in one direction: the case where the bound is tight
    direction[:] = direction[0]
  direction /= np.linalg.norm(direction, axis=1, keepdims=True)
  scale = np.where(rng.random(len(c)) < 0.5, 1.0, rng.uniform(0, 1, len(c)))
  return direction * (c * scale)[:, None]  # ‖g_d‖ ≤ C_d, often = C_d (clipped)


SENSITIVITY_TRIALS = 600


def test_add_one_record_sensitivity_is_at_most_its_threshold():
  """‖Ḡ(B∪{d}) − Ḡ(B)‖ ≤ C_{o(d)} (Thm 3.3) over SENSITIVITY_TRIALS random batches.

  Each trial: |B| ∈ 1..12, thresholds from {0.3, 1, 2.5}, a random TIF
  (Beta with random α, β, γ, γ = 0 in 10%; steps in 20%), ‖g‖ ≤ C in R^5
  (aligned in a third of the trials), and d's loss drawn from the same
  distribution so it lands anywhere in the order. Half the trials add d by
  flipping its mask bit (how a Poisson batch is padded), half by appending it.
  """
  rng = np.random.default_rng(2024)
  worst = 0.0
  for trial in range(SENSITIVITY_TRIALS):
    n = int(rng.integers(1, 13))
    tif = _random_tif(rng)
    losses = rng.exponential(size=n + 1)
    c = rng.choice([0.3, 1.0, 2.5], size=n + 1)
    g = _clipped_vectors(rng, c, aligned=trial % 3 == 0)
    pos = int(rng.integers(0, n + 1))  # d's row
    without = np.arange(n + 1) != pos
    rho_with = _scores(losses, c, antiderivative=tif).astype(np.float64)
    if trial % 2:
      rho_without = _scores(losses, c, mask=without, antiderivative=tif).astype(np.float64)
      assert rho_without[pos] == 0.0
    else:
      rho_without = np.zeros(n + 1)
      rho_without[without] = _scores(losses[without], c[without], antiderivative=tif)
    change = np.linalg.norm(rho_with @ g - rho_without @ g)
    ratio = change / c[pos]
    assert ratio <= 1 + 1e-6, (trial, ratio, tif.name)
    worst = max(worst, ratio)
  assert worst > 0.999  # the bound is attained (tight), so the test has teeth


def test_scores_in_unit_interval_and_unclipped_overshoot_is_tiny():
  rng = np.random.default_rng(11)
  cases = [(np.arange(40.0), np.full(40, 0.335), importance.beta_antiderivative(1, 1, 5))]
  for _ in range(200):
    n = int(rng.integers(1, 40))
    c = rng.choice([0.3, 0.335, 1.0, 2.5], size=n) * rng.choice([1.0, 1e-3, 1e3])
    cases.append((rng.normal(size=n), c, _random_tif(rng)))
  for losses, c, tif in cases:
    raw = importance.unclipped_importance_scores(
        tf.constant(losses, tf.float32), tf.constant(c, tf.float32),
        antiderivative=tif).numpy()
    assert raw.max() <= 1 + 1e-6 and raw.min() >= -1e-6, tif.name
    rho = _scores(losses, c, antiderivative=tif)
    assert rho.max() <= 1.0 and rho.min() >= 0.0
    order = np.argsort(losses, kind="stable")
    assert np.all(np.diff(rho[order]) >= 0)  # non-decreasing with loss
  # The reference code's fast path gives 1.01493 here (notes §1.7, I-5).
  defect_raw = importance.unclipped_importance_scores(
      tf.constant(np.arange(40.0), tf.float32), tf.fill([40], 0.335), gamma=5.0).numpy()
  assert defect_raw.max() <= 1 + 1e-6


@pytest.mark.parametrize("tif", [
    importance.beta_antiderivative(2, 5, 0.0),
    importance.steps_antiderivative(0.0),
    None,  # default Beta(1, 1) with gamma=0
])
def test_gamma_zero_is_idp_sgd(tif):
  rng = np.random.default_rng(3)
  losses = rng.normal(size=9)
  c = rng.choice([0.3, 1.0, 2.5], size=9)
  mask = rng.random(9) < 0.6
  kwargs = dict(gamma=0.0) if tif is None else dict(antiderivative=tif)
  assert np.array_equal(_scores(losses, c, **kwargs), np.ones(9, np.float32))
  assert np.array_equal(_scores(losses, c, mask=mask, **kwargs), mask.astype(np.float32))


def test_gamma_to_zero_tends_to_ones():
  rng = np.random.default_rng(4)
  losses = rng.normal(size=10)
  c = rng.choice([0.3, 1.0, 2.5], size=10)
  for gamma in (1e-3, 1e-6, 1e-9):
    rho = _scores(losses, c, antiderivative=importance.beta_antiderivative(2, 5, gamma))
    assert np.all(rho >= 1 - 2 * gamma / 0.3)  # only the lowest-loss slot is below 1
  assert np.array_equal(_scores(losses, c, gamma=1e-12), np.ones(10, np.float32))


def test_masked_rows_get_zero_and_do_not_move_the_others():
  rng = np.random.default_rng(5)
  tif = importance.beta_antiderivative(2, 5, 3.0)
  for _ in range(20):
    n, extra = int(rng.integers(0, 10)), int(rng.integers(1, 6))
    losses = rng.normal(size=n)
    c = rng.choice([0.3, 1.0, 2.5], size=n)
    base = _scores(losses, c, antiderivative=tif)
    # Insert padding rows with garbage (NaN/inf losses, 0/negative/NaN thresholds).
    rows = np.sort(rng.choice(n + extra, size=extra, replace=False))
    keep = np.ones(n + extra, bool)
    keep[rows] = False
    padded_losses = np.empty(n + extra)
    padded_c = np.empty(n + extra)
    padded_losses[keep], padded_c[keep] = losses, c
    padded_losses[~keep] = rng.choice([np.nan, np.inf, -np.inf, 0.0], size=extra)
    padded_c[~keep] = rng.choice([np.nan, 0.0, -1.0, 2.5], size=extra)
    rho = _scores(padded_losses, padded_c, mask=keep, antiderivative=tif)
    assert np.all(rho[~keep] == 0.0)
    assert np.array_equal(rho[keep], base)


def test_ties_are_broken_by_index():
  # Equal losses: the lower index counts as the lower loss (stable ascending sort).
  rho = _scores([0.5, 0.5, 0.5, 0.5], [1, 1, 1, 1], gamma=2.0)
  np.testing.assert_allclose(rho, [0.25, 0.75, 1, 1], atol=1e-7)
  rho = _scores([0.7, 0.2, 0.7, 0.2], [1, 2.5, 0.3, 1], gamma=3.0)
  again = _scores([0.7, 0.2, 0.7, 0.2], [1, 2.5, 0.3, 1], gamma=3.0)
  assert np.array_equal(rho, again)
  np.testing.assert_allclose(
      rho, _reference_rho([0.7, 0.2, 0.7, 0.2], [1, 2.5, 0.3, 1], _beta_tif(1, 1, 3), 3.0),
      atol=1e-6)
  # Same multiset of (loss, C) in a different row order permutes the scores the same way
  # as long as equal-loss rows keep their relative order.
  perm = [1, 0, 3, 2]
  permuted = _scores(np.array([0.7, 0.2, 0.7, 0.2])[perm], np.array([1, 2.5, 0.3, 1])[perm],
                     gamma=3.0)
  assert np.array_equal(permuted, rho[perm])


def test_thresholds_must_be_positive_for_sampled_records():
  with pytest.raises(tf.errors.InvalidArgumentError, match="threshold"):
    _scores([0.1, 0.2], [1.0, 0.0], gamma=1.0)
  with pytest.raises(tf.errors.InvalidArgumentError, match="threshold"):
    _scores([0.1, 0.2], [1.0, -2.0], gamma=1.0)
  with pytest.raises(tf.errors.InvalidArgumentError, match="threshold"):
    _scores([0.1, 0.2], [1.0, np.inf], gamma=1.0)
  # ... but a masked row's threshold is ignored.
  np.testing.assert_allclose(_scores([0.1, 0.2], [1.0, 0.0], mask=[True, False], gamma=1.0),
                             [0.5, 0.0])


def test_tf_function_unknown_batch_size_including_empty():
  tif = importance.beta_antiderivative(2, 5, 3.0)
  traces = []

  @tf.function(input_signature=[tf.TensorSpec([None], tf.float32),
                                tf.TensorSpec([None], tf.float32),
                                tf.TensorSpec([None], tf.bool)])
  def scores(losses, thresholds, mask):
    traces.append(1)
    return importance.importance_scores(losses, thresholds, mask, antiderivative=tif)

  empty = scores(tf.zeros([0]), tf.zeros([0]), tf.zeros([0], tf.bool))
  assert empty.shape == (0,) and empty.dtype == tf.float32
  all_masked = scores(tf.constant([1.0, 2.0]), tf.constant([1.0, 1.0]),
                      tf.constant([False, False]))
  assert np.array_equal(all_masked.numpy(), [0.0, 0.0])
  losses = [2.3, 0.05, 1.1, 0.7, 0.2, 3.0]
  c = [0.5, 2, 0.5, 1, 2, 1]
  got = scores(tf.constant(losses), tf.constant(c, tf.float32), tf.ones([6], tf.bool))
  np.testing.assert_allclose(got.numpy(), [1, 0.572996, 1, 1, 0.998432, 1], atol=1e-6)
  assert len(traces) == 1
  with pytest.raises(tf.errors.InvalidArgumentError, match="threshold"):
    scores(tf.constant([1.0]), tf.constant([0.0]), tf.constant([True]))


def test_float64_losses_and_scalar_threshold():
  rho = importance.importance_scores(tf.constant([0.4, 0.1, 0.3, 0.2], tf.float64), 1.0,
                                     gamma=2.0)
  np.testing.assert_allclose(rho.numpy(), [1, 0.25, 1, 0.75], atol=1e-7)


# ---------------------------------------------------------------------------
# Python-side validation.


@pytest.mark.parametrize("args, match", [
    ((0.0, 1.0, 1.0), "alpha must be > 0"),
    ((-1.0, 1.0, 1.0), "alpha must be > 0"),
    ((1.0, 0.0, 1.0), "beta must be > 0"),
    ((1.0, math.nan, 1.0), "beta must be finite"),
    ((1.0, 1.0, -0.5), "gamma must be >= 0"),
    ((1.0, 1.0, math.inf), "gamma must be finite"),
    ((True, 1.0, 1.0), "alpha must be a real Python number"),
    ((1.0, 1.0, "2"), "gamma must be a real Python number"),
])
def test_beta_parameter_validation(args, match):
  with pytest.raises(ValueError, match=match):
    importance.beta_antiderivative(*args)


def test_argument_validation():
  with pytest.raises(ValueError, match="step_length must be >= 0"):
    importance.steps_antiderivative(-1.0)
  with pytest.raises(ValueError, match="pass gamma"):
    importance.importance_scores([0.1], [1.0])
  with pytest.raises(ValueError, match="conflicts"):
    importance.importance_scores([0.1], [1.0], gamma=2.0,
                                 antiderivative=importance.beta_antiderivative(1, 1, 3))
  with pytest.raises(ValueError, match="tail length"):
    importance.importance_scores([0.1], [1.0], antiderivative=lambda x: x)
  with pytest.raises(ValueError, match="gamma must be >= 0"):
    importance.importance_scores([0.1], [1.0], gamma=-1.0)
  with pytest.raises(ValueError, match="callable"):
    importance.TailImportance(3.0, 1.0)
  # numpy scalars are fine
  tif = importance.beta_antiderivative(np.float32(2), np.int64(5), np.float64(3))
  assert tif.gamma == 3.0


def test_the_local_step_weights_of_rpdp_are_none_for_dp_sgd_and_the_beta_tail_for_ino_sgd():
  assert importance.local_step_weights("dp_sgd", 10.0, 1.0, 1.0) == (None, "dp_sgd")
  weight_fn, label = importance.local_step_weights("ino_sgd", 10.0, 2.0, 1.0)
  assert label == f"ino_sgd(γ=10, {importance.beta_antiderivative(2.0, 1.0, 10.0).name})"
  rho = weight_fn(tf.constant([0.1, 5.0, 2.0]), tf.constant([1.0, 1.0, 1.0])).numpy()
  assert rho.shape == (3,) and np.all((rho >= 0) & (rho <= 1))
  with pytest.raises(ValueError, match="^--ino_gamma/--ino_alpha/--ino_beta: "):
    importance.local_step_weights("ino_sgd", 10.0, 0.0, 1.0)
