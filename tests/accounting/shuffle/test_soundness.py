"""Bounds vs the true shuffled Clip-Laplace mechanism (findings in per_user's docstring)."""
import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats

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


def _conv(probs) -> np.ndarray:
  """Poisson-binomial pmf by convolution (from 0)."""
  pmf = np.array([1.0])
  for p in probs:
    pmf = np.convolve(pmf, [1 - p, p])
  return pmf


def _lemma4(eo: float, et: float) -> float:
  return eo / (1 - math.exp(-eo)) * (1 - math.exp(-et)) / et * math.exp(-max(eo, et))


def _exact(eo: float, et: float) -> float:
  return eo / (1 - math.exp(-eo)) * (1 - math.exp(-et)) / et * math.exp(-eo)


def _full(cc) -> np.ndarray:
  out = np.zeros(cc.offset + cc.pmf.size)
  out[cc.offset:] = cc.pmf
  return out


def test_clone_count_rules_by_hand():
  """Each rule's clone count for target 1 of ε = (0.5, 2.0, 0.2): per_user the exact
  infimum column, lemma4_column Lemma 4's column, eon_literal n(n−1) Bernoullis p_ij/n
  (i ≠ target, every j), eon_average n−1 Bernoullis (1/n)Σ_j p_ij, fmt22_max
  Bin(n−1, e^{−ε_max}); pmfs by convolution here.

  Catches: a rule using another rule's probabilities, the target kept among its clones,
  the 1/n missing.
  """
  e = [0.5, 2.0, 0.2]
  u, others = 1, [0.5, 0.2]
  want = {
      "per_user": [_exact(o, 2.0) for o in others],
      "lemma4_column": [_lemma4(o, 2.0) for o in others],
      "eon_literal": [_lemma4(o, t) / 3 for o in others for t in e],
      "eon_average": [np.mean([_lemma4(o, t) for t in e]) for o in others],
      "fmt22_max": [math.exp(-2.0)] * 2,
  }
  for rule, probs in want.items():
    got = _full(soundness.clone_count(e, u, rule))
    ref = _conv(probs)
    np.testing.assert_allclose(got, ref[:got.size], rtol=1e-12, atol=1e-300, err_msg=rule)
    assert ref[got.size:].sum() <= 1e-30, rule


def test_reduction_delta_uses_the_rules_alpha():
  """per_user and lemma4_column use the target's own ε for α, the EoN and FMT22 rules ε_max;
  each δ(ε) is the hockey-stick sum of its count (by hand with the brute-force pairs).

  Catches: α from the wrong budget (a smaller α under-states δ).
  """
  e = [0.5, 2.0, 0.2]
  for rule, eps_t in (("per_user", 0.5), ("lemma4_column", 0.5), ("eon_average", 2.0),
                      ("fmt22_max", 2.0)):
    cc = soundness.clone_count(e, 0, rule)
    a = math.exp(eps_t) / (1 + math.exp(eps_t))
    for x in (0.0, 0.1):
      want = 0.0
      for c, w in zip(cc.support, cc.pmf):
        k = np.arange(c + 2)
        b, bm = stats.binom.pmf(k, c, 0.5), stats.binom.pmf(k - 1, c, 0.5)
        want += w * np.maximum(a * bm + (1 - a) * b - math.exp(x) * ((1 - a) * bm + a * b),
                               0).sum()
      got = soundness.reduction_delta(e, 0, rule, [x])[0]
      assert got == pytest.approx(want + cc.tail_mass, rel=1e-12), rule


def test_count_difference_pmf_by_hand():
  """The band-count difference D = Σ(+1 w.p. r₊, −1 w.p. r₋) over m reports has the pmf of
  m convolutions of [r₋, 1−r₊−r₋, r₊] on −m..m; with r₊ = r₋ = 0 it is 0 surely.

  Catches: the ±1 sides swapped, a binomial split with the wrong share.
  """
  for m, rp, rm in ((1, 0.2, 0.3), (3, 0.2, 0.3), (5, 0.05, 0.6)):
    ref = np.array([1.0])
    for _ in range(m):
      ref = np.convolve(ref, [rm, 1 - rp - rm, rp])
    np.testing.assert_allclose(soundness._count_difference_pmf(m, rp, rm), ref, atol=1e-15)
  zero = soundness._count_difference_pmf(3, 0.0, 0.0)
  assert zero.tolist() == [0, 0, 0, 1, 0, 0, 0]


