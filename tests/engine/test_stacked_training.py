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
