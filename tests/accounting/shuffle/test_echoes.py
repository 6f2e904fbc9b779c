"""Echo probabilities (Lemma 4, exact infimum) and EoN's O(n log n) sums; notes §2.6, §3.3."""

import numpy as np
import pytest

from tff_idp.accounting.shuffle import clip_laplace_reference as clap
from tff_idp.accounting.shuffle import echoes

N = 10_000


def test_lemma4_matrix_notes():
  expect = [[0.951229, 0.489334, 0.238406],
            [0.751796, 0.606531, 0.295505],
            [0.567667, 0.457980, 0.367879]]
  np.testing.assert_allclose(echoes.lemma4_matrix([0.05, 0.5, 1.0]), expect, atol=5e-7)


@pytest.mark.parametrize("seed", range(5))
def test_fast_sums_equal_quadratic_definition(seed):
  rng = np.random.default_rng(seed)
  n = int(rng.integers(2, 400))
  e = rng.uniform(0.01, 3.0, n)
  e[rng.integers(0, n, n // 4)] = e[0]  # ties, including possibly the max
  fast, slow = echoes.eon_sums(e), echoes.eon_sums_quadratic(e)
  assert fast.target_index == slow.target_index
  assert fast.mean == pytest.approx(slow.mean, rel=1e-12)
  assert fast.variance == pytest.approx(slow.variance, rel=1e-12)


@pytest.mark.parametrize("name,eps,s", [
    ("all 1.0", np.ones(N), 3678.4265),
    ("all 0.5", np.full(N, 0.5), 6064.7001),
    ("5000x0.1+5000x1", np.r_[np.full(5000, 0.1), np.ones(5000)], 5176.8042),
    ("linspace", np.linspace(0.05, 1, N), 5253.5944),
])
def test_s_values(name, eps, s):
  assert echoes.eon_sums(eps).mean == pytest.approx(s, abs=5e-5)


@pytest.mark.parametrize("name,s", [("Uniform2", 5255.86), ("Uniform1", 7113.66),
                                    ("Gauss2", 5917.80), ("MixGauss2", 5721.93)])
def test_table2_draws_reproduce_notes(name, s):
  e = clap.sample_epsilons(name, N, np.random.default_rng(0))
  assert echoes.eon_sums(e).mean == pytest.approx(s, abs=5e-3)


def test_million_users_in_seconds():
  e = np.random.default_rng(0).uniform(0.05, 1, 10**6)
  sums = echoes.eon_sums(e)
  assert 0 < sums.variance < sums.mean < 10**6


@pytest.mark.parametrize("eo,et", [(0.05, 1.0), (1.0, 0.05), (0.5, 0.5), (2.0, 3.0),
                                   (3.0, 0.1), (0.01, 5.0)])
def test_exact_infimum_matches_grid_and_dominates_lemma4(eo, et):
  exact = echoes.exact_clone_probability(eo, et)
  assert echoes.grid_infimum(eo, et, clip=0.1, points=301) == pytest.approx(exact, rel=1e-12)
  # A grid without the extremal points can only be larger.
  assert echoes.grid_infimum(eo, et, clip=0.1, points=300) >= exact * (1 - 1e-12)
  assert echoes.lemma4(eo, et) <= exact * (1 + 1e-15)
  if eo >= et:
    assert echoes.lemma4(eo, et) == pytest.approx(exact, rel=1e-14)


def test_uniform2_columns_notes_d1():
  e = clap.sample_epsilons("Uniform2", N, np.random.default_rng(0))
  u = int(np.argmax(e))
  assert echoes.column(e, u, "lemma4").total == pytest.approx(3002.11, abs=5e-3)
  col = echoes.column(e, u, "exact")
  assert col.total == pytest.approx(4846.08, abs=5e-2)
  # Every exact clone probability of the max user is >= e^{-ε_max} (FMT22's p).
  assert col.probabilities.min() >= np.exp(-e.max())
  assert col.probabilities.size == N - 1


def test_errors():
  with pytest.raises(ValueError, match="finite and > 0"):
    echoes.eon_sums([0.5, 0.0])
  with pytest.raises(ValueError, match="empty"):
    echoes.eon_sums([])
  with pytest.raises(ValueError, match="out of range"):
    echoes.column([0.5, 1.0], 2)
  with pytest.raises(ValueError, match="form"):
    echoes.column([0.5, 1.0], 0, form="avg")
