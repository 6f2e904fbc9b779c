"""SCALE baseline: per-group clip scales at one noise level, checked with dp-accounting."""
import math

import numpy as np
import pytest

from tff_idp.accounting.client import scale
from tff_idp.accounting import validation


from tests.independent_dp import dp_epsilon


@pytest.fixture(scope="module")
def fmnist():
  sizes = validation.group_sizes_from_ratios([0.34, 0.43, 0.23], 3383)
  return scale.get_group_clip_scales([1.0, 2.0, 3.0], sizes, 1e-4, 420, 30)


def test_fmnist_effective_noise_meets_each_budget(fmnist):
  cal = fmnist
  assert cal.sampling_rate == pytest.approx(30 / 3383, rel=1e-12)
  assert cal.group_sizes == (1150, 1455, 778)
  recomputed = []
  for z_eff, s, target in zip(cal.effective_noise_multipliers, cal.clip_scales,
                              cal.target_epsilons):
    assert z_eff == pytest.approx(cal.noise_multiplier / s, rel=1e-15)
    eps = dp_epsilon(cal.sampling_rate, cal.noise_multiplier / s, cal.rounds, cal.delta)
    assert eps <= target
    # Not wastefully loose: 5% less effective noise breaks the budget.
    assert dp_epsilon(cal.sampling_rate, 0.95 * cal.noise_multiplier / s,
                      cal.rounds, cal.delta) > target
    recomputed.append(eps)
  np.testing.assert_allclose(cal.achieved_epsilons, recomputed, rtol=1e-6)


def test_fmnist_scales_shape(fmnist):
  s = np.asarray(fmnist.clip_scales)
  assert s.max() == 1.0
  assert np.all(s <= 1.0) and np.all(s > 0)
  # Stricter budget -> clipped harder.
  assert np.all(np.diff(s) > 0)
  assert s[0] < 0.9  # a real difference, not rounding


def test_most_relaxed_group_noise_is_its_own_get_noise(fmnist):
  """z is the σ the most relaxed group needs alone at q = c/N (not more)."""
  cal = fmnist
  z = cal.noise_multiplier
  assert dp_epsilon(cal.sampling_rate, z, cal.rounds, cal.delta) <= 3.0
  assert dp_epsilon(cal.sampling_rate, 0.95 * z, cal.rounds, cal.delta) > 3.0


def test_infinite_group_is_unscaled_and_others_still_meet_budget():
  eps, sizes = [1.0, math.inf, 3.0], [400, 100, 500]
  cal = scale.get_group_clip_scales(eps, sizes, 1e-5, 200, 50)
  assert cal.clip_scales[1] == 1.0
  assert cal.clip_scales[2] == 1.0
  assert cal.clip_scales[0] < 1.0
  for p in (0, 2):
    assert dp_epsilon(cal.sampling_rate, cal.effective_noise_multipliers[p], 200,
                      1e-5) <= eps[p]


def test_all_infinite_has_no_noise():
  cal = scale.get_group_clip_scales([math.inf, math.inf], [10, 10], 1e-4, 50, 3)
  assert cal.noise_multiplier == 0.0
  assert cal.clip_scales == (1.0, 1.0)
  assert cal.sampling_rate == pytest.approx(0.15)


def test_pld_scales_meet_budgets():
  eps, sizes, delta, rounds, c = [1.0, 3.0], [200, 100], 1e-5, 10, 30
  cal = scale.get_group_clip_scales(eps, sizes, delta, rounds, c, "pld")
  assert max(cal.clip_scales) == 1.0 and cal.clip_scales[0] < 1.0
  for z_eff, target in zip(cal.effective_noise_multipliers, eps):
    assert dp_epsilon(c / sum(sizes), z_eff, rounds, delta, "pld") <= target


def test_mismatched_lengths():
  with pytest.raises(ValueError, match="one group size per budget"):
    scale.get_group_clip_scales([1.0, 2.0], [100], 1e-5, 10, 5)


def test_cohort_larger_than_population():
  with pytest.raises(ValueError, match="exceeds num_clients"):
    scale.get_group_clip_scales([1.0, 2.0], [10, 10], 1e-5, 10, 21)


@pytest.mark.parametrize("shortfall,accountant", [(1e-12, "rdp"), (1e-3, "rdp"),
                                                  (0.05, "rdp"), (0.9, "rdp")])
