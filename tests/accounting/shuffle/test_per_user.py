"""Per-user shuffle bound: values, grouping soundness, speed, errors."""

import numpy as np
import pytest

from tff_idp.accounting.shuffle import clip_laplace_reference as clap
from tff_idp.accounting.shuffle import fmt22
from tff_idp.accounting.shuffle import per_user
from tff_idp.accounting.shuffle import reduction

N = 10_000


@pytest.fixture(scope="module")
def uniform2():
  return clap.sample_epsilons("Uniform2", N, np.random.default_rng(0))


def test_uniform2_max_user(uniform2):
  u = int(np.argmax(uniform2))
  b = per_user.bound(uniform2, u, 1e-8)
  assert b.clone_mean == pytest.approx(4846.08, abs=0.05)
  assert b.epsilon == pytest.approx(0.059615, abs=5e-6)
  # Between EoN as published (0.05749) and FMT22 at ε_max (exact 0.06888).
  assert 0.0575 < b.epsilon < fmt22.numeric(N, uniform2.max(), 1e-8)
  assert b.amplified


def test_population_bound_uniform2(uniform2):
  pop = per_user.population_bound(uniform2, 1e-8)
  assert pop.method == "groups" and len(pop.levels) == 32
  assert sum(lv[2] for lv in pop.levels) == N
  assert pop.epsilon == pytest.approx(0.059616, abs=5e-6)
  eps_c = [lv[3] for lv in pop.levels]
  assert eps_c == sorted(eps_c)  # larger budgets, larger ε^c
  assert pop.epsilon_for(uniform2.min()) == eps_c[0]
  assert pop.to_dict()["levels"][-1]["epsilon_hi"] == uniform2.max()


def test_homogeneous_equals_fmt22_exact():
  e = np.full(N, 1.0)
  assert per_user.bound(e, 0, 1e-8).epsilon == pytest.approx(fmt22.numeric(N, 1.0, 1e-8), abs=1e-9)
  pop = per_user.population_bound(e, 1e-8)
  assert pop.method == "distinct" and pop.levels[0][2] == N


def test_groups_are_conservative_against_distinct():
  rng = np.random.default_rng(5)
  e = rng.choice([0.1, 0.3, 0.6, 1.0, 2.0], size=2000)
  exact = per_user.population_bound(e, 1e-6)
  grouped = per_user.population_bound(e, 1e-6, max_levels=2)
  assert exact.method == "distinct" and grouped.method == "groups"
  for lo, hi, _, eps_c in grouped.levels:
    for v in (0.1, 0.3, 0.6, 1.0, 2.0):
      if lo <= v <= hi:
        assert eps_c >= exact.epsilon_for(v) - 1e-12
  assert grouped.epsilon >= exact.epsilon - 1e-12


def test_group_bound_covers_each_member():
  e = np.random.default_rng(2).uniform(0.05, 1.0, 500)
  hi = float(np.sort(e)[300])
  g = per_user.group_bound(e, hi, 1e-4)
  for u in np.flatnonzero(e <= hi)[:20]:
    assert per_user.bound(e, int(u), 1e-4).epsilon <= g.epsilon + 1e-12


def test_small_n_no_threshold_and_never_above_local():
  e = np.array([1.0, 0.5, 0.2])
  b = per_user.bound(e, 0, 1e-3)
  assert b.epsilon <= 1.0  # never above the target's local ε
  assert per_user.bound(np.array([0.3, 0.3]), 0, 0.4).amplified  # δ large enough


def test_clone_count_is_poisson_binomial():
  e = np.array([0.5, 1.0, 2.0])
  cc = per_user.clone_count(e, 2)
  assert isinstance(cc, reduction.CloneCount)
  assert cc.mean == pytest.approx(sum(
      a * b for a, b in [(0.5 / (1 - np.exp(-0.5)) * np.exp(-0.5), (1 - np.exp(-2)) / 2),
                         (1 / (1 - np.exp(-1)) * np.exp(-1), (1 - np.exp(-2)) / 2)]))


def test_errors():
  with pytest.raises(ValueError, match="n >= 2"):
    per_user.bound([1.0], 0, 1e-6)
  with pytest.raises(ValueError, match="finite and > 0"):
    per_user.population_bound([1.0, np.inf], 1e-6)
  with pytest.raises(ValueError, match="delta"):
    per_user.bound([1.0, 1.0], 0, 0.0)
  with pytest.raises(ValueError, match="max_levels"):
    per_user.population_bound([1.0, 2.0], 1e-6, max_levels=0)
  with pytest.raises(ValueError, match="not one of"):
    per_user.population_bound([1.0, 2.0], 1e-6).epsilon_for(3.0)


@pytest.mark.parametrize("seed", range(10))
def test_groups_partition_the_budgets(seed):
  rng = np.random.default_rng(seed)
  n, k = int(rng.integers(2, 300)), int(rng.integers(1, 40))
  e = rng.choice(rng.uniform(0.05, 2, int(rng.integers(1, 60))), n)
  pop = per_user.population_bound(e, 1e-4, max_levels=k, iterations=10)
  lv = pop.levels
  assert sum(x[2] for x in lv) == n
  assert lv[0][0] == e.min() and lv[-1][1] == e.max()
  assert all(a[1] < b[0] for a, b in zip(lv, lv[1:]))
  assert len(lv) <= k
  for v in np.unique(e):
    pop.epsilon_for(v)  # every budget is covered
