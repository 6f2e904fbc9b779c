"""tff_idp.engine.evaluation and the models' sigmoid head."""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp.engine import evaluation


class _Weights:
  """Stands in for tff.learning.models.ModelWeights: assigns fixed Keras weights."""

  def __init__(self, weights):
    self._weights = weights

  def assign_weights_to(self, model):
    model.set_weights(self._weights)


def test_softmax_evaluator_matches_keras():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 5)).astype(np.float32)
  y = rng.integers(0, 3, 200).astype(np.int32)
  builder = lambda: models.build_logistic_regression(5, 3, seed=1)  # noqa: E731
  reference = builder()
  reference.set_weights([w + 0.3 for w in reference.get_weights()])
  result = evaluation.keras_evaluator(builder, x, y, batch_size=64)(
      _Weights(reference.get_weights()))
  logits = reference(x).numpy()
  assert result["accuracy"] == pytest.approx(np.mean(np.argmax(logits, -1) == y))
  assert result["loss"] == pytest.approx(float(
      tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits)), rel=1e-5)


def test_sigmoid_evaluator_uses_one_logit_and_binary_cross_entropy():
  rng = np.random.default_rng(1)
  x = rng.normal(size=(300, 4)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.int32)
  builder = lambda: models.build_logistic_regression(4, 2, seed=0, head="sigmoid")  # noqa: E731
  model = builder()
  assert model.output_shape == (None, 1)
  w = [np.array([[5.0], [0], [0], [0]], np.float32), np.zeros(1, np.float32)]
  result = evaluation.keras_evaluator(builder, x, y, head="sigmoid")(_Weights(w))
  assert result["accuracy"] == 1.0
  z = 5.0 * x[:, 0]
  expected = float(tf.keras.losses.BinaryCrossentropy(from_logits=True)(y[:, None], z[:, None]))
  assert result["loss"] == pytest.approx(expected, rel=1e-4)


def test_per_example_sigmoid_loss_matches_keras():
  labels = tf.constant([0, 1, 1, 0], tf.int32)
  logits = tf.constant([[2.0], [-1.0], [0.5], [-3.0]])
  got = models.per_example_loss("sigmoid")(labels, logits).numpy()
  want = tf.keras.losses.binary_crossentropy(tf.cast(labels[:, None], tf.float32), logits,
                                             from_logits=True).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6)
  soft = models.per_example_loss("softmax")(tf.constant([1]), tf.constant([[0.0, 1.0]]))
  assert soft.numpy()[0] == pytest.approx(np.log(1 + np.exp(-1.0)), rel=1e-6)


def test_sigmoid_tff_model_trains_a_round(tff_runtime):  # pylint: disable=unused-argument
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 3], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  builder = lambda: models.build_logistic_regression(3, 2, head="sigmoid")  # noqa: E731
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      models.tff_model_fn(builder, spec, head="sigmoid"),
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 3)).astype(np.float32)
  data = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=x, y=(x[:, 0] > 0).astype(np.int32))).batch(16)
  state = process.initialize()
  out = process.next(state, [data, data])
  train = out.metrics["client_work"]["train"]
  assert 0.0 <= train["binary_accuracy"] <= 1.0 and np.isfinite(train["loss"])


@pytest.mark.parametrize("head,classes,match", [
    ("sigmoid", 3, "binary tasks"), ("tanh", 2, "must be one of"), ("softmax", 1, "at least 2")])
def test_bad_heads_are_refused(head, classes, match):
  with pytest.raises(ValueError, match=match):
    models.output_units(classes, head)
