"""Per-example clipped gradient sums (tff_idp.rpdp.per_example), against the definition.

Every test compares with :func:`_definition`: one example at a time through
Keras' own forward pass, its gradient, its L₂ norm and
Σ_j w_j · g_j · min(1, L_j/‖g_j‖) in float64 numpy. Neither the layer-wise
outer products nor ``vectorized_map`` are used there, so a wrong per-example
norm, a wrong clip factor or a wrong sum shows as a mismatch. The models are
tiny so the file runs in seconds.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import pytest
import tensorflow as tf

from tff_idp.rpdp import per_example


def _loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
  return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def _mlp() -> tf.keras.Sequential:
  """Dense with and without bias, a trainable-free layer between them."""
  init = tf.keras.initializers.GlorotUniform
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(5,)),
      tf.keras.layers.Dense(4, activation="tanh", kernel_initializer=init(1),
                            bias_initializer=tf.keras.initializers.RandomNormal(seed=2)),
      tf.keras.layers.Dropout(0.0),
      tf.keras.layers.Dense(3, use_bias=False, kernel_initializer=init(3)),
  ])


def _cnn() -> tf.keras.Sequential:
  """Non-square kernels and strides, 'same' and 'valid' padding, with and without bias.

  Output heights (3, 2) differ from the channel counts (4, 3), so no axis mix-up
  cancels out."""
  init = tf.keras.initializers.GlorotUniform
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(6, 5, 2)),
      tf.keras.layers.Conv2D(4, (3, 2), strides=(2, 1), padding="same", activation="tanh",
                             kernel_initializer=init(4),
                             bias_initializer=tf.keras.initializers.RandomNormal(seed=5)),
      tf.keras.layers.Conv2D(3, (2, 3), padding="valid", use_bias=False, activation="relu",
                             kernel_initializer=init(6)),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(3, kernel_initializer=init(7),
                            bias_initializer=tf.keras.initializers.RandomNormal(seed=8)),
  ])


MODELS = {"mlp": (_mlp, (5,)), "cnn": (_cnn, (6, 5, 2))}


def _data(shape: tuple, n: int, seed: int) -> tuple[tf.Tensor, tf.Tensor]:
  rng = np.random.default_rng(seed)
  x = (2.0 * rng.normal(size=(n,) + shape)).astype(np.float32)
  y = rng.integers(0, 3, n).astype(np.int32)
  return tf.constant(x), tf.constant(y)


def _per_example(model: tf.keras.Model, x: tf.Tensor, y: tf.Tensor):
  """Each example's loss and gradient (float64), one example at a time through Keras."""
  losses, grads = [], []
  for j in range(int(x.shape[0])):
    with tf.GradientTape() as tape:
      loss = _loss(y[j:j + 1], model(x[j:j + 1], training=True))[0]
    g = tape.gradient(loss, model.trainable_variables)
    losses.append(float(loss))
    grads.append([gi.numpy().astype(np.float64) for gi in g])
  return np.array(losses), grads


def _definition(model: tf.keras.Model, x: tf.Tensor, y: tf.Tensor, clip,
                weights: Optional[np.ndarray] = None,
                replaced: Optional[np.ndarray] = None):
  """Σ_j w_j · g_j · min(1, L_j/‖g_j‖) over the non-replaced examples; losses; norms."""
  losses, grads = _per_example(model, x, y)
  n = len(losses)
  clips = np.broadcast_to(np.asarray(clip, np.float64), (n,))
  norms = np.array([np.sqrt(sum(np.sum(gi ** 2) for gi in g)) for g in grads])
  total = [np.zeros(v.shape, np.float64) for v in model.trainable_variables]
  for j in range(n):
    if replaced is not None and replaced[j]:
      continue
    factor = min(1.0, clips[j] / norms[j]) * (1.0 if weights is None else weights[j])
    for t, gi in zip(total, grads[j]):
      t += factor * gi
  return total, losses, norms


