"""The papers' models: parameter counts and the per-example fast path."""
import numpy as np
import pytest
import tensorflow as tf

from tff_idp import models
from tff_idp.rpdp import dp_sgd
from tff_idp.rpdp import per_example


@pytest.mark.parametrize("builder,expected", [
    (lambda: models.build_pc_mnist_cnn(), 26_010),          # INO-SGD notes §1.4
    (lambda: models.build_pc_cifar_cnn(), 550_570),         # INO-SGD notes §1.4
    (lambda: models.build_pc_cifar_cnn(num_classes=100), 562_180),
    (lambda: models.build_rpdp_mnist_cnn(), 26_010),        # rPDP-FL Table 1
])
def test_parameter_counts_match_the_papers(builder, expected):
  assert builder().count_params() == expected


@pytest.mark.parametrize("builder,shape", [
    (lambda: models.build_pc_mnist_cnn(), (28, 28, 1)),
    (lambda: models.build_pc_cifar_cnn(rescale=1 / 255), (32, 32, 3)),
])
def test_pc_models_take_the_layerwise_path_and_match_the_generic_one(builder, shape):
  keras_model = builder()
  assert per_example.supports_layerwise(keras_model)
  rng = np.random.default_rng(0)
  x = tf.constant(rng.random((5,) + shape, dtype=np.float32) * (255 if shape[-1] == 3 else 1))
  y = tf.constant(rng.integers(0, 10, 5).astype(np.int32))
  clip = tf.constant([0.1, 0.5, 1.0, 0.3, 2.0])
  fast, fast_losses, fast_norms = per_example.layerwise_clipped_sum(
      keras_model, x, y, clip, dp_sgd.sparse_categorical_crossentropy)
  slow, slow_losses, slow_norms = per_example.vectorized_clipped_sum(
      lambda xb: keras_model(xb, training=True), keras_model.trainable_variables, x, y, clip,
      dp_sgd.sparse_categorical_crossentropy)
  np.testing.assert_allclose(fast_losses, slow_losses, rtol=1e-5)
  np.testing.assert_allclose(fast_norms, slow_norms, rtol=1e-4)
  for v in keras_model.trainable_variables:
    np.testing.assert_allclose(fast[v.ref()], slow[v.ref()], rtol=1e-3, atol=1e-6)
