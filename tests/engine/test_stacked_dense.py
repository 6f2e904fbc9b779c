"""tff_idp.engine.stacked_dense: per-client logits on stacked weights equal Keras's."""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tff_idp import models  # pylint: disable=g-import-not-at-top
from tff_idp.engine.stacked_dense import StackedDenseModel


@pytest.mark.parametrize("builder", [
    lambda: models.build_logistic_regression(5, 3),
    lambda: models.build_mlp(5, 3, hidden=4),
    lambda: models.build_mlp(5, 2, hidden=4, head="sigmoid"),
    lambda: tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(5,)),
                                 tf.keras.layers.Dense(4, activation="tanh", use_bias=False),
                                 tf.keras.layers.Dense(2, activation="sigmoid")]),
], ids=["logreg", "mlp", "sigmoid_mlp", "no_bias_tanh"])
def test_each_client_gets_its_own_models_logits(builder):
  model = builder()
  stacked = StackedDenseModel.from_keras(model)
  rng = np.random.default_rng(0)
  clients = [[rng.normal(size=w.shape).astype(np.float32) for w in model.trainable_weights]
             for _ in range(3)]
  x = rng.normal(size=(3, 4, 5)).astype(np.float32)
  logits = stacked.forward([tf.constant(np.stack(w)) for w in zip(*clients)], tf.constant(x))
  for c, weights in enumerate(clients):
    model.set_weights(weights)
    np.testing.assert_allclose(logits[c].numpy(), model(x[c]).numpy(), atol=1e-5)


@pytest.mark.parametrize("builder", [
    lambda: models.build_idp_fedavg_cnn((24, 24, 1), 3),
    lambda: tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(5,)),
                                 tf.keras.layers.Dense(4), tf.keras.layers.Dropout(0.5),
                                 tf.keras.layers.Dense(2)]),
    lambda: tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(5,)),
                                 tf.keras.layers.Dense(2, kernel_regularizer="l2")]),
    lambda: tf.keras.Model(*(lambda i: (i, tf.keras.layers.Dense(2)(i)))(
        tf.keras.Input((5,)))),
], ids=["cnn", "dropout", "regularizer", "functional"])
def test_models_it_cannot_run_exactly_are_not_served(builder):
  assert StackedDenseModel.from_keras(builder()) is None


def _stacked_weights(model, clients=3, seed=0):
  rng = np.random.default_rng(seed)
  per_client = [[rng.normal(size=w.shape).astype(np.float32) for w in model.trainable_weights]
                for _ in range(clients)]
  return per_client, [tf.constant(np.stack(w)) for w in zip(*per_client)]


def test_calling_the_model_is_its_forward():
  model = models.build_mlp(5, 3, hidden=4)
  stacked = StackedDenseModel.from_keras(model)
  _, weights = _stacked_weights(model)
  x = tf.constant(np.random.default_rng(1).normal(size=(3, 4, 5)).astype(np.float32))
  np.testing.assert_array_equal(stacked(weights, x).numpy(), stacked.forward(weights, x).numpy())


@pytest.mark.parametrize("builder", [
    lambda: models.build_mlp(5, 3, hidden=4),
    lambda: tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(5,)),
                                 tf.keras.layers.Dense(4, activation="tanh", use_bias=False),
                                 tf.keras.layers.Dense(6, activation="relu"),
                                 tf.keras.layers.Dense(2, activation="sigmoid")]),
], ids=["mlp", "no_bias_first"])
def test_recording_forward_gives_each_layers_input_and_pre_activation(builder):
  """Bug caught: a recorded z that is not a·W before the bias (bias added, weights of
  another layer), an unwatched z (no per-example gradient), logits unlike forward's."""
  model = builder()
  stacked = StackedDenseModel.from_keras(model)
  per_client, weights = _stacked_weights(model)
  x = tf.constant(np.random.default_rng(2).normal(size=(3, 4, 5)).astype(np.float32))
  with tf.GradientTape() as tape:
    logits, recorded = stacked.forward_recording(weights, x, tape)
    loss = tf.reduce_sum(logits ** 2)
  np.testing.assert_allclose(logits.numpy(), stacked.forward(weights, x).numpy(), rtol=1e-6)
  dense = [l for l in model.layers if isinstance(l, tf.keras.layers.Dense)]
  assert len(recorded) == len(dense)
  grads = tape.gradient(loss, [z for _, z, _ in recorded])
  for c in range(3):
    model.set_weights(per_client[c])
    a = x[c].numpy()
    for layer, (ra, rz, has_bias), g in zip(dense, recorded, grads):
      assert has_bias == layer.use_bias
      np.testing.assert_allclose(ra[c].numpy(), a, rtol=1e-5, atol=1e-6)
      z = a @ layer.kernel.numpy()
      np.testing.assert_allclose(rz[c].numpy(), z, rtol=1e-5, atol=1e-5)
      assert g is not None and g.shape == rz.shape
      a = np.asarray(layer.activation(tf.constant(
          z + (layer.bias.numpy() if layer.use_bias else 0))))
    np.testing.assert_allclose(logits[c].numpy(), a, rtol=1e-5, atol=1e-6)


def test_an_input_layer_inside_the_stack_is_skipped():
  model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(5,), activation="relu"),
                               tf.keras.layers.InputLayer(input_shape=(4,)),
                               tf.keras.layers.Dense(2)])
  assert any(isinstance(l, tf.keras.layers.InputLayer) for l in model.layers)
  stacked = StackedDenseModel.from_keras(model)
  assert stacked is not None
  per_client, weights = _stacked_weights(model)
  x = np.random.default_rng(3).normal(size=(3, 4, 5)).astype(np.float32)
  logits = stacked.forward(weights, tf.constant(x))
  for c in range(3):
    model.set_weights(per_client[c])
    np.testing.assert_allclose(logits[c].numpy(), model(x[c]).numpy(), atol=1e-5)


def _plain_dense():
  return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(5,)),
                              tf.keras.layers.Dense(3), tf.keras.layers.Dense(2)])


@pytest.mark.parametrize("attribute", ["kernel_regularizer", "bias_regularizer",
                                       "activity_regularizer", "kernel_constraint",
                                       "bias_constraint"])
def test_each_regularizer_or_constraint_alone_refuses_the_model(attribute):
  """Set after build, so the model has no loss: the attribute alone must refuse it."""
  model = _plain_dense()
  assert StackedDenseModel.from_keras(model) is not None and not model.losses
  value = (tf.keras.regularizers.L2(0.1) if attribute.endswith("regularizer")
           else tf.keras.constraints.NonNeg())
  setattr(model.layers[1], attribute, value)
  assert not model.losses
  assert StackedDenseModel.from_keras(model) is None


def test_a_model_with_a_loss_a_frozen_weight_or_no_layer_is_not_served():
  with_loss = _plain_dense()
  with_loss.add_loss(lambda: tf.reduce_sum(with_loss.layers[0].kernel))
  assert with_loss.losses and not with_loss.non_trainable_weights
  assert StackedDenseModel.from_keras(with_loss) is None
  frozen = _plain_dense()
  frozen.layers[0].add_weight("extra", shape=(2,), trainable=False)
  assert frozen.non_trainable_weights and not frozen.losses
  assert StackedDenseModel.from_keras(frozen) is None
  empty = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(5,))])
  assert not empty.layers and not empty.trainable_weights
  assert StackedDenseModel.from_keras(empty) is None