def _run(path: str, model: tf.keras.Sequential, x, y, clip, weight_fn=None, replacement=None):
  """The sums in trainable-variable order, losses and norms of one implementation."""
  if path == "layerwise":
    sums, losses, norms = per_example.layerwise_clipped_sum(
        model, x, y, clip, _loss, weight_fn, replacement)
  else:
    sums, losses, norms = per_example.vectorized_clipped_sum(
        lambda xb: model(xb, training=True), list(model.trainable_variables), x, y, clip,
        _loss, weight_fn, replacement)
  return [sums[v.ref()].numpy() for v in model.trainable_variables], losses.numpy(), \
      norms.numpy()


def _assert_matches(got, want):
  sums, losses, norms = got
  want_sums, want_losses, want_norms = want
  assert len(sums) == len(want_sums)
  for s, w in zip(sums, want_sums):
    np.testing.assert_allclose(s, w, rtol=2e-4, atol=1e-6)
  np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(norms, want_norms, rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("path", ["layerwise", "vectorized"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_clipped_sum_norms_and_losses_match_the_definition(path, name):
  """Property: both paths give Σ_j clip_{L_j}(g_j), the per-example losses and ‖g_j‖.

  Per-record thresholds are chosen between the examples' norms (some
  examples clipped, some not), then one threshold for all. Bugs caught: a
  per-example norm that misses a layer, the bias or a patch (wrong stride,
  padding, kernel size), a clip factor that clips unclipped examples or
  leaves clipped ones above L_j, or a sum that drops or double counts.
  """
  builder, shape = MODELS[name]
  model = builder()
  x, y = _data(shape, 6, seed=1)
  _, _, norms = _definition(model, x, y, 1.0)
  clips = np.float32(np.median(norms)) * np.array([0.3, 0.6, 0.9, 1.2, 1.5, 3.0], np.float32)
  assert np.any(norms > clips) and np.any(norms < clips)
  _assert_matches(_run(path, model, x, y, tf.constant(clips)),
                  _definition(model, x, y, clips))
  one = float(np.median(norms))
  _assert_matches(_run(path, model, x, y, one), _definition(model, x, y, one))


@pytest.mark.parametrize("path", ["layerwise", "vectorized"])
def test_weights_apply_after_clipping_and_see_losses_and_thresholds(path):
  """Property: w_j multiplies the clipped gradient, and the weight function is
  called with the per-example losses and thresholds [B].

  Bugs caught: weights applied before clipping (clipping would undo them and
  a weight-0 record would still contribute), the weight function handed the
  wrong inputs, or weights dropped.
  """
  model = _mlp()
  x, y = _data((5,), 5, seed=2)
  want_losses, _ = _per_example(model, x, y)
  clips = np.array([0.05, 0.1, 0.2, 5.0, 0.1], np.float32)
  w = np.array([0.0, 0.25, 0.5, 1.0, 0.75], np.float32)
  seen = {}

  def weight_fn(losses, thresholds):
    seen["losses"], seen["thresholds"] = losses, thresholds
    return tf.constant(w)

  _assert_matches(_run(path, model, x, y, tf.constant(clips), weight_fn),
                  _definition(model, x, y, clips, weights=w))
  np.testing.assert_allclose(seen["losses"].numpy(), want_losses, rtol=1e-5)
  np.testing.assert_allclose(seen["thresholds"].numpy(), clips)
  _run(path, model, x, y, 0.7, weight_fn)  # one threshold: broadcast to [B]
  np.testing.assert_allclose(seen["thresholds"].numpy(), np.full(5, 0.7, np.float32))


@pytest.mark.parametrize("path", ["layerwise", "vectorized"])
@pytest.mark.parametrize("bad", [-0.01, 1.01])
def test_weights_outside_unit_interval_are_refused(path, bad):
  """Property: a weight outside [0, 1] raises. Bug caught: a missing bound lets a
  weight > 1 scale a record's contribution beyond L_j (sensitivity broken)."""
  model = _mlp()
  x, y = _data((5,), 3, seed=3)
  w = tf.constant([0.5, bad, 1.0], tf.float32)
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[0, 1\]"):
    _run(path, model, x, y, 1.0, lambda losses, thresholds: w)
  _run(path, model, x, y, 1.0, lambda losses, thresholds: tf.constant([0.0, 1.0, 0.5]))


@pytest.mark.parametrize("path", ["layerwise", "vectorized"])
def test_replaced_examples_contribute_only_their_replacement(path):
  """Property: a replaced example's own clipped gradient is dropped and the given
  vectors are added; the others are unchanged (the audit's canary hook).

  Bugs caught: the replaced example's gradient kept (or the others' dropped),
  or the replacement sums not added.
  """
  model = _cnn()
  x, y = _data((6, 5, 2), 5, seed=4)
  replaced = np.array([False, True, False, False, True])
  rng = np.random.default_rng(5)
  extra = [rng.normal(size=v.shape) for v in model.trainable_variables]
  replacement = per_example.ExampleReplacement(
      tf.constant(replaced),
      {v.ref(): tf.constant(e, tf.float64) for v, e in zip(model.trainable_variables, extra)})
  want, losses, norms = _definition(model, x, y, 0.1, replaced=replaced)
  _assert_matches(_run(path, model, x, y, 0.1, replacement=replacement),
                  ([w + e for w, e in zip(want, extra)], losses, norms))


@pytest.mark.parametrize("path", ["layerwise", "vectorized"])
def test_zero_gradient_example_adds_nothing_and_no_nan(path):
  """Property: an example whose gradient is 0 has norm 0 and adds 0 (no 0/0).

  A zero input through a bias-free Dense layer gives a zero gradient. Bug
  caught: dropping the guard on the norm in L/‖g‖ (NaN that poisons the sum).
  """
  model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(3,)),
                               tf.keras.layers.Dense(2, use_bias=False)])
  x = tf.constant([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])
  y = tf.constant([0, 1])
  got = _run(path, model, x, y, 0.5)
  want, losses, norms = _definition(model, x[1:], y[1:], 0.5)
  _assert_matches(got, (want, np.concatenate([[np.log(2.0)], losses]),
                        np.concatenate([[0.0], norms])))


