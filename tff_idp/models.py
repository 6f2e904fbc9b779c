"""Small Keras models and their TFF wrappers (deterministic initialisation)."""
from __future__ import annotations

from typing import Callable

import tensorflow as tf
import tensorflow_federated as tff


def build_logistic_regression(num_features: int, num_classes: int,
                              seed: int = 0) -> tf.keras.Model:
  """Multinomial logistic regression, the FedProx model for Synthetic(α, β)."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(
          num_classes, kernel_initializer=tf.keras.initializers.GlorotUniform(seed),
          bias_initializer="zeros"),
  ])


def build_mlp(num_features: int, num_classes: int, hidden: int = 32,
              seed: int = 0) -> tf.keras.Model:
  """One-hidden-layer perceptron."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(hidden, activation="relu",
                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed)),
      tf.keras.layers.Dense(num_classes,
                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed + 1)),
  ])


def tff_model_fn(keras_builder: Callable[[], tf.keras.Model],
                 input_spec) -> Callable[[], tff.learning.models.VariableModel]:
  """A TFF ``model_fn`` (logits model, sparse categorical cross-entropy)."""

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        keras_builder(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  return model_fn


def _tanh_mnist_cnn(padding: int, input_shape, num_classes: int,
                    seed: int) -> tf.keras.Model:
  """Conv(16, 8×8, s2, pad ``padding``) → MaxPool(2, s1) → Conv(32, 4×4, s2) → MaxPool(2, s1)
  → Dense 32 → Dense ``num_classes`` (logits), tanh throughout (Opacus' MNIST example)."""
  init = tf.keras.initializers.GlorotUniform
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=input_shape),
      tf.keras.layers.ZeroPadding2D(padding),
      tf.keras.layers.Conv2D(16, 8, strides=2, activation="tanh",
                             kernel_initializer=init(seed)),
      tf.keras.layers.MaxPool2D(2, strides=1),
      tf.keras.layers.Conv2D(32, 4, strides=2, activation="tanh",
                             kernel_initializer=init(seed + 1)),
      tf.keras.layers.MaxPool2D(2, strides=1),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(32, activation="tanh", kernel_initializer=init(seed + 2)),
      tf.keras.layers.Dense(num_classes, kernel_initializer=init(seed + 3)),
  ])


def build_rpdp_mnist_cnn(input_shape=(28, 28, 1), num_classes: int = 10,
                         seed: int = 0) -> tf.keras.Model:
  """The two-layer CNN of rPDP-FL Table 1 (MNIST, 26,010 trainable parameters).

  Conv(16, 8×8, stride 2, pad 3) → MaxPool(2, stride 1) → Conv(32, 4×4,
  stride 2) → MaxPool(2, stride 1) → Dense 32 → Dense ``num_classes`` (logits),
  all with tanh, as in Opacus' MNIST example that the paper's code uses.
  """
  return _tanh_mnist_cnn(3, input_shape, num_classes, seed)


def build_idp_fedavg_cnn(input_shape=(28, 28, 1), num_classes: int = 10,
                         rescale: float = 1.0, dropout: float = 0.1,
                         seed: int = 0) -> tf.keras.Model:
  """The 14-layer CNN of the IDP-FedAvg paper (Fig. 2, Sec. V-C).

  Rescaling(``rescale``) → [Conv(32, 3×3, ReLU) → MaxPool(2) → Dropout(0.1)] ×3
  → Flatten → Dense 64 (ReLU) → Dropout(0.1) → Dense ``num_classes``, as the
  paper's code (``get_simple_cnn`` of luckyos-code/flidp). The last layer
  returns logits: the softmax of Fig. 2 is folded into the loss
  (``from_logits=True``), as everywhere in this toolkit. Rescaling sits
  inside the model, so it takes stored pixels: ``rescale=1/255`` for
  CIFAR-10 and SVHN (0..255), 1 for federated EMNIST (already in [0, 1]).
  Works for 28×28×1 inputs (21,578 parameters; the third pooling leaves
  1×1×32) and 32×32×3 inputs (28,298 parameters; 2×2×32); any input of at
  least 22×22 fits. Dropout layers have fixed op seeds (``seed + 10..13``),
  so a round is reproducible.
  """
  init = tf.keras.initializers.GlorotUniform
  layers = [tf.keras.layers.InputLayer(input_shape=input_shape),
            tf.keras.layers.Rescaling(rescale)]
  for i in range(3):
    layers += [
        tf.keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init(seed + i)),
        tf.keras.layers.MaxPool2D(2),
        tf.keras.layers.Dropout(dropout, seed=seed + 10 + i),
    ]
  layers += [
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(64, activation="relu", kernel_initializer=init(seed + 3)),
      tf.keras.layers.Dropout(dropout, seed=seed + 13),
      tf.keras.layers.Dense(num_classes, kernel_initializer=init(seed + 4)),
  ]
  return tf.keras.Sequential(layers)


def build_pc_mnist_cnn(input_shape=(28, 28, 1), num_classes: int = 10,
                       seed: int = 0) -> tf.keras.Model:
  """PC-MNIST of INO-SGD (D.1.2; ``inosgd/models/mnist.py``), 26,010 parameters.

  Conv(16, 8×8, stride 2, pad 2) → MaxPool(2, stride 1) → Conv(32, 4×4,
  stride 2) → MaxPool(2, stride 1) → Dense 32 → Dense ``num_classes``, tanh
  throughout. It differs from :func:`build_rpdp_mnist_cnn` only in the first
  padding (2, not 3); both flatten to 512 features on 28×28 inputs.
  """
  return _tanh_mnist_cnn(2, input_shape, num_classes, seed)


def build_pc_cifar_cnn(input_shape=(32, 32, 3), num_classes: int = 10, rescale: float = 1.0,
                       seed: int = 0) -> tf.keras.Model:
  """PC-CIFAR of INO-SGD (D.1.2; ``inosgd/models/cifar.py``), 550,570 parameters.

  Rescaling(``rescale``) → [Conv(32) Conv(32) MaxPool] → [Conv(64) Conv(64)
  MaxPool] → [Conv(128) Conv(128) MaxPool], 3×3 "same" convolutions with
  tanh → Dense 128 (tanh) → Dense ``num_classes``. On 32×32 inputs the last
  pooling leaves 4×4×128 = 2,048 features. ``rescale=1/255`` takes stored
  0..255 pixels.
  """
  init = tf.keras.initializers.GlorotUniform
  layers = [tf.keras.layers.InputLayer(input_shape=input_shape),
            tf.keras.layers.Rescaling(rescale)]
  k = 0
  for width in (32, 64, 128):
    for _ in range(2):
      layers.append(tf.keras.layers.Conv2D(width, 3, padding="same", activation="tanh",
                                           kernel_initializer=init(seed + k)))
      k += 1
    layers.append(tf.keras.layers.MaxPool2D(2))
  layers += [
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation="tanh", kernel_initializer=init(seed + k)),
      tf.keras.layers.Dense(num_classes, kernel_initializer=init(seed + k + 1)),
  ]
  return tf.keras.Sequential(layers)
