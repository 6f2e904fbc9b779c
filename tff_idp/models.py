"""Small Keras models and their TFF wrappers (deterministic initialisation).

Every model returns logits. The output *head* says how they are read:

* ``"softmax"`` (default): ``num_classes`` logits, integer labels in
  ``[0, num_classes)``, sparse categorical cross-entropy;
* ``"sigmoid"``: one logit for a binary task (labels 0/1, e.g. a tabular
  "outcome" column), binary cross-entropy. Builders give one output unit for
  it (:func:`output_units`).

:func:`tff_model_fn`, :func:`per_example_loss` (for the record-level DP-SGD
client work) and :func:`tff_idp.engine.evaluation.keras_evaluator` take the
same ``head``, so a binary model trains and evaluates consistently in every
family.
"""
from __future__ import annotations

import collections
from typing import Callable

import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.model_catalog import HEADS
from tff_idp.model_catalog import MODELS


def check_head(head: str, num_classes: int) -> None:
  """Raises ValueError unless ``head`` is known and fits ``num_classes``."""
  if head not in HEADS:
    raise ValueError(f"head={head!r} must be one of {HEADS}.")
  if head == "sigmoid" and num_classes != 2:
    raise ValueError(f"head='sigmoid' is for binary tasks (labels 0/1); the data has "
                     f"{num_classes} classes. Use head='softmax'.")
  if num_classes < 2:
    raise ValueError(f"num_classes={num_classes}: a classifier needs at least 2 classes.")


def output_units(num_classes: int, head: str = "softmax") -> int:
  """Logits the last layer needs: ``num_classes`` (softmax) or 1 (sigmoid)."""
  check_head(head, num_classes)
  return 1 if head == "sigmoid" else num_classes


