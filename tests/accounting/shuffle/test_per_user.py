"""Per-user shuffle bound: values, grouping soundness, speed, errors."""
import math

import numpy as np
import pytest

from tests.accounting.shuffle.clone_reference import clip_laplace_clone_probs, clone_delta
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


# --- Small populations checked against the clone reduction summed here -----------------


def _assert_smallest(delta_fn, eps: float, target: float, step: float = 1e-6):
  """``eps`` certifies δ ≤ target and ``eps − step`` does not: the bisection is tight."""
  assert delta_fn(eps) <= target * (1 + 1e-9)
  assert delta_fn(eps - step) > target


SMALL = np.r_[np.full(150, 0.3), np.full(100, 0.8), np.full(50, 1.5)]


@pytest.mark.parametrize("u", [0, 150, 299])
def test_bound_small_population_against_reduction_by_hand(u):
  """Per-user ε^c of a 3-budget population of 300 at δ = 1e-4 equals the smallest ε at
  which the clone reduction, with the exact clone probability of every *other* user and
  the target's own α, is ≤ δ; ``clone_mean`` = Σ_j p_{j,u}, ``users`` = users at ε_u.

  Catches: the target counted among its own clones, Lemma 4's or the max's ε in place of
  the target's, a wrong α, a bisection that stops on the wrong side.
  """
  b = per_user.bound(SMALL, u, 1e-4)
  eps_u = float(SMALL[u])
  probs = clip_laplace_clone_probs(np.delete(SMALL, u), eps_u)
  assert b.target_epsilon == eps_u and b.delta == 1e-4
  assert b.users == int(np.sum(SMALL == eps_u))
  assert b.clone_mean == pytest.approx(probs.sum(), rel=1e-12)
  _assert_smallest(lambda x: clone_delta(probs, eps_u, x), b.epsilon, 1e-4)
  assert b.amplified and b.epsilon < eps_u


def test_group_bound_drops_the_largest_clone_probability():
  """A group with top budget ε_hi uses q_j = a(ε_j)b(ε_hi)e^{−ε_j} of all users minus the
  single largest q, and α(ε_hi); ``users`` counts everyone with ε ≤ ε_hi.

  Catches: dropping the smallest q (not sound for the group's members), dropping none, or
  the group's lowest budget in place of ε_hi.
  """
  g = per_user.group_bound(SMALL, 0.8, 1e-4)
  q = np.sort(clip_laplace_clone_probs(SMALL, 0.8))[:-1]
  assert g.target_epsilon == 0.8 and g.users == 250 and g.delta == 1e-4
  assert g.clone_mean == pytest.approx(q.sum(), rel=1e-12)
  _assert_smallest(lambda x: clone_delta(q, 0.8, x), g.epsilon, 1e-4)
  for u in (0, 150):  # sound for every member: at least the member's own bound
    assert g.epsilon >= per_user.bound(SMALL, u, 1e-4).epsilon


def test_population_bound_distinct_levels_against_reduction_by_hand():
  """With ≤ ``max_levels`` budgets every budget is its own level (the per-user bound of
  one of its users), the population ε^c is the largest level, and ``epsilon_for`` reads a
  user's level by its budget.

  Catches: a level computed for the wrong user, the min over levels reported as the
  population's, ``epsilon_for`` missing exact budgets.
  """
  pop = per_user.population_bound(SMALL, 1e-4, max_levels=3)
  assert pop.method == "distinct" and pop.delta == 1e-4
  assert [lv[:3] for lv in pop.levels] == [(0.3, 0.3, 150), (0.8, 0.8, 100), (1.5, 1.5, 50)]
  for lo, _, _, eps_c in pop.levels:
    u = int(np.flatnonzero(SMALL == lo)[0])
    probs = clip_laplace_clone_probs(np.delete(SMALL, u), lo)
    _assert_smallest(lambda x: clone_delta(probs, lo, x), eps_c, 1e-4)
    assert pop.epsilon_for(lo) == eps_c
  assert pop.epsilon == max(lv[3] for lv in pop.levels) == pop.levels[-1][3]
  d = pop.to_dict()
  assert d["method"] == "distinct" and d["delta"] == 1e-4 and d["epsilon"] == pop.epsilon
  assert d["levels"][1] == {"epsilon_lo": 0.8, "epsilon_hi": 0.8, "users": 100,
                            "epsilon_c": pop.levels[1][3]}


