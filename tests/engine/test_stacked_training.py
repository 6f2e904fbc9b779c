"""tff_idp/engine/stacked_training.py: the helpers of the families' vectorized rounds.

The rounds themselves are tested against the per-client and TFF rounds in each family's
``tests/*/test_vectorized.py``; here, the shapes and batches they are built from.
"""
import collections

import numpy as np
import pytest
import tensorflow as tf

from tff_idp import models
from tff_idp.engine import stacked_training

SPEC = collections.OrderedDict(x=tf.TensorSpec([None, 6], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))


@pytest.mark.parametrize("builder,widest", [
    (lambda: models.build_mlp(6, 3, hidden=8), 8),  # kernels [6, 8] and [8, 3]
    (lambda: models.build_logistic_regression(6, 2, head="sigmoid"), 1),  # kernel [6, 1]
])
def test_model_shapes_give_the_weights_and_the_widest_layer_output(builder, widest):
  """The widest output sizes a chunk's activations (the memory bound of a chunk)."""
  head = "sigmoid" if widest == 1 else "softmax"
  input_spec, specs, got = stacked_training.model_shapes(
      models.tff_model_fn(builder, SPEC, head=head))
  assert got == widest
  assert set(input_spec) == {"x", "y"}
  with tf.Graph().as_default():
    expected = [v.shape for v in builder().trainable_variables]
  assert [s.shape for s in specs] == expected and all(s.dtype == tf.float32 for s in specs)


def test_dataset_batches_keep_the_order_and_index_with_integers():
  x = np.arange(14, dtype=np.float32).reshape(7, 2)
  y = np.arange(7, dtype=np.int32)
  dataset = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(3)
  examples, batches = stacked_training.dataset_batches(dataset)
  np.testing.assert_array_equal(examples["x"], x)
  assert [b.tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]
  assert all(b.dtype == np.int64 for b in batches)


def test_an_empty_dataset_has_no_example_and_no_batch():
  spec = collections.OrderedDict(x=tf.TensorSpec([None, None], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  empty = tf.data.Dataset.from_generator(lambda: iter(()), output_signature=spec)
  examples, batches = stacked_training.dataset_batches(empty)
  assert examples["x"].shape == (0, 0) and examples["y"].shape == (0,)
  assert examples["x"].dtype == np.float32 and batches == []
  known = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=np.zeros((0, 5), np.float32), y=np.zeros(0, np.int32))).batch(2)
  assert stacked_training.dataset_batches(known)[0]["x"].shape == (0, 5)


def test_a_client_whose_first_weight_overflows_is_zeroed_even_if_its_last_is_finite():
  """Every weight's Δ is checked: a kernel step that overflows (x = 3e38, learning rate 10)
  while the bias stays finite zeroes that client alone and marks it not finite."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 2], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  stacked, head = stacked_training.stacked_model_of(
      models.tff_model_fn(lambda: models.build_logistic_regression(2, 2), spec))
  optimizer = tff.learning.optimizers.build_sgdm(10.0)
  examples = collections.OrderedDict(
      x=tf.constant([[3e38, 0.0], [3e38, 0.0], [1.0, 2.0], [0.0, 0.0]], tf.float32),
      y=tf.constant([0, 0, 1, 0], tf.int32))
  index = tf.constant([[[0, 1]], [[2, 3]]], tf.int32)  # client 0: rows 0-1; client 1: row 2
  mask = tf.constant([[[1.0, 1.0]], [[1.0, 0.0]]], tf.float32)

  @tf.function
  def run():
    return stacked_training.local_steps(stacked, head, optimizer,
                                        [tf.zeros([2, 2]), tf.zeros([2])], examples, index,
                                        mask)

  delta, stats = run()
  assert stats["finite"].numpy().tolist() == [False, True]
  assert not np.any(delta[0].numpy()[0]) and not np.any(delta[1].numpy()[0])
  assert np.any(delta[0].numpy()[1]) and np.all(np.isfinite(delta[0].numpy()[1]))


def test_only_a_toolkit_model_fn_with_a_known_head_and_x_y_inputs_is_served():
  builder = lambda: models.build_logistic_regression(6, 3)  # noqa: E731
  served = models.tff_model_fn(builder, SPEC)
  assert stacked_training.stacked_model_of(served)[1] == "softmax"

  def plain_model_fn():
    return served()

  assert stacked_training.stacked_model_of(plain_model_fn) is None  # no Keras builder
  plain_model_fn.keras_builder, plain_model_fn.head = builder, "linear"
  assert stacked_training.stacked_model_of(plain_model_fn) is None  # a head it cannot score
  assert set(stacked_training.examples_spec(SPEC)) == {"x", "y"}
  with pytest.raises(ValueError, match="OrderedDict\\(x=..., y=...\\)"):
    stacked_training.examples_spec(collections.OrderedDict(x=SPEC["x"], label=SPEC["y"]))
  with pytest.raises(ValueError, match="input spec is"):
    stacked_training.examples_spec((SPEC["x"], SPEC["y"]))