def test_binned_lower_bound_two_reports_by_hand():
  """n = 2 (target at ±C, one other at y = 0), one band width w: D's pmf under x = −C and
  x = +C from the closed-form CDF, δ(ε) = max of the two hockey-stick sums over
  |D| ≤ n − 1 (the code leaves out |D| = n: a sub-sum, still a lower bound), by hand.

  Catches: the target's bands taken at the wrong end, the other's band probabilities
  from the wrong input, the max over directions or widths dropped, either direction's
  sum miscomputed (an other report at y = ±0.5 makes the two directions differ, and
  each decides at one sign), the defaults (other input 0, clip 1) changed.
  """
  eu, eo, w = 2.0, 0.5, 0.3
  t = 1.0 - w
  q_top = 1 - clap.cdf(t, 1.0, eu, 1.0)     # target at +C, top band
  q_bot = clap.cdf(-t, 1.0, eu, 1.0)        # target at +C, bottom band
  for y in (0.0, 0.5, -0.5):
    r_top = 1 - clap.cdf(t, y, eo, 1.0)
    r_bot = clap.cdf(-t, y, eo, 1.0)
    other = np.array([r_bot, 1 - r_top - r_bot, r_top])   # D_other on −1..1
    tgt_p = np.array([q_bot, 1 - q_top - q_bot, q_top])   # target at +C
    p = np.convolve(other, tgt_p)[1:-1]  # D on −1..1: the code sums over |D| ≤ n−1 only,
    q = np.convolve(other, tgt_p[::-1])[1:-1]  # a sub-sum, so still a lower bound
    for x in (0.0, 0.4):
      sides = (np.maximum(p - math.exp(x) * q, 0).sum(), np.maximum(q - math.exp(x) * p, 0).sum())
      if y != 0.0 and x > 0:
        assert abs(sides[0] - sides[1]) > 1e-3 * max(sides)  # the directions differ here
      got = soundness.binned_lower_bound(2, eu, eo, [x], widths=(w,), other_input=y)[0]
      assert got == pytest.approx(max(sides), rel=1e-12, abs=1e-15)
  defaults = soundness.binned_lower_bound(2, eu, eo, [0.4], widths=(w,))[0]
  assert defaults == soundness.binned_lower_bound(2, eu, eo, [0.4], widths=(w,),
                                                  other_input=0.0, clip=1.0)[0]
  assert defaults > 0 and defaults != soundness.binned_lower_bound(
      2, eu, eo, [0.4], widths=(w,), other_input=1.0)[0]
  both = soundness.binned_lower_bound(2, eu, eo, [0.0], widths=(0.1, w))[0]
  assert both >= soundness.binned_lower_bound(2, eu, eo, [0.0], widths=(w,))[0]


def test_shuffled_delta_input_checks():
  """Other users' inputs must be −C, 0 or C (density kinks on panel edges); at most 3
  reports.

  Catches: the kink check weakened (a silently inaccurate quadrature).
  """
  with pytest.raises(ValueError, match="other_inputs"):
    soundness.shuffled_delta(1.0, [1.0], [0.5], [0.0])
  with pytest.raises(ValueError, match="other_inputs"):
    soundness.shuffled_delta(1.0, [1.0], [-0.3], [0.0], clip=0.5)
  for y in (-0.5, 0.0, 0.5):
    assert soundness.shuffled_delta(1.0, [1.0], [y], [0.0], clip=0.5, panels=2).shape == (1,)
  assert soundness.shuffled_delta(1.0, [1.0, 1.0], [0.0, 0.0], [0.0], panels=1).shape == (1,)


@pytest.mark.parametrize("other_input", [-C, C])
def test_two_reports_match_a_midpoint_rule_on_both_sides(other_input):
  """n = 2 (target ±C, another user at ε = 0.5 holding ∓C or ±C): δ(ε) is the larger of the
  two hockey-stick divergences, computed here by the midpoint rule on 1000² cells from the
  shuffled pair's density ½[f(z₁|x)f(z₂|y) + f(z₁|y)f(z₂|x)].

  With the other user at −C the p-side (target at −C) divergence is the larger one, at +C
  the q-side one (measured: 0.2833 vs 0.2879 at ε = 0.1), so each side is checked where it
  decides. Tolerance 1e-5 (the midpoint rule agrees to 2e-7). Bug caught: either side's
  e^ε·density written as e^ε/density.
  """
  eps_u, eps_other = 2.0, 0.5
  got = soundness.shuffled_delta(eps_u, [eps_other], [other_input], EPS[1:], panels=20)
  m = 1000
  z = -C + (np.arange(m) + 0.5) * (2 * C / m)
  cell = (2 * C / m) ** 2
  target_low, target_high = clap.density(z, -C, eps_u, C), clap.density(z, C, eps_u, C)
  other = clap.density(z, other_input, eps_other, C)
  p = 0.5 * (np.outer(target_low, other) + np.outer(other, target_low))
  q = 0.5 * (np.outer(target_high, other) + np.outer(other, target_high))
  for e, g in zip(EPS[1:], got):
    k = math.exp(e)
    want = max(np.maximum(p - k * q, 0.0).sum() * cell, np.maximum(q - k * p, 0.0).sum() * cell)
    assert g == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("rule", soundness.RULES)
def test_clone_count_trims_no_more_than_its_tail(rule):
  """Every rule's count of 80 users trims at most ``tail`` of probability (charged to δ):
  at most 1e-30 by default, at most 1e-6 when asked, and the looser tail keeps fewer counts.

  Bug caught: the rule's ``tail`` not passed on (the counts are then trimmed at
  reduction's default 1e-18, above the 1e-30 this oracle promises).
  """
  e = np.linspace(0.2, 3.0, 80)
  strict, loose = soundness.clone_count(e, 5, rule), soundness.clone_count(e, 5, rule, tail=1e-6)
  assert strict.tail_mass <= 1e-30
  assert loose.tail_mass <= 1e-6
  assert loose.pmf.size < strict.pmf.size