def test_a_slightly_under_noised_sigma_is_shaved_in_few_accountant_calls(monkeypatch, shortfall,
                                                                         accountant):
  """A σ_p slightly too small is corrected by a bounded search, never spun on (issue 32).

  ``get_noise`` is made to return σ_p·(1 − shortfall), so z/s_p starts over
  budget. Property: the calibration still meets every budget (recomputed
  with dp-accounting, with the calibration's accountant) within 35 exact accountant
  calls per group, and the shaved noise is tight: within 3·shortfall of the noise
  the real σ_p gives. Bugs caught: shaving the scale by a fixed 1 − 1e-9 per call,
  which needs ~10^6 calls (minutes) for a 0.1% shortfall; the scale *set* to
  1 − step instead of multiplied (far below the edge, or no verified scale at all);
  a step allowed past 1 (a negative scale).
  """
  real_get_noise = scale.sample.get_noise
  calls = [0]
  counting = [True]

  def short_noise(*args, **kwargs):
    counting[0] = False  # get_noise's own accountant calls are not the shaving's
    try:
      return real_get_noise(*args, **kwargs) * (1.0 - shortfall)
    finally:
      counting[0] = True

  monkeypatch.setattr(scale.sample, "get_noise", short_noise)
  real_epsilon = scale.exact.epsilon

  def counted(*args, **kwargs):
    calls[0] += counting[0]
    if calls[0] > 3 * 35:
      raise AssertionError("more than 35 exact accountant calls per group")
    return real_epsilon(*args, **kwargs)

  monkeypatch.setattr(scale.exact, "epsilon", counted)
  cal = scale.get_group_clip_scales([1.0, 2.0, 3.0], [400, 300, 300], 1e-4, 100, 20.0,
                                    accountant)
  for e, s, a in zip([1.0, 2.0, 3.0], cal.clip_scales, cal.achieved_epsilons):
    fresh = dp_epsilon(cal.sampling_rate, cal.noise_multiplier / s, 100, 1e-4, accountant)
    assert fresh <= e
    assert a == pytest.approx(fresh, rel=1e-6)
    real_sigma = real_get_noise(e, 1e-4, cal.sampling_rate, 100, accountant)
    assert cal.noise_multiplier / s <= real_sigma * (1 + 3 * shortfall) + 1e-9


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_the_reported_epsilons_are_those_of_the_released_noise(accountant):
  """achieved_epsilons[p] is ε of what group p's clients get, recomputed independently at
  σ_p = z / s_p with the calibration's accountant (issue 32, mutation survivors).

  Bugs caught: the verification evaluating z·s instead of z/s (the scale "verified" and
  its ε reported for noise never added), or with the default accountant instead of the
  one asked for.
  """
  eps, sizes, delta, rounds, c = [1.0, 2.5], [300, 200], 1e-5, 20, 25
  cal = scale.get_group_clip_scales(eps, sizes, delta, rounds, c, accountant)
  for p, (z_eff, target) in enumerate(zip(cal.effective_noise_multipliers, eps)):
    independent = dp_epsilon(cal.sampling_rate, z_eff, rounds, delta, accountant)
    assert cal.achieved_epsilons[p] == pytest.approx(independent, rel=1e-9), p
    assert cal.achieved_epsilons[p] <= target


def test_an_empty_group_neither_sets_the_noise_nor_is_charged():
  """A group with no clients (its ratio rounded to 0) is left out of z and reports ε = 0;
  without noise at all, every populated group reports ε = ∞ and an empty one 0."""
  # The empty group has the most relaxed budget: counted, it would set z (the smallest σ).
  with_empty = scale.get_group_clip_scales([8.0, 1.0, 3.0], [0, 400, 100], 1e-5, 100, 20)
  without = scale.get_group_clip_scales([1.0, 3.0], [400, 100], 1e-5, 100, 20)
  assert with_empty.noise_multiplier == without.noise_multiplier
  assert with_empty.achieved_epsilons[0] == 0.0
  assert with_empty.achieved_epsilons[1:] == without.achieved_epsilons
  no_noise = scale.get_group_clip_scales([math.inf, math.inf], [0, 10], 1e-4, 50, 3)
  assert no_noise.achieved_epsilons == (0.0, math.inf)


def test_expected_clip_scale_sum_is_the_cohorts_expected_sum_of_scales(fmnist):
  """c_s = E[Σ_{i in cohort} s_i] = q·Σ_p |G_p| s_p, the normaliser of the clip bits in the
  adaptive-clipping aggregator; recomputed by hand from the group sizes and scales.
  Bugs caught: a wrong factor (q dropped, sizes and scales added instead of multiplied),
  which biases the clip-norm estimate."""
  cal = fmnist
  by_hand = (30 / 3383) * sum(n * s for n, s in zip((1150, 1455, 778), cal.clip_scales))
  assert cal.expected_clip_scale_sum == pytest.approx(by_hand, rel=1e-12)
  assert cal.expected_clip_scale_sum < 30  # scales <= 1, strictly below for two groups


def test_pld_noise_is_the_pld_edge_of_the_most_relaxed_group():
  """With the PLD accountant, z is getNoise under PLD (not RDP's, which needs more noise):
  the most relaxed group's budget breaks under a fresh PLD accountant at 3% less noise.
  Bug caught: getNoise called with the default accountant (RDP), which over-noises
  every group of a PLD calibration."""
  eps, sizes, delta, rounds, c = [1.0, 3.0], [200, 100], 1e-5, 10, 30
  cal = scale.get_group_clip_scales(eps, sizes, delta, rounds, c, "pld")
  z, q = cal.noise_multiplier, c / sum(sizes)
  assert dp_epsilon(q, z, rounds, delta, "pld") <= 3.0
  assert dp_epsilon(q, 0.97 * z, rounds, delta, "pld") > 3.0


