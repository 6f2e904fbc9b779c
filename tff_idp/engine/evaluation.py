"""Centralized evaluation of the released (server) model on held-out data.

:func:`keras_evaluator` turns a Keras model builder and test arrays into the
``evaluate_fn`` that :class:`tff_idp.engine.driver.RoundDriver` calls on
evaluation rounds: ``model_weights -> {"loss", "accuracy", ...}``. Evaluating
the released model on held-out data is post-processing of the private
release, so its results are release metrics (``metrics.csv``).

It works for every model family of the toolkit: IDP-FedAvg's
(``tff.learning`` model weights) and rPDP-FL's, softmax or sigmoid heads
(:mod:`tff_idp.models`), and with ``class_groups`` it adds per-group utility
(:mod:`tff_idp.engine.group_metrics`).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import numpy as np
import tensorflow as tf

from tff_idp.engine import group_metrics


def _logits(model: tf.keras.Model, x: np.ndarray, batch_size: Optional[int]) -> np.ndarray:
  if batch_size is None:
    return model(x, training=False).numpy()
  return np.concatenate([model(x[i:i + batch_size], training=False).numpy()
                         for i in range(0, len(x), batch_size)])


def predictions_and_loss(logits: np.ndarray, labels: np.ndarray,
                         head: str = "softmax") -> tuple[np.ndarray, float]:
  """(predicted labels, mean cross-entropy) of logits under ``head``."""
  if head == "sigmoid":
    z = logits.reshape(-1).astype(np.float64)
    y = labels.reshape(-1).astype(np.float64)
    # log(1 + e^z) - y z, computed stably.
    loss = float(np.mean(np.logaddexp(0.0, z) - y * z))
    return (z > 0).astype(labels.dtype), loss
  loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
  return np.argmax(logits, -1), float(loss.numpy())


def keras_evaluator(keras_builder: Callable[[], tf.keras.Model],
                    test_x: np.ndarray, test_y: np.ndarray,
                    batch_size: Optional[int] = None,
                    class_groups: Optional[Mapping[int, str]] = None,
                    head: str = "softmax") -> Callable[[Any], dict]:
  """``evaluate(model_weights) -> {"loss", "accuracy", ...}`` on ``(test_x, test_y)``.

  Args:
    keras_builder: builds the (uncompiled, logits) Keras model; it is rebuilt
      per call, because TFF traces models inside graphs, which invalidates
      Keras models built earlier outside them.
    test_x, test_y: held-out features and integer labels.
    batch_size: bounds memory for large test sets and CNNs (None: all at once).
    class_groups: ``{label: group name}``; the result then also holds
      :meth:`GroupReport.flat` (``acc/<group>``, ``recall/<group>``,
      ``worst_group_accuracy``, ``imbalance``).
    head: "softmax" (argmax of the logits) or "sigmoid" (one logit, > 0).
  """
  test_x = np.asarray(test_x, np.float32)
  test_y = np.asarray(test_y)

  def evaluate(model_weights) -> dict:
    model = keras_builder()
    model_weights.assign_weights_to(model)
    logits = _logits(model, test_x, batch_size)
    predictions, loss = predictions_and_loss(logits, test_y, head)
    result = {"loss": loss, "accuracy": float(np.mean(predictions == test_y))}
    if class_groups is not None:
      report = group_metrics.group_report(test_y, predictions, class_groups=class_groups)
      result.update({k: v for k, v in report.flat().items() if k not in result})
    return result

  return evaluate
