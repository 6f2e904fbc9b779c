"""S-APES post-sparsification (Alg. 2): top-b of the perturbed values, fresh CLap(0) padding.

Pure TensorFlow (no TFF computation is executed). Random tests are seeded.
"""
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tff_idp.accounting.shuffle import clip_laplace_reference as ref
from tff_idp.errors import ToolkitValueError
from tff_idp.ldp import clip_laplace, sparsify

C = 0.1


def _streams(seed):
  return tf.random.experimental.stateless_split(tf.constant(seed, tf.int64), 2)


def test_exactly_b_perturbed_coordinates_are_kept():
  d, b, eps = 300, 40, 80.0
  x = tf.random.stateless_uniform([d], seed=[0, 1], minval=-0.2, maxval=0.2)
  seed = [21, 22]
  out = sparsify.sparsify_perturb(x, eps, C, b, seed).numpy()
  streams = _streams(seed)
  # Per-coordinate budget ε/b exactly (not ε/topk with a miscounted topk, D10).
  y = clip_laplace.perturb(x, eps / b, C, streams[0]).numpy()
  pad = clip_laplace.perturb(tf.zeros([d]), eps / b, C, streams[1]).numpy()
  top = np.argsort(-np.abs(y))[:b]
  mask = np.zeros(d, bool)
  mask[top] = True
  np.testing.assert_array_equal(out[mask], y[mask])
  np.testing.assert_array_equal(out[~mask], pad[~mask])
  assert np.sum(out == y) == b  # the padding never coincides with y
  assert np.all(np.abs(out) <= C)


def test_keep_everything_is_plain_clip_laplace_at_eps_over_d():
  x = tf.linspace(-0.1, 0.1, 50)
  out = sparsify.sparsify_perturb(x, 25.0, C, 50, [3, 3]).numpy()
  want = clip_laplace.perturb(x, 0.5, C, _streams([3, 3])[0]).numpy()
  np.testing.assert_array_equal(out, want)


def test_padding_is_fresh_noise_of_zero():
  """Padded values, pooled over 400 clients whose update is all +C (so the kept
  top-b values are biased far positive), follow CLap(0, 2C/ε', C): mean 0
  within 5 SE, KS test against the reference CDF at the 1e-6 level, and no
  correlation with the kept values. Flake rate with a fresh seed < 1e-5."""
  d, b, eps_coord = 200, 20, 3.0
  x = tf.fill([d], C)
  padded, kept = [], []
  for client in range(400):
    seed = [7, client]
    out = sparsify.sparsify_perturb(x, eps_coord * b, C, b, seed).numpy()
    y = clip_laplace.perturb(x, eps_coord, C, _streams(seed)[0]).numpy()
    is_kept = out == y
    assert is_kept.sum() == b
    padded.append(out[~is_kept])
    kept.append(out[is_kept])
  padded = np.concatenate(padded).astype(np.float64)
  kept = np.concatenate(kept)
  n = padded.size
  assert np.mean(padded) == pytest.approx(0.0, abs=5 * np.sqrt(ref.variance(0.0, eps_coord, C) / n))
  assert np.mean(kept) > 0.08  # the kept values carry the (biased) signal
  grid = np.linspace(-C, C, 100_001)
  pdf = ref.density(grid, 0.0, eps_coord, C)
  cdf = np.concatenate([[0.0], np.cumsum((pdf[1:] + pdf[:-1]) / 2 * np.diff(grid))])
  ks = stats.kstest(padded, lambda z: np.interp(z, grid, cdf))
  assert ks.pvalue > 1e-6


def test_top_b_looks_at_perturbed_values_only():
  # Same seed, two inputs that differ only in which coordinates are large:
  # at a tiny per-coordinate budget the perturbed values (hence the kept set)
  # barely depend on the input.
  d, b = 100, 10
  a = np.zeros(d, np.float32)
  a[:10] = C
  c = np.zeros(d, np.float32)
  c[-10:] = C
  out_a = sparsify.sparsify_perturb(a, 1e-3 * b, C, b, [5, 5]).numpy()
  out_c = sparsify.sparsify_perturb(c, 1e-3 * b, C, b, [5, 5]).numpy()
  np.testing.assert_allclose(out_a, out_c, atol=1e-4)


def test_deterministic_for_equal_seeds():
  x = tf.linspace(-0.1, 0.1, 64)
  a = sparsify.sparsify_perturb(x, 8.0, C, 8, [1, 2]).numpy()
  np.testing.assert_array_equal(a, sparsify.sparsify_perturb(x, 8.0, C, 8, [1, 2]).numpy())
  assert not np.array_equal(a, sparsify.sparsify_perturb(x, 8.0, C, 8, [1, 3]).numpy())


def test_per_coordinate_epsilon():
  assert sparsify.per_coordinate_epsilon(1570.0, 1570) == 1.0
  assert float(sparsify.per_coordinate_epsilon(tf.constant(6.0), 4)) == 1.5
  with pytest.raises(ToolkitValueError, match="epsilon"):
    sparsify.per_coordinate_epsilon(0.0, 4)


@pytest.mark.parametrize("bad_keep", [0, -1, 11, 2.5, True])
def test_invalid_keep_is_refused(bad_keep):
  with pytest.raises(ToolkitValueError, match="keep"):
    sparsify.sparsify_perturb(tf.zeros([10]), 1.0, C, bad_keep, [1, 2])


def test_needs_a_flat_vector_and_valid_budget():
  with pytest.raises(ToolkitValueError, match="flat"):
    sparsify.sparsify_perturb(tf.zeros([2, 5]), 1.0, C, 2, [1, 2])
  with pytest.raises(ToolkitValueError, match="epsilon"):
    sparsify.sparsify_perturb(tf.zeros([10]), -1.0, C, 2, [1, 2])
  with pytest.raises(ToolkitValueError, match="clip"):
    sparsify.sparsify_perturb(tf.zeros([10]), 1.0, -C, 2, [1, 2])