def test_layerwise_path_refuses_dense_on_rank_3_inputs():
  """Property: the layer-wise path raises on Dense over rank-3 inputs, whose
  per-example gradient is not a single outer product (its norm formula would be
  wrong, and the clipping with it). Bug caught: the check removed."""
  model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(2, 3)),
                               tf.keras.layers.Dense(2)])
  x = tf.ones([2, 2, 3])
  with pytest.raises(ValueError, match="rank-3"):
    per_example.layerwise_clipped_sum(model, x, tf.constant([[0, 1], [1, 0]]), 1.0, _loss)


def _sequential(*layers) -> tf.keras.Sequential:
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(6, 6, 2)), *layers,
                              tf.keras.layers.Flatten(), tf.keras.layers.Dense(2)])


def test_supports_layerwise_only_for_models_it_computes_exactly():
  """Property: the fast path is chosen only for Sequential models of Dense and
  plain Conv2D (channels_last, no dilation, one group, 'valid'/'same') with
  otherwise trainable-free layers.

  Bugs caught: accepting a model the layer-wise formulas get wrong (dilated,
  grouped or transposed convolutions, a trainable normalisation layer, a
  non-Sequential model): its per-example norms, hence its clipping, would be
  wrong; or refusing a supported one.
  """
  conv = tf.keras.layers.Conv2D
  assert per_example.supports_layerwise(_mlp())
  assert per_example.supports_layerwise(_cnn())
  assert per_example.supports_layerwise(_sequential(conv(2, 3, padding="same"),
                                                    tf.keras.layers.MaxPool2D()))
  frozen = conv(2, 3, dilation_rate=2)
  frozen.trainable = False
  assert per_example.supports_layerwise(_sequential(frozen))  # no trainable weights
  for layer in (conv(2, 3, dilation_rate=2), conv(2, 3, dilation_rate=(1, 2)),
                conv(2, 3, groups=2),
                tf.keras.layers.Conv2DTranspose(2, 3),
                tf.keras.layers.DepthwiseConv2D(3),
                tf.keras.layers.LayerNormalization()):
    assert not per_example.supports_layerwise(_sequential(layer)), layer
  # An unsupported layer after supported ones is still seen.
  assert not per_example.supports_layerwise(_sequential(
      tf.keras.layers.MaxPool2D(), conv(2, 2, dilation_rate=2)))
  assert not per_example.supports_layerwise(_sequential(
      conv(2, 3), tf.keras.layers.LayerNormalization()))
  assert not per_example.supports_layerwise(tf.keras.Sequential(
      [tf.keras.layers.InputLayer(input_shape=(6,)), tf.keras.layers.Dense(4),
       tf.keras.layers.LayerNormalization(), tf.keras.layers.Dense(2)]))
  assert not per_example.supports_layerwise(tf.keras.Sequential(
      [tf.keras.layers.InputLayer(input_shape=(2, 6, 6)),
       conv(2, 3, data_format="channels_first")]))
  assert not per_example.supports_layerwise(None)
  inputs = tf.keras.Input((5,))
  assert not per_example.supports_layerwise(
      tf.keras.Model(inputs, tf.keras.layers.Dense(2)(inputs)))


