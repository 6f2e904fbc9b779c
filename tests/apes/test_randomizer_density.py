"""The TF randomizers against the exact density of what they release (Monte Carlo).

For APES's Clip-Laplace (:func:`clip_laplace.perturb`) and both S-APES
selections (:func:`sparsify.sparsify_perturb`), 30,000 releases of one d = 3
update are binned on a 4×4×4 grid and compared by a chi-square test with
the cell probabilities of the exact density
(:mod:`tff_idp.accounting.shuffle.sparsified_density`, integrated by the
midpoint rule on 120³ points; its error is far below the test's
resolution). Seeded; each test fails with probability 1e-4 with a fresh
seed if the sampler is exact.
"""
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tff_idp.accounting.shuffle import sparsified_density as sd
from tff_idp.apes import clip_laplace, sparsify

C = 0.1
D = 3
X = np.array([C, -0.5 * C, 0.2 * C], np.float32)
EPS_COORD = 2.0
EDGES = np.array([-1.0, -0.3, 0.0, 0.3, 1.0]) * C
SAMPLES = 30_000


def _releases(mechanism: str) -> np.ndarray:
  def one(seed):
    if mechanism == "none":
      return clip_laplace.perturb(X, EPS_COORD, C, seed)
    return sparsify.sparsify_perturb(X, EPS_COORD, C, 1, seed, selection=mechanism)

  seeds = tf.stack([tf.fill([SAMPLES], tf.constant(2026, tf.int64)),
                    tf.range(SAMPLES, dtype=tf.int64)], axis=1)
  draw = tf.function(lambda s: tf.map_fn(one, s, fn_output_signature=tf.float32,
                                         parallel_iterations=64))
  return draw(seeds).numpy().astype(np.float64)


def _cell_probabilities(selection: str, fine: int = 120) -> np.ndarray:
  centers = -C + (np.arange(fine) + 0.5) * (2 * C / fine)
  mesh = np.stack(np.meshgrid(*[centers] * D, indexing="ij"), -1).reshape(-1, D)
  mass = np.exp(sd.log_density(mesh, X.astype(np.float64), EPS_COORD, C, 1, selection))
  mass *= (2 * C / fine) ** D
  cells = np.stack([np.digitize(mesh[:, k], EDGES[1:-1]) for k in range(D)], 1)
  flat = np.ravel_multi_index(cells.T, (4,) * D)
  probs = np.bincount(flat, weights=mass, minlength=4 ** D)
  return probs / probs.sum()


@pytest.mark.parametrize("mechanism", ["none", "random", "top_b"])
def test_sampler_matches_the_exact_release_density(mechanism):
  releases = _releases(mechanism)
  assert np.all(np.abs(releases) <= C)
  cells = np.stack([np.digitize(releases[:, k], EDGES[1:-1]) for k in range(D)], 1)
  observed = np.bincount(np.ravel_multi_index(cells.T, (4,) * D), minlength=4 ** D)
  expected = SAMPLES * _cell_probabilities(mechanism)
  assert expected.min() > 5  # the chi-square approximation holds
  assert stats.chisquare(observed, expected).pvalue > 1e-4


def test_the_test_tells_the_selections_apart():
  """Power check: the post-top-b releases fail against the random-subset density."""
  releases = _releases("top_b")
  cells = np.stack([np.digitize(releases[:, k], EDGES[1:-1]) for k in range(D)], 1)
  observed = np.bincount(np.ravel_multi_index(cells.T, (4,) * D), minlength=4 ** D)
  assert stats.chisquare(observed, SAMPLES * _cell_probabilities("random")).pvalue < 1e-6
