"""Record-level DP-SGD local update (rPDP-FL Alg. 3 lines 9-16), outside TFF."""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp.client_work import dp_sgd
from tff_idp.client_work import per_example


def _small_cnn():
  init = tf.keras.initializers.GlorotUniform
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(8, 8, 2)),
      tf.keras.layers.Conv2D(3, 3, strides=2, padding="same", activation="tanh",
                             kernel_initializer=init(1)),
      tf.keras.layers.MaxPool2D(2, strides=1),
      tf.keras.layers.Conv2D(4, 2, padding="valid", activation="relu",
                             kernel_initializer=init(2)),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(5, activation="tanh", kernel_initializer=init(3)),
      tf.keras.layers.Dense(3, kernel_initializer=init(4)),
  ])


def _model(builder, x_shape):
  spec = collections.OrderedDict(x=tf.TensorSpec([None] + list(x_shape), tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  return models.tff_model_fn(builder, spec)()


def _hand_clipped_sum(model, x, y, clip, weights=None):
  """The definition, one example at a time: Σ_j w_j · g_j · min(1, L/‖g_j‖)."""
  total = [np.zeros(v.shape, np.float64) for v in model.trainable_variables]
  for j in range(len(y)):
    with tf.GradientTape() as tape:
      logits = model.predict_on_batch(x[j:j + 1], training=True)
      loss = dp_sgd.sparse_categorical_crossentropy(y[j:j + 1], logits)[0]
    grads = tape.gradient(loss, model.trainable_variables)
    norm = np.sqrt(sum(float(tf.reduce_sum(g * g)) for g in grads))
    factor = min(1.0, clip / norm) * (1.0 if weights is None else weights[j])
    for t, g in zip(total, grads):
      t += factor * g.numpy()
  return total


CASES = {
    "logreg": (lambda: models.build_logistic_regression(6, 3, seed=1), (6,)),
    "cnn": (_small_cnn, (8, 8, 2)),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("force_generic", [False, True])
@pytest.mark.parametrize("clip", [0.05, 1e6])
def test_clipped_sum_matches_hand_loop(name, force_generic, clip):
  builder, shape = CASES[name]
  model = _model(builder, shape)
  rng = np.random.default_rng(0)
  x = rng.normal(size=(7,) + shape).astype(np.float32)
  y = rng.integers(0, 3, 7).astype(np.int32)
  if not force_generic:
    assert per_example.supports_layerwise(dp_sgd.keras_model_of(model))
  sums, losses, norms = dp_sgd.clipped_gradient_sum(
      model, tf.constant(x), tf.constant(y), clip, dp_sgd.sparse_categorical_crossentropy,
      force_generic=force_generic)
  expected = _hand_clipped_sum(model, x, y, clip)
  for got, want in zip(sums, expected):
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=1e-6)
  assert losses.shape == (7,) and norms.shape == (7,)
  if clip < 1:  # every per-example gradient is clipped: each contributes norm exactly L
    assert np.all(norms.numpy() > clip)


def test_example_weights_scale_clipped_gradients():
  model = _model(*CASES["logreg"])
  rng = np.random.default_rng(1)
  x = rng.normal(size=(5, 6)).astype(np.float32)
  y = rng.integers(0, 3, 5).astype(np.int32)
  w = np.array([0.0, 0.25, 0.5, 1.0, 0.75], np.float32)
  sums, _, _ = dp_sgd.clipped_gradient_sum(
      model, tf.constant(x), tf.constant(y), 0.3, dp_sgd.sparse_categorical_crossentropy,
      example_weight_fn=lambda losses: tf.constant(w))
  for got, want in zip(sums, _hand_clipped_sum(model, x, y, 0.3, w)):
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=1e-6)


def test_example_weights_outside_unit_interval_fail_loudly():
  model = _model(*CASES["logreg"])
  x = tf.ones([2, 6])
  y = tf.constant([0, 1])
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[0, 1\]"):
    dp_sgd.clipped_gradient_sum(model, x, y, 1.0, dp_sgd.sparse_categorical_crossentropy,
                                example_weight_fn=lambda l: 2.0 * tf.ones_like(l))


def _weights(model):
  return tf.nest.map_structure(lambda v: v.read_value(),
                               tff.learning.models.ModelWeights.from_model(model))


def test_one_step_without_noise_is_sgd_on_clipped_mean_over_expected_batch():
  model = _model(*CASES["logreg"])
  rng = np.random.default_rng(2)
  n = 9
  x = rng.normal(size=(n, 6)).astype(np.float32)
  y = rng.integers(0, 3, n).astype(np.int32)
  initial = _weights(model)
  expected_sum = _hand_clipped_sum(model, x, y, 0.5)
  update = dp_sgd.build_local_dp_sgd(model, tff.learning.optimizers.build_sgdm(0.3),
                                     local_steps=1, noise_multiplier=0.0, clip_norm=0.5)
  # q = 1: every record is sampled; the divisor is Σq = n.
  delta, stats = update(initial, x, y, np.ones(n, np.float32), tf.constant([3, 4], tf.int64))
  for d, s in zip(delta, expected_sum):
    np.testing.assert_allclose(d.numpy(), 0.3 * s / n, rtol=2e-4, atol=1e-7)
  assert float(stats["sampled"]) == n and float(stats["steps"]) == 1
  assert float(stats["expected_batch"]) == pytest.approx(n)


def test_noise_std_is_sigma_times_clip_over_expected_batch():
  """Statistical: 40 seeds × 63 coordinates of the noise, std within 6% of σL.

  The sample std of 2,520 normals has a relative sd of 1/sqrt(2·2520) ≈ 1.4%,
  so the 6% band is 4.3 sd wide on each side: flake rate < 2e-5. The seeds
  are fixed, so in CI the test is deterministic.
  """
  model = _model(lambda: models.build_logistic_regression(20, 3, seed=1), (20,))
  rng = np.random.default_rng(3)
  n = 8
  x = rng.normal(size=(n, 20)).astype(np.float32)
  y = rng.integers(0, 3, n).astype(np.int32)
  q = np.ones(n, np.float32)
  initial = _weights(model)
  sgd = tff.learning.optimizers.build_sgdm(1.0)
  noisy = dp_sgd.build_local_dp_sgd(model, sgd, 1, noise_multiplier=1.5, clip_norm=0.4)
  clean = dp_sgd.build_local_dp_sgd(model, sgd, 1, noise_multiplier=0.0, clip_norm=0.4)
  base, _ = clean(initial, x, y, q, tf.constant([0, 0], tf.int64))
  draws = []
  for seed in range(40):
    delta, _ = noisy(initial, x, y, q, tf.constant([seed, 7], tf.int64))
    draws.append(np.concatenate([(d - b).numpy().ravel() for d, b in zip(delta, base)]))
  z = np.concatenate(draws) * n  # delta = -lr·(sum + z)/n  →  z = ±n·(delta − base)
  assert z.size == 40 * 63
  assert np.std(z) == pytest.approx(1.5 * 0.4, rel=0.06)
  assert abs(np.mean(z)) < 5 * 0.6 / np.sqrt(z.size)


def test_record_inclusion_frequency_matches_q():
  """Statistical: 4000 draws per record; each frequency within 4.5 binomial sd of q_j.

  Per record the flake probability is < 7e-6, so < 3e-4 for all 40 records.
  """
  q = np.linspace(0.01, 0.95, 40).astype(np.float32)
  draws = 4000
  counts = np.zeros_like(q)
  for s in range(draws):
    counts += dp_sgd.poisson_record_mask(tf.constant(q), tf.constant([s, 11], tf.int64)).numpy()
  freq = counts / draws
  sd = np.sqrt(q * (1 - q) / draws)
  assert np.all(np.abs(freq - q) < 4.5 * sd), np.max(np.abs(freq - q) / sd)


def test_excluded_or_empty_client_does_nothing():
  model = _model(*CASES["logreg"])
  update = dp_sgd.build_local_dp_sgd(model, tff.learning.optimizers.build_sgdm(0.3), 3,
                                     noise_multiplier=1.0, clip_norm=1.0)
  initial = _weights(model)
  x = np.ones((4, 6), np.float32)
  y = np.zeros(4, np.int32)
  for q in (np.zeros(4, np.float32),):
    delta, stats = update(initial, x, y, q, tf.constant([1, 1], tf.int64))
    assert all(float(tf.reduce_max(tf.abs(d))) == 0.0 for d in delta)
    assert float(stats["steps"]) == 0
  delta, stats = update(initial, x[:0], y[:0], np.zeros(0, np.float32),
                        tf.constant([1, 1], tf.int64))
  assert float(stats["steps"]) == 0


def test_same_seed_same_update_and_different_seed_differs():
  model = _model(*CASES["logreg"])
  update = dp_sgd.build_local_dp_sgd(model, tff.learning.optimizers.build_sgdm(0.3), 2,
                                     noise_multiplier=1.0, clip_norm=1.0)
  initial = _weights(model)
  rng = np.random.default_rng(5)
  x = rng.normal(size=(30, 6)).astype(np.float32)
  y = rng.integers(0, 3, 30).astype(np.int32)
  q = np.full(30, 0.3, np.float32)
  a, _ = update(initial, x, y, q, tf.constant([9, 1], tf.int64))
  b, _ = update(initial, x, y, q, tf.constant([9, 1], tf.int64))
  c, _ = update(initial, x, y, q, tf.constant([9, 2], tf.int64))
  assert all(np.array_equal(u.numpy(), v.numpy()) for u, v in zip(a, b))
  assert not all(np.array_equal(u.numpy(), v.numpy()) for u, v in zip(a, c))


@pytest.mark.parametrize("kwargs, match", [
    (dict(local_steps=0, noise_multiplier=1.0, clip_norm=1.0), "local_steps"),
    (dict(local_steps=1, noise_multiplier=-1.0, clip_norm=1.0), "noise_multiplier"),
    (dict(local_steps=1, noise_multiplier=1.0, clip_norm=0.0), "clip_norm"),
    (dict(local_steps=1, noise_multiplier=1.0, clip_norm=float("inf")), "finite clip_norm"),
])
def test_bad_arguments(kwargs, match):
  model = _model(*CASES["logreg"])
  with pytest.raises(ValueError, match=match):
    dp_sgd.build_local_dp_sgd(model, tff.learning.optimizers.build_sgdm(0.1), **kwargs)


def test_unsupported_layers_fall_back_to_generic_path():
  def builder():
    return tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(6,)),
        tf.keras.layers.Dense(4),
        tf.keras.layers.LayerNormalization(),
        tf.keras.layers.Dense(3)])
  model = _model(builder, (6,))
  assert not per_example.supports_layerwise(dp_sgd.keras_model_of(model))
  rng = np.random.default_rng(6)
  x = rng.normal(size=(5, 6)).astype(np.float32)
  y = rng.integers(0, 3, 5).astype(np.int32)
  sums, _, _ = dp_sgd.clipped_gradient_sum(model, tf.constant(x), tf.constant(y), 0.2,
                                           dp_sgd.sparse_categorical_crossentropy)
  for got, want in zip(sums, _hand_clipped_sum(model, x, y, 0.2)):
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-4, atol=1e-6)