def test_population_bound_groups_against_reduction_by_hand():
  """With more budgets than ``max_levels`` the sorted budgets are cut into groups, each
  bounded by its group bound at the group's top budget (the largest q dropped), and
  ``epsilon_for`` finds a budget at either end of its group's range.

  Catches: a group bounded at its lowest budget (unsound for its top members), the
  population ε^c not the max, range ends excluded from ``epsilon_for``.
  """
  pop = per_user.population_bound(SMALL, 1e-4, max_levels=2)
  assert pop.method == "groups" and len(pop.levels) == 2
  (lo1, hi1, n1, e1), (lo2, hi2, n2, e2) = pop.levels
  assert (lo1, hi1, n1, lo2, hi2, n2) == (0.3, 0.3, 150, 0.8, 1.5, 150)
  q = np.sort(clip_laplace_clone_probs(SMALL, 1.5))[:-1]
  _assert_smallest(lambda x: clone_delta(q, 1.5, x), e2, 1e-4)
  q = np.sort(clip_laplace_clone_probs(SMALL, 0.3))[:-1]
  _assert_smallest(lambda x: clone_delta(q, 0.3, x), e1, 1e-4)
  assert pop.epsilon == e2 > e1
  assert pop.epsilon_for(0.8) == pop.epsilon_for(1.5) == e2
  with pytest.raises(ValueError, match="not one of"):
    pop.epsilon_for(0.5)
  one = per_user.population_bound(SMALL, 1e-4, max_levels=1)
  assert one.method == "groups" and one.levels[0][:3] == (0.3, 1.5, 300)
  assert one.epsilon == e2


@pytest.mark.parametrize("n,k", [(8, 4), (12, 3), (30, 5)])
def test_groups_have_equal_user_counts_for_distinct_budgets(n, k):
  """With n distinct budgets and k | n, the k groups hold n/k users each (the groups are
  cut at equal user counts, as documented).

  Catches: cuts shifted by one budget (groups of unequal size).
  """
  e = np.linspace(0.1, 2.0, n)
  pop = per_user.population_bound(e, 1e-2, max_levels=k, iterations=8)
  assert [lv[2] for lv in pop.levels] == [n // k] * k


def test_no_amplification_returns_the_local_epsilon():
  """Two users at ε = 1 and δ = 1e-9: the reduction gives no gain; the bound returns the
  target's own ε (up to a hair below it, traded for δ) and ``amplified`` follows ε < ε_u.

  Catches: an answer above the local ε, or ``amplified`` not comparing with the target.
  """
  b = per_user.bound([1.0, 1.0], 1, 1e-9)
  assert 1.0 - 1e-6 < b.epsilon <= 1.0
  assert b.amplified == (b.epsilon < 1.0)
  assert not per_user.PerUserBound(1.0, 1.0, 1e-9, 0.3, 2).amplified
  assert per_user.PerUserBound(1.0, 0.999, 1e-9, 0.3, 2).amplified


@pytest.mark.parametrize("bad", [[1.0, 0.0], [1.0, -0.5], [1.0, np.nan]])
def test_more_errors(bad):
  """Budgets ≤ 0 or nan and δ ≥ 1 are refused (Clip-Laplace needs ε > 0).

  Catches: a weakened budget or δ check.
  """
  with pytest.raises(ValueError, match="finite and > 0"):
    per_user.bound(bad, 0, 1e-6)
  with pytest.raises(ValueError, match="delta"):
    per_user.group_bound([1.0, 1.0], 1.0, 1.0)


def test_iterations_are_halvings_of_zero_to_the_target():
  """``iterations`` is the number of halvings of [0, ε_target]: with 4 the per-user, group and
  population answers are multiples of ε_target/16 that certify δ (summed here), and one grid
  step less does not.

  Catches: the caller's ``iterations`` not passed on (the default 40 used instead).
  """
  def on_grid(eps, top):
    return eps / (top / 16) == pytest.approx(round(eps / (top / 16)), abs=1e-9)

  b = per_user.bound(SMALL, 150, 1e-4, iterations=4)
  probs = clip_laplace_clone_probs(np.delete(SMALL, 150), 0.8)
  assert on_grid(b.epsilon, 0.8)
  assert clone_delta(probs, 0.8, b.epsilon) <= 1e-4 < clone_delta(probs, 0.8, b.epsilon - 0.05)
  g = per_user.group_bound(SMALL, 1.5, 1e-4, iterations=4)
  assert on_grid(g.epsilon, 1.5)
  distinct = per_user.population_bound(SMALL, 1e-4, iterations=4)
  assert all(on_grid(lv[3], lv[1]) for lv in distinct.levels)
  grouped = per_user.population_bound(SMALL, 1e-4, max_levels=2, iterations=4)
  assert all(on_grid(lv[3], lv[1]) for lv in grouped.levels)
