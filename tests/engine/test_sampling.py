"""Poisson client sampler and privacy-group assignment (statistical tests are seeded).

Tolerances are 5 binomial standard deviations: a correct sampler fails a
single check with probability below 6e-7 for an unseeded draw; with fixed
seeds the outcome is deterministic.
"""
import numpy as np
import pytest

from tff_idp.engine import sampling


def test_participation_frequencies_match_individual_rates():
  rates = np.array([0.0, 0.003, 0.01, 0.05, 0.2, 0.5, 1.0] * 50)
  ids = [f"c{i}" for i in range(rates.size)]
  sampler = sampling.PoissonClientSampler(ids, rates, seed=123)
  rounds = 4000
  counts = np.zeros(rates.size)
  sizes = []
  for _ in range(rounds):
    mask = sampler.sample_mask()
    counts += mask
    sizes.append(mask.sum())
  # Per rate level, pool the 50 clients that share it.
  for level in np.unique(rates):
    sel = rates == level
    n = rounds * sel.sum()
    freq = counts[sel].sum() / n
    tol = 5 * np.sqrt(level * (1 - level) / n) + 1e-12
    assert abs(freq - level) <= tol, (level, freq)
  # Cohort size varies and averages Σ q_i.
  assert np.std(sizes) > 1
  assert abs(np.mean(sizes) - rates.sum()) <= 5 * np.sqrt(
      np.sum(rates * (1 - rates)) / rounds)


def test_state_roundtrip_reproduces_future_cohorts():
  ids = [str(i) for i in range(500)]
  a = sampling.PoissonClientSampler(ids, np.full(500, 0.05), seed=7)
  for _ in range(3):
    a.sample()
  state = a.get_state()
  expected = [a.sample() for _ in range(5)]
  b = sampling.PoissonClientSampler(ids, np.full(500, 0.05), seed=999)
  b.set_state(state)
  assert [b.sample() for _ in range(5)] == expected


def test_same_seed_same_cohorts_different_seed_different():
  ids = [str(i) for i in range(300)]
  draw = lambda s: [sampling.PoissonClientSampler(ids, np.full(300, 0.1), s).sample()
                    for _ in range(1)]
  assert draw(1) == draw(1)
  assert draw(1) != draw(2)


def test_group_assignment_has_exact_sizes_and_is_seeded():
  groups = sampling.assign_privacy_groups(3383, [0.34, 0.43, 0.23], seed=0)
  assert np.bincount(groups).tolist() == [1150, 1455, 778]
  assert np.array_equal(groups, sampling.assign_privacy_groups(3383, [0.34, 0.43, 0.23], 0))
  assert not np.array_equal(groups, sampling.assign_privacy_groups(3383, [0.34, 0.43, 0.23], 1))


def test_from_groups_maps_group_rates_to_clients():
  s = sampling.PoissonClientSampler.from_groups(["a", "b", "c"], [0, 1, 0], [0.1, 0.7], 0)
  assert s.rates.tolist() == [0.1, 0.7, 0.1]
  assert s.expected_clients_per_round == pytest.approx(0.9)


@pytest.mark.parametrize("rates,match", [
    ([0.1, 0.2], "one sampling rate per client"),
    ([0.1, 1.5, 0.2], r"\[0, 1\]"),
    ([0.1, -0.1, 0.2], r"\[0, 1\]"),
])
def test_bad_rates_are_rejected(rates, match):
  with pytest.raises(ValueError, match=match):
    sampling.PoissonClientSampler(["a", "b", "c"], rates, 0)


def test_uniform_sampler_rejects_more_clients_per_round_than_clients():
  with pytest.raises(ValueError, match="exceeds num_clients"):
    sampling.PoissonClientSampler.uniform(["a", "b"], 3, 0)


def test_unseeded_samplers_draw_from_os_entropy():
  """``seed=None`` seeds from OS entropy: two such samplers draw different cohorts (issue 32).

  1,000 clients at rate ½: two independent samplers give identical masks with
  probability 2^-1000. Bug caught: ``seed=None`` mapped to a fixed seed
  (e.g. 0), which makes every default sampler's cohorts predictable.
  """
  ids = [f"c{i}" for i in range(1000)]
  a = sampling.PoissonClientSampler(ids, np.full(1000, 0.5))
  b = sampling.PoissonClientSampler(ids, np.full(1000, 0.5))
  fixed = sampling.PoissonClientSampler(ids, np.full(1000, 0.5), seed=0)
  first = a.sample_mask()
  assert not np.array_equal(first, b.sample_mask())
  assert not np.array_equal(first, fixed.sample_mask())


def test_from_groups_and_uniform_keep_the_seed_and_the_rates():
  """The two convenience constructors pass the caller's seed and rates on unchanged.

  Property: ``from_groups(ids, groups, rates, seed)`` and ``uniform(ids, m, seed)``
  draw exactly the cohorts of the plain constructor with the same per-client
  rates (q_i = rates[group_i], resp. m/N) and the same seed. Bugs caught: the
  seed dropped or replaced by None (cohorts no longer reproducible from the
  secret sampling seed, so a resumed run samples differently from its
  checkpoint), and rates or ids lost or mis-scaled (m·N instead of m/N).
  """
  ids = [f"c{i}" for i in range(200)]
  groups = np.arange(200) % 3
  rates = np.array([0.1, 0.4, 0.7])[groups]
  by_groups = sampling.PoissonClientSampler.from_groups(ids, groups.tolist(), [0.1, 0.4, 0.7],
                                                         seed=5)
  plain = sampling.PoissonClientSampler(ids, rates, seed=5)
  assert [by_groups.sample() for _ in range(4)] == [plain.sample() for _ in range(4)]

  uni = sampling.PoissonClientSampler.uniform(ids, 20, seed=9)
  assert uni.client_ids.tolist() == ids
  np.testing.assert_allclose(uni.rates, np.full(200, 0.1), rtol=0, atol=1e-15)
  plain = sampling.PoissonClientSampler(ids, np.full(200, 0.1), seed=9)
  assert [uni.sample() for _ in range(4)] == [plain.sample() for _ in range(4)]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_rates_are_rejected(bad):
  """A NaN or infinite sampling rate is refused, not silently used.

  Bug caught: dropping the finiteness check; NaN compares false against every
  draw, so such a client would simply never be sampled, with no error.
  """
  with pytest.raises(ValueError, match=r"\[0, 1\]"):
    sampling.PoissonClientSampler(["a", "b", "c"], [0.1, bad, 0.2], 0)


def test_rates_are_held_in_double_precision():
  """Float32 rates are widened to float64, so Σ q_i (the expected cohort) is summed exactly.

  Property: ``expected_clients_per_round`` equals the float64 sum of the
  given rates, for the plain constructor and for ``from_groups``. Bug caught:
  the rates kept in the caller's float32, whose running sum over 10^5
  clients is off in the 5th significant digit (here 499.5742 vs 499.5743):
  the normaliser Σ q_i of the DP mean would then be off by as much.
  """
  rates = (np.random.default_rng(0).random(100_000) * 0.01).astype(np.float32)
  exact = float(rates.astype(np.float64).sum())
  ids = [f"c{i}" for i in range(rates.size)]
  assert sampling.PoissonClientSampler(ids, rates, 0).expected_clients_per_round == exact
  by_groups = sampling.PoissonClientSampler.from_groups(ids, np.arange(rates.size), rates, 0)
  assert by_groups.expected_clients_per_round == exact
