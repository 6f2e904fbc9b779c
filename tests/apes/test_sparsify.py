"""S-APES sparsification (Alg. 2): the random b-subset (default) and the paper's post-top-b.

Pure TensorFlow (no TFF computation is executed). Random tests are seeded.
"""
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tff_idp.accounting.shuffle import clip_laplace_reference as ref
from tff_idp.errors import ToolkitValueError
from tff_idp.apes import clip_laplace, sparsify

C = 0.1


def _streams(seed):
  return tf.random.experimental.stateless_split(tf.constant(seed, tf.int64), 2)


def test_random_selection_is_a_data_independent_b_subset():
  """The kept set comes from the seed alone: with one seed, an update x and the
  zero update give the same draws outside the b kept coordinates (which are
  the top-b of the seed's first stream of uniforms) and differ inside."""
  d, b, eps = 300, 40, 80.0
  x = tf.random.stateless_uniform([d], seed=[0, 1], minval=-0.2, maxval=0.2)
  seed = [21, 22]
  out = sparsify.sparsify_perturb(x, eps, C, b, seed).numpy()
  out_zero = sparsify.sparsify_perturb(tf.zeros([d]), eps, C, b, seed).numpy()
  streams = _streams(seed)
  keys = tf.random.stateless_uniform([d], seed=streams[0]).numpy()
  mask = np.zeros(d, bool)
  mask[np.argsort(-keys)[:b]] = True
  want = clip_laplace.perturb(np.where(mask, x.numpy(), 0.0), eps / b, C, streams[1]).numpy()
  np.testing.assert_array_equal(out, want)
  np.testing.assert_array_equal(out[~mask], out_zero[~mask])
  assert np.all(out[mask] != out_zero[mask])
  assert np.all(np.abs(out) <= C)


def test_random_selection_keeps_every_coordinate_with_probability_b_over_d():
  """Over 4,000 seeds each of d = 10 coordinates is kept ≈ 4000·b/d times
  (chi-square, 9 degrees of freedom, p > 1e-4: flake rate 1e-4 with a fresh
  seed); the kept coordinates are those that carry the input +C."""
  d, b, clients = 10, 3, 4000
  release = tf.function(lambda x, seed: sparsify.sparsify_perturb(x, 1.0 * b, C, b, seed))
  x, zero = tf.fill([d], C), tf.zeros([d])
  counts = np.zeros(d)
  for client in range(clients):
    seed = tf.constant([11, client], tf.int64)
    counts += release(x, seed).numpy() != release(zero, seed).numpy()
  assert counts.sum() == clients * b
  assert stats.chisquare(counts).pvalue > 1e-4


def test_exactly_b_perturbed_coordinates_are_kept_by_top_b():
  d, b, eps = 300, 40, 80.0
  x = tf.random.stateless_uniform([d], seed=[0, 1], minval=-0.2, maxval=0.2)
  seed = [21, 22]
  out = sparsify.sparsify_perturb(x, eps, C, b, seed, selection="top_b").numpy()
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


@pytest.mark.parametrize("selection, stream", [("random", 1), ("top_b", 0)])
def test_keep_everything_is_plain_clip_laplace_at_eps_over_d(selection, stream):
  x = tf.linspace(-0.1, 0.1, 50)
  out = sparsify.sparsify_perturb(x, 25.0, C, 50, [3, 3], selection=selection).numpy()
  want = clip_laplace.perturb(x, 0.5, C, _streams([3, 3])[stream]).numpy()
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
    out = sparsify.sparsify_perturb(x, eps_coord * b, C, b, seed, selection="top_b").numpy()
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
  out_a = sparsify.sparsify_perturb(a, 1e-3 * b, C, b, [5, 5], selection="top_b").numpy()
  out_c = sparsify.sparsify_perturb(c, 1e-3 * b, C, b, [5, 5], selection="top_b").numpy()
  np.testing.assert_allclose(out_a, out_c, atol=1e-4)


@pytest.mark.parametrize("selection", sparsify.SELECTIONS)
def test_deterministic_for_equal_seeds(selection):
  x = tf.linspace(-0.1, 0.1, 64)
  run = lambda seed: sparsify.sparsify_perturb(x, 8.0, C, 8, seed, selection=selection).numpy()
  a = run([1, 2])
  np.testing.assert_array_equal(a, run([1, 2]))
  assert not np.array_equal(a, run([1, 3]))


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
  with pytest.raises(ToolkitValueError, match="selection='post'.*'random'.*'top_b'"):
    sparsify.sparsify_perturb(tf.zeros([10]), 1.0, C, 2, [1, 2], selection="post")
