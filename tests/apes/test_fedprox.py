"""APES's local FedProx: the proximal gradient μ·(w − w₀) pulls toward the round's model.

Checked against a NumPy softmax-regression reference (three SGD steps, so
the proximal term is non-zero from the second step on), and against TFF
0.87's own FedProx update, whose proximal term has the opposite sign (it
equals ours at −μ; see :mod:`tff_idp.apes.fedprox`).
"""
import collections

import numpy as np
import pytest

tff = pytest.importorskip("tensorflow_federated")
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_idp import models  # pylint: disable=g-import-not-at-top
from tff_idp.apes import fedprox  # pylint: disable=g-import-not-at-top
# TFF 0.87's FedProx client update, to pin its sign (not exported under tff.learning).
from tensorflow_federated.python.learning.templates import proximal_client_work  # pylint: disable=g-import-not-at-top

FEATURES, CLASSES, LR = 4, 3, 0.5
MODEL_FN = models.tff_model_fn(
    lambda: models.build_logistic_regression(FEATURES, CLASSES, seed=3),
    models.input_spec_for((FEATURES,)))


def _data():
  rng = np.random.default_rng(5)
  x = rng.normal(size=(9, FEATURES)).astype(np.float32)
  y = rng.integers(0, CLASSES, 9).astype(np.int32)
  return x, y, tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(3)


def _ours(mu, initial, data):
  delta = fedprox.build_fedprox_delta(MODEL_FN, tff.learning.optimizers.build_sgdm(LR), mu)
  return [np.asarray(d) for d in delta(initial, data)]


def _initial():
  return tff.learning.models.ModelWeights.from_model(MODEL_FN())


def _numpy_fedprox(kernel, bias, x, y, mu):
  w0, b0 = kernel.astype(np.float64), bias.astype(np.float64)
  w, b = w0.copy(), b0.copy()
  for start in range(0, len(x), 3):
    xb, yb = x[start:start + 3].astype(np.float64), y[start:start + 3]
    logits = xb @ w + b
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(yb)), yb] -= 1.0
    grad_w, grad_b = xb.T @ p / len(yb), p.mean(axis=0)
    w, b = (w - LR * (grad_w + mu * (w - w0)), b - LR * (grad_b + mu * (b - b0)))
  return [w0 - w, b0 - b]


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_three_steps_match_the_numpy_fedprox(mu):
  """Property: Δ after three steps of SGD on F_i + (μ/2)‖w − w₀‖². Catches a
  proximal term with the wrong sign (TFF 0.87's) or toward 0 (the reference
  code's PGD, defect D5)."""
  x, y, data = _data()
  initial = _initial()
  ours = _ours(mu, initial, data)
  kernel, bias = [np.asarray(v) for v in initial.trainable]
  want = _numpy_fedprox(kernel, bias, x, y, mu)
  for got, expected in zip(ours, want):
    np.testing.assert_allclose(got, expected, atol=2e-6)


def test_a_stronger_proximal_term_keeps_the_model_closer():
  _, _, data = _data()
  initial = _initial()
  norms = [np.sqrt(sum(np.sum(d ** 2) for d in _ours(mu, initial, data)))
           for mu in (0.0, 0.5, 1.0)]
  assert norms[0] > norms[1] > norms[2]


def test_tff_087_fedprox_has_the_opposite_sign():
  """TFF 0.87's FedProx update equals ours at −μ (why the toolkit has its own).

  If a TFF upgrade fixes the sign, this fails: then APES may use TFF's again.
  """
  _, _, data = _data()
  initial = _initial()

  update = proximal_client_work.build_model_delta_update_with_tff_optimizer(
      MODEL_FN, weighting=tff.learning.ClientWeighting.UNIFORM, delta_l2_regularizer=0.5,
      loop_implementation=tff.learning.LoopImplementation.DATASET_ITERATOR)
  result, _ = update(tff.learning.optimizers.build_sgdm(LR), initial, data)
  tff_update = [np.asarray(d) for d in result.update]
  for a, b in zip(tff_update, _ours(-0.5, initial, data)):
    np.testing.assert_allclose(a, b, atol=1e-6)
  assert not all(np.allclose(a, b, atol=1e-4)
                 for a, b in zip(tff_update, _ours(0.5, initial, data)))


def test_a_non_finite_update_is_zeroed():
  x, y, _ = _data()
  bad = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=np.full_like(x, np.inf), y=y)).batch(3)
  for d in _ours(0.1, _initial(), bad):
    assert np.all(d == 0)