def build_logistic_regression(num_features: int, num_classes: int,
                              seed: int = 0, head: str = "softmax") -> tf.keras.Model:
  """Logistic regression: multinomial (the FedProx model for Synthetic(α, β)) or,
  with ``head="sigmoid"``, binary with one logit."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(
          output_units(num_classes, head),
          kernel_initializer=tf.keras.initializers.GlorotUniform(seed),
          bias_initializer="zeros"),
  ])


def build_mlp(num_features: int, num_classes: int, hidden: int = 32,
              seed: int = 0, head: str = "softmax") -> tf.keras.Model:
  """One-hidden-layer perceptron (ReLU), logits for ``head``."""
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(num_features,)),
      tf.keras.layers.Dense(hidden, activation="relu",
                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed)),
      tf.keras.layers.Dense(output_units(num_classes, head),
                            kernel_initializer=tf.keras.initializers.GlorotUniform(seed + 1)),
  ])


def _binary_labels_and_logits(labels: tf.Tensor, logits: tf.Tensor):
  logits = tf.reshape(logits, [-1])
  return tf.cast(tf.reshape(labels, [-1]), logits.dtype), logits


def per_example_loss(head: str = "softmax") -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
  """``(labels, logits) -> [B]`` losses for the record-level DP-SGD client work.

  The function carries its ``head`` as an attribute (the vectorized client
  execution recognizes the head's loss by it).
  """
  if head == "softmax":
    def categorical(labels, logits):
      return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    categorical.head = head
    return categorical
  if head == "sigmoid":
    def binary(labels, logits):
      y, z = _binary_labels_and_logits(labels, logits)
      return tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z)
    binary.head = head
    return binary
  raise ValueError(f"head={head!r} must be one of {HEADS}.")


class _BinaryLoss(tf.keras.losses.Loss):
  """Mean binary cross-entropy of integer labels [B] and one logit per example [B, 1]."""

  def call(self, y_true, y_pred):
    y, z = _binary_labels_and_logits(y_true, y_pred)
    return tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z)


class _BinaryAccuracy(tf.keras.metrics.Mean):
  """Accuracy of ``logit > 0`` against integer labels 0/1."""

  def __init__(self, name: str = "binary_accuracy", **kwargs):
    super().__init__(name=name, **kwargs)

  def update_state(self, y_true, y_pred, sample_weight=None):
    y, z = _binary_labels_and_logits(y_true, y_pred)
    correct = tf.cast(tf.equal(tf.cast(z > 0, y.dtype), y), tf.float32)
    return super().update_state(correct, sample_weight=sample_weight)


def tff_model_fn(keras_builder: Callable[[], tf.keras.Model], input_spec,
                 head: str = "softmax") -> Callable[[], tff.learning.models.VariableModel]:
  """A TFF ``model_fn`` for a logits model: softmax cross-entropy with sparse
  categorical accuracy, or (``head="sigmoid"``) binary cross-entropy with
  binary accuracy.

  The returned function carries ``keras_builder`` and ``head`` as attributes,
  so the cohort-vectorized client execution can run the same model on stacked
  per-client weights (:mod:`tff_idp.idp_fedavg.vectorized`).
  """
  if head not in HEADS:
    raise ValueError(f"head={head!r} must be one of {HEADS}.")

  def model_fn() -> tff.learning.models.VariableModel:
    if head == "sigmoid":
      loss, metrics = _BinaryLoss(), [_BinaryAccuracy()]
    else:
      loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
      metrics = [tf.keras.metrics.SparseCategoricalAccuracy()]
    return tff.learning.models.from_keras_model(
        keras_builder(), loss=loss, input_spec=input_spec, metrics=metrics)

  model_fn.keras_builder = keras_builder
  model_fn.head = head
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



def builder_for(input_shape, num_classes: int, model: str = "auto", head: str = "softmax",
                rescale: float = 1.0, seed: int = 0) -> Callable[[], tf.keras.Model]:
  """A zero-argument Keras builder that fits data of ``input_shape`` (your own data).

  Args:
    input_shape: one example's feature shape: ``(d,)`` for tabular data,
      ``(H, W, C)`` for images.
    num_classes: classes of the labels (2 for a binary task).
    model: "logreg" (logistic regression) or "mlp" (64 hidden units) for
      tabular data; "cnn" (the IDP-FedAvg paper's 14-layer CNN, Fig. 2; images
      of at least 22×22); "auto": logreg for tabular data, cnn for images.
    head: "softmax" or "sigmoid" (binary, one logit); see the module doc.
    rescale: the factor the CNN applies to stored pixels (1/255 for 0..255).
    seed: initialisation seed.
  """
  shape = tuple(int(s) for s in input_shape)
  if model not in MODELS:
    raise ValueError(f"model={model!r} must be one of {MODELS}.")
  if model == "auto":
    model = "logreg" if len(shape) == 1 else "cnn"
  units = output_units(num_classes, head)
  if model in ("logreg", "mlp"):
    if len(shape) != 1:
      raise ValueError(f"model={model!r} takes feature vectors; these examples have shape "
                       f"{shape}. Use model='cnn' for images.")
    if model == "logreg":
      return lambda: build_logistic_regression(shape[0], num_classes, seed=seed, head=head)
    return lambda: build_mlp(shape[0], num_classes, hidden=64, seed=seed, head=head)
  if len(shape) != 3 or min(shape[:2]) < 22:
    raise ValueError(f"model='cnn' takes images of at least 22×22×C; these examples have "
                     f"shape {shape}. Use model='logreg' or 'mlp' for feature vectors.")
  return lambda: build_idp_fedavg_cnn(shape, units, rescale=rescale, seed=seed)


def input_spec_for(input_shape):
  """The TFF input spec of batches ``OrderedDict(x=float32[None, *shape], y=int32[None])``."""
  return collections.OrderedDict(
      x=tf.TensorSpec((None,) + tuple(int(s) for s in input_shape), tf.float32),
      y=tf.TensorSpec((None,), tf.int32))
