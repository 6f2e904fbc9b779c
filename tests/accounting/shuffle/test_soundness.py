"""Bounds vs the true shuffled Clip-Laplace mechanism (findings in per_user's docstring)."""
import math

import numpy as np
import pytest
from scipy import integrate

from tff_idp.accounting.shuffle import clip_laplace_reference as clap
from tff_idp.accounting.shuffle import echoes
from tff_idp.accounting.shuffle import eon
from tff_idp.accounting.shuffle import per_user
from tff_idp.accounting.shuffle import soundness

C = 1.0
EPS = np.array([0.0, 0.1, 0.5, 1.0])

# (target ε, others' ε, others' inputs, panels): target is user 0 and the max.
CONFIGS = [
    (10.0, [0.01], [0.0], 20),
    (2.0, [0.05], [-C], 20),
    (1.0, [1.0], [C], 20),
    (3.0, [0.1], [C], 20),
    (8.0, [0.05, 0.05], [0.0, 0.0], 6),
    (8.0, [0.05, 0.05], [-C, -C], 6),
    (1.0, [1.0, 1.0], [C, C], 6),
    (2.0, [0.5, 1.0], [C, -C], 6),
]


@pytest.fixture(scope="module")
def true_deltas():
  return {i: soundness.shuffled_delta(eu, oe, oy, EPS, panels=p)
          for i, (eu, oe, oy, p) in enumerate(CONFIGS)}


def test_single_report_matches_direct_quadrature():
  eps_u = 2.0
  got = soundness.shuffled_delta(eps_u, [], [], EPS, panels=20)
  for e, g in zip(EPS, got):
    f = lambda z: max(clap.density(z, -C, eps_u, C) - math.exp(e) * clap.density(z, C, eps_u, C), 0)
    assert g == pytest.approx(integrate.quad(f, -C, C, limit=200, epsabs=1e-12)[0], abs=1e-9)


def test_quadrature_converged():
  a = soundness.shuffled_delta(8.0, [0.05, 0.05], [0.0, 0.0], EPS, panels=4)
  b = soundness.shuffled_delta(8.0, [0.05, 0.05], [0.0, 0.0], EPS, panels=6)
  np.testing.assert_allclose(a, b, atol=2e-5)


@pytest.mark.parametrize("i", range(len(CONFIGS)))
def test_sound_bounds_dominate_truth(true_deltas, i):
  eu, oe, oy, _ = CONFIGS[i]
  e = np.r_[eu, oe]
  truth = true_deltas[i]
  for rule in ("per_user", "fmt22_max", "lemma4_column"):
    assert np.all(soundness.reduction_delta(e, 0, rule, EPS) >= truth - 1e-6), rule
  # The band-count statistic is a post-processing: never above the truth.
  lb = soundness.binned_lower_bound(e.size, eu, oe[0], EPS, other_input=oy[0])
  if len(set(oe)) == 1 and len(set(oy)) == 1:
    assert np.all(lb <= truth + 1e-6)


def test_eon_step_is_below_truth(true_deltas):
  # n = 2, ε = (10, 0.01): true δ(0) = 0.8004; EoN's averaged echo gives 0.7524.
  truth = true_deltas[0]
  assert truth[0] == pytest.approx(0.80039, abs=1e-4)
  e = np.r_[10.0, 0.01]
  for rule in ("eon_average", "eon_literal"):
    claimed = soundness.reduction_delta(e, 0, rule, EPS[:2])
    assert claimed[0] == pytest.approx(0.75242, abs=1e-4)
    assert np.all(claimed < truth[:2] - 0.03)
  # n = 3, ε = (8, 0.05, 0.05), inputs 0: true 0.6330 vs 0.5665 / 0.5962.
  truth = true_deltas[4]
  e = np.r_[8.0, 0.05, 0.05]
  assert truth[0] == pytest.approx(0.63304, abs=1e-4)
  assert soundness.reduction_delta(e, 0, "eon_average", [0.0])[0] == pytest.approx(0.56654, abs=1e-4)
  assert soundness.reduction_delta(e, 0, "eon_literal", [0.0])[0] == pytest.approx(0.59620, abs=1e-4)
  assert np.all(soundness.reduction_delta(e, 0, "eon_average", EPS[:3]) < truth[:3])


def test_eon_step_below_lower_bound_at_n300():
  n = 300
  e = np.r_[10.0, np.full(n - 1, 0.01)]
  lb = soundness.binned_lower_bound(n, 10.0, 0.01, [0.3])[0]
  claimed = soundness.reduction_delta(e, 0, "eon_average", [0.3])[0]
  assert lb == pytest.approx(2.6e-3, rel=0.05)
  assert claimed < lb / 5
  assert soundness.reduction_delta(e, 0, "per_user", [0.3])[0] >= lb


def test_published_eon_numeric_violated_where_thm4_applies():
  n, delta = 1000, 1e-3
  e = np.r_[10.0, np.full(n - 1, 0.01)]
  r = eon.bound(e, delta)
  assert r.amplified and r.s >= eon.threshold(delta)  # S = 988 >= 132.7
  assert r.epsilon_numeric == pytest.approx(0.1072, abs=5e-4)
  lb = soundness.binned_lower_bound(n, 10.0, 0.01, [r.epsilon_numeric])[0]
  assert lb > 5 * delta  # true δ(ε^c) >= 5.4e-3 > δ_s
  ours = per_user.bound(e, 0, delta)
  assert ours.epsilon == pytest.approx(0.4667, abs=5e-4)
  assert soundness.binned_lower_bound(n, 10.0, 0.01, [ours.epsilon])[0] <= delta


@pytest.mark.slow
def test_published_eon_numeric_violated_n1e4():
  n, delta = 10_000, 1e-8
  e = np.r_[10.0, np.full(n - 1, 0.01)]
  eps_c = eon.numeric(e, delta)
  assert eps_c == pytest.approx(0.0919, abs=5e-4)
  lb = soundness.binned_lower_bound(n, 10.0, 0.01, [eps_c], widths=(0.2, 0.3))[0]
  assert lb > 100 * delta


def test_numeric_loops_return_zero_below_one_block():
  # range(1, ceil(n/step)) is empty for n <= step: δ(ε) = 0 for every ε.
  e = np.r_[10.0, np.full(99, 0.01)]
  assert eon.bound(e, 1e-2).amplified
  assert eon.numeric(e, 1e-2) < 2e-3
  assert soundness.binned_lower_bound(100, 10.0, 0.01, [eon.numeric(e, 1e-2)])[0] > 0.1


@pytest.mark.parametrize("seed", range(3))
def test_every_exact_clone_probability_beats_fmt22_at_max(seed):
  e = np.random.default_rng(seed).uniform(0.01, 6.0, 300)
  p = echoes.exact_clone_probability(e[:, None], e[None, :])
  assert p.min() >= math.exp(-e.max()) * (1 - 1e-12)
  # With Lemma 4's form the same is false (ε_j small, target at the max).
  u = int(np.argmax(e))
  assert echoes.column(e, u, "lemma4").probabilities.min() < math.exp(-e.max())


def test_unknown_rule():
  with pytest.raises(ValueError, match="rule"):
    soundness.clone_count([1.0, 1.0], 0, "avg")
  with pytest.raises(ValueError, match="n ≤ 3"):
    soundness.shuffled_delta(1.0, [1, 1, 1], [0, 0, 0], [0.0])
