"""Comparisons of nested structures of tensors (model weights, states, metrics) in tests."""
import numpy as np
import tensorflow as tf


def flat(tree) -> list:
  """The leaves of ``tree`` as numpy arrays."""
  return [np.asarray(v) for v in tf.nest.flatten(tree)]


def assert_trees_close(a, b, tol: float) -> None:
  """Same number of leaves, each equal within ``tol`` (absolute and relative)."""
  fa, fb = flat(a), flat(b)
  assert len(fa) == len(fb)
  for x, y in zip(fa, fb):
    np.testing.assert_allclose(x, y, atol=tol, rtol=tol)
