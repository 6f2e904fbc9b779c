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
