"""Echo probabilities (Lemma 4, exact infimum) and EoN's O(n log n) sums; notes §2.6, §3.3."""

import math

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


def _p(eo: float, et: float) -> float:
  """Lemma 4 written out: ε_o/(1−e^{−ε_o}) · (1−e^{−ε_t})/ε_t · e^{−max(ε_o, ε_t)}."""
  return eo / (1 - math.exp(-eo)) * (1 - math.exp(-et)) / et * math.exp(-max(eo, et))


@pytest.mark.parametrize("e", [[0.3, 1.2, 0.3, 0.7], [2.0, 0.1], [0.5, 0.5, 0.5],
                               [0.2, 0.9, 0.9, 0.4, 0.05]])
def test_eon_sums_by_hand(e):
  """EoN's S = Σ_{i≠i*} Σ_j p_ij / n and Σ (p_ij/n)(1 − p_ij/n), i* the first argmax,
  summed here with explicit loops over Lemma 4.

  Catches: the target row kept or another row dropped, the 1/n or 1/n² scaling, the
  prefix/suffix split of the O(n log n) sums off by one at ties.
  """
  n = len(e)
  istar = int(np.argmax(e))
  pairs = [_p(e[i], e[j]) / n for i in range(n) if i != istar for j in range(n)]
  got = echoes.eon_sums(e)
  assert got.n == n and got.target_index == istar
  assert got.mean == pytest.approx(sum(pairs), rel=1e-12)
  assert got.variance == pytest.approx(sum(q * (1 - q) for q in pairs), rel=1e-12)
  quad = echoes.eon_sums_quadratic(e)
  assert quad.mean == pytest.approx(sum(pairs), rel=1e-12)
  assert quad.variance == pytest.approx(sum(q * (1 - q) for q in pairs), rel=1e-12)
  assert quad.n == n and quad.target_index == istar


def test_factors_and_probabilities_by_hand():
  """a(ε) = ε/(1−e^{−ε}), b = 1/a, Lemma 4 with e^{−max}, the exact infimum with e^{−ε_o}
  (both broadcast), and the Lemma 4 matrix's orientation (row = other user).

  Catches: a and b swapped, max for the other's ε in the exact form (under-counts clones
  for a larger target ε), a transposed matrix.
  """
  assert echoes.a_factor(1.0) == pytest.approx(1 / (1 - math.exp(-1)), rel=1e-14)
  assert echoes.b_factor(2.0) == pytest.approx((1 - math.exp(-2)) / 2, rel=1e-14)
  assert echoes.lemma4(0.3, 1.5) == pytest.approx(_p(0.3, 1.5), rel=1e-14)
  assert echoes.lemma4(1.5, 0.3) == pytest.approx(_p(1.5, 0.3), rel=1e-14)
  want = 0.3 / (1 - math.exp(-0.3)) * (1 - math.exp(-1.5)) / 1.5 * math.exp(-0.3)
  assert echoes.exact_clone_probability(0.3, 1.5) == pytest.approx(want, rel=1e-14)
  got = echoes.exact_clone_probability(np.array([0.3, 1.0])[:, None], np.array([1.5, 0.2]))
  assert got.shape == (2, 2) and got[0, 0] == pytest.approx(want, rel=1e-14)
  m = echoes.lemma4_matrix([0.1, 2.0])
  assert m[0, 1] == pytest.approx(_p(0.1, 2.0), rel=1e-14)
  assert m[1, 0] == pytest.approx(_p(2.0, 0.1), rel=1e-14)


def test_column_by_hand():
  """``column`` lists p_{j,u} for every j ≠ u (order kept), with Σp and Σp(1−p).

  Catches: the target left in its own column, the lemma4 and exact forms swapped, a
  negative index accepted.
  """
  e = [0.4, 1.0, 2.5]
  col = echoes.column(e, 1)
  want = [echoes.exact_clone_probability(0.4, 1.0), echoes.exact_clone_probability(2.5, 1.0)]
  np.testing.assert_allclose(col.probabilities, want, rtol=1e-14)
  assert col.total == pytest.approx(sum(want), rel=1e-14)
  assert col.variance == pytest.approx(sum(p * (1 - p) for p in want), rel=1e-14)
  lem = echoes.column(e, 1, "lemma4")
  np.testing.assert_allclose(lem.probabilities, [_p(0.4, 1.0), _p(2.5, 1.0)], rtol=1e-14)
  with pytest.raises(ValueError, match="out of range"):
    echoes.column(e, -1)
  assert echoes.column(e, 2).probabilities.size == 2


@pytest.mark.parametrize("bad", [[1.0, np.nan], [1.0, np.inf], [-0.5]])
def test_bad_budgets(bad):
  """Non-finite or negative budgets are refused by every entry point.

  Catches: a weakened budget check.
  """
  for fn in (echoes.a_factor, echoes.b_factor, echoes.eon_sums, echoes.lemma4_matrix):
    with pytest.raises(ValueError, match="finite and > 0"):
      fn(bad)