class _TrainingScale(tf.keras.layers.Layer):
  """A weight-free layer that doubles its input in training mode only."""

  def call(self, inputs, training=None):  # pylint: disable=arguments-differ
    return 2.0 * inputs if training else inputs


@pytest.mark.parametrize("path", ["layerwise", "vectorized"])
def test_forward_pass_runs_in_training_mode(path):
  """Property: the per-example gradients are those of the training-mode forward
  pass (as in the model's own training step and the generic path). Bug caught:
  the layer-wise path calling its weight-free layers (dropout, noise) in
  inference mode, which gives other gradients and norms than the step trains on."""
  model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                               tf.keras.layers.Dense(3, activation="tanh"),
                               _TrainingScale(),
                               tf.keras.layers.Dense(3)])
  x, y = _data((4,), 4, seed=9)
  assert per_example.supports_layerwise(model)
  _assert_matches(_run(path, model, x, y, 0.3), _definition(model, x, y, 0.3))


@pytest.mark.parametrize("path", ["layerwise", "vectorized"])
def test_float64_model(path):
  """Property: a float64 model gets its clipped sums in float64, equal to the
  definition. Bug caught: norms accumulated in float32 (a dtype clash, or the
  sums silently computed at float32 precision)."""
  model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(5,), dtype="float64"),
                               tf.keras.layers.Dense(3, dtype="float64")])
  x, y = _data((5,), 4, seed=10)
  x = tf.cast(x, tf.float64)
  got = _run(path, model, x, y, 0.5)
  assert got[0][0].dtype == np.float64
  _assert_matches(got, _definition(model, x, y, 0.5))


def test_vectorized_path_gives_zero_for_a_variable_the_loss_does_not_use():
  """Property: a trainable variable that the loss does not depend on (an unused
  head) gets a zero sum and adds nothing to the norms. Bug caught: its
  gradient left as None, which makes the generic path fail on such models."""
  model = _mlp()
  unused = tf.Variable(tf.ones([2, 2]))
  x, y = _data((5,), 3, seed=11)
  variables = list(model.trainable_variables) + [unused]
  sums, losses, norms = per_example.vectorized_clipped_sum(
      lambda xb: model(xb, training=True), variables, x, y, 0.4, _loss)
  np.testing.assert_array_equal(sums[unused.ref()].numpy(), np.zeros([2, 2]))
  _assert_matches(([sums[v.ref()].numpy() for v in model.trainable_variables],
                   losses.numpy(), norms.numpy()), _definition(model, x, y, 0.4))