def test_bad_budgets_are_refused_by_group():
  """Each budget is validated and the error names the group. Bug caught: the check dropped
  or the group index lost from the message."""
  with pytest.raises(ValueError, match=r"epsilons\[1\]=0\.0 is not a valid privacy budget"):
    scale.get_group_clip_scales([1.0, 0.0], [10, 10], 1e-5, 10, 5)


def test_a_scale_that_verifies_is_not_shaved(fmnist):
  """Where z/σ_p (σ_p the group's own getNoise) already meets the budget under a fresh
  accountant, that scale is kept exactly: shaving costs clip norm for nothing.
  Bug caught: the first verification evaluated at z·s instead of z/s (less noise, so it
  fails and the scale is shaved needlessly)."""
  cal = fmnist
  checked = 0
  for s, target in zip(cal.clip_scales, cal.target_epsilons):
    sigma_p = scale.sample.get_noise(target, cal.delta, cal.sampling_rate, cal.rounds)
    assert dp_epsilon(cal.sampling_rate, sigma_p, cal.rounds, cal.delta) <= target
    if dp_epsilon(cal.sampling_rate, cal.noise_multiplier / (cal.noise_multiplier / sigma_p),
                  cal.rounds, cal.delta) <= target:
      assert s == cal.noise_multiplier / sigma_p
      checked += 1
  assert checked >= 2  # the two stricter groups (s < 1) at least


def test_a_scale_at_exactly_the_budget_is_kept(monkeypatch):
  """ε == target is within budget: with an exact ε equal to the target, the scale is
  returned as is. Bug caught: ``<`` for ``<=`` (the scale shaved 60 times, then refused)."""
  monkeypatch.setattr(scale.exact, "epsilon", lambda *a, **k: 1.5)
  assert scale._verified_scale(0.7, 1.5, 1.2, 0.01, 10, 1e-5, "rdp") == (0.7, 1.5)


def test_a_one_client_group_counts_like_any_other(monkeypatch):
  """SCALE (IDP-FedAvg Sec. IV): z is the smallest σ_p over every non-empty finite group,
  a group of one client included; with no finite budget every non-empty group, one client
  included, is reported at ε = ∞; the calibration names the accountant it used.
  Bugs caught: ``n > 1`` for ``n > 0`` in either place; the accountant dropped from the
  result."""
  delta, rounds, c = 1e-5, 20, 10.0
  cal = scale.get_group_clip_scales([1.0, 8.0], [99, 1], delta, rounds, c)
  assert cal.noise_multiplier == scale.sample.get_noise(8.0, delta, c / 100, rounds)
  assert cal.clip_scales[1] == 1.0 and cal.clip_scales[0] < 1.0
  assert cal.accountant == "rdp"
  free = scale.get_group_clip_scales([math.inf, math.inf], [9, 1], delta, rounds, c, "pld")
  assert free.noise_multiplier == 0.0 and free.achieved_epsilons == (math.inf, math.inf)
  assert free.accountant == "pld"


def test_a_shared_noise_of_exactly_one_is_verified_and_reported(monkeypatch):
  """z = 1.0 is an ordinary noise level: every group's scale is verified and its ε
  reported (here with getNoise stubbed to give σ = 1 for the relaxed group). Bug caught:
  the "no noise" shortcut keyed on z == 1 instead of z == 0 (every group reported at
  ε = 0, its scale unverified)."""
  delta, rounds, c = 1e-5, 20, 10.0
  stub = {1.0: 2.0, 4.0: 1.0}
  monkeypatch.setattr(scale.sample, "get_noise", lambda e, *a, **k: stub[e])
  cal = scale.get_group_clip_scales([1.0, 4.0], [50, 50], delta, rounds, c)
  assert cal.noise_multiplier == 1.0
  for e, s, a in zip([1.0, 4.0], cal.clip_scales, cal.achieved_epsilons):
    fresh = dp_epsilon(cal.sampling_rate, 1.0 / s, rounds, delta)
    assert a == pytest.approx(fresh, rel=1e-6) and 0.0 < a <= e


def test_shaving_verifies_with_the_runs_accountant():
  """A PLD calibration's shaved scale is verified, and its ε reported, by PLD: from a scale
  1% over the PLD edge, the result meets the budget under a fresh PLD accountant and
  reports that accountant's ε. Bug caught: the shaving loop evaluating with the default
  RDP accountant (looser: the scale is shaved too far, and an RDP ε reported as PLD's)."""
  q, rounds, delta, target, z = 1.0, 1, 1e-5, 2.0, 1.0
  sigma = scale.sample.get_noise(target, delta, q, rounds, "pld")
  start = (z / sigma) * 1.01
  s, eps = scale._verified_scale(start, target, z, q, rounds, delta, "pld")
  fresh = dp_epsilon(q, z / s, rounds, delta, "pld")
  assert s < start and fresh <= target
  assert eps == pytest.approx(fresh, rel=1e-6)
  assert s >= (z / sigma) * 0.99
