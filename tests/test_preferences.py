"""Privacy preference distributions: seeded per client, bounded, and the right shape.

Statistical checks use fixed seeds, so they are deterministic; each tolerance
is stated with the rate at which it would fail for a *fresh* random seed.
"""
import math

import numpy as np
import pytest
from scipy import stats

from tff_idp import preferences

SIZES = {"alice": 300, "bob": 1, "carol": 1200, "dave": 0, "erin": 77}


@pytest.mark.parametrize("name", sorted(preferences.DISTRIBUTIONS))
def test_assignment_is_deterministic_bit_for_bit_per_client(name):
  dist = preferences.make_distribution(name)
  a = preferences.assign_record_budgets(dist, SIZES, seed=42)
  b = preferences.assign_record_budgets(dist, SIZES, seed=42)
  assert list(a) == list(SIZES)
  for cid, n in SIZES.items():
    assert a[cid].shape == (n,) and a[cid].dtype == np.float64
    assert a[cid].tobytes() == b[cid].tobytes()
  # A client's budgets do not depend on clients added after it.
  more = preferences.assign_record_budgets(dist, dict(SIZES, frank=500), seed=42)
  for cid in SIZES:
    assert more[cid].tobytes() == a[cid].tobytes()
  # Another seed gives other budgets (the large clients differ somewhere).
  c = preferences.assign_record_budgets(dist, SIZES, seed=43)
  assert not np.array_equal(a["carol"], c["carol"])
  # Clients get independent streams, not copies of one another.
  same_size = preferences.assign_record_budgets(dist, {"x": 300, "y": 300}, seed=42)
  assert not np.array_equal(same_size["x"], same_size["y"])


def test_list_of_sizes_gets_string_ids():
  out = preferences.assign_record_budgets(preferences.ThreeLevels(), [3, 0, 5], seed=1)
  assert list(out) == ["0", "1", "2"]
  assert [v.size for v in out.values()] == [3, 0, 5]
  by_map = preferences.assign_record_budgets(preferences.ThreeLevels(),
                                             {"0": 3, "1": 0, "2": 5}, seed=1)
  for k in out:
    np.testing.assert_array_equal(out[k], by_map[k])


@pytest.mark.parametrize("dist,low,high", [
    (preferences.BoundedMixGauss(), 0.1, 10.0),
    (preferences.BoundedPareto(), 0.1, 10.0),
    (preferences.BoundedMixGauss(means=(0.5, 3.0), stds=(1.0, 4.0), weights=(0.5, 0.5),
                                 low=0.2, high=4.0), 0.2, 4.0),
    (preferences.BoundedPareto(shape=0.3, low=1.0, high=3.0), 1.0, 3.0),
])
def test_bounds_are_respected(dist, low, high):
  x = dist.sample(100_000, np.random.default_rng(0))
  assert x.shape == (100_000,) and np.all(np.isfinite(x))
  assert x.min() >= low and x.max() <= high
  # Truncation, not clipping: no point mass piles up on a bound.
  assert np.count_nonzero(x == low) == 0 and np.count_nonzero(x == high) == 0


def test_group_values_are_the_levels():
  x = preferences.ThreeLevels().sample(10_000, np.random.default_rng(1))
  assert set(np.unique(x).tolist()) == {0.1, 1.0, 5.0}
  y = preferences.make_distribution("user_study_34_43_23").sample(10_000, np.random.default_rng(1))
  assert set(np.unique(y).tolist()) == {1.0, 2.0, 3.0}


def binomial_tolerance(p, n, z=5.0):
  """z standard errors of a proportion. At z = 5 a fresh seed fails a
  two-sided check with probability 5.7e-7 (normal approximation)."""
  return z * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("dist,levels,ratios", [
    (preferences.ThreeLevels(), (0.1, 1.0, 5.0), (0.7, 0.2, 0.1)),
    (preferences.ThreeLevels((1.0, 3.0, 10.0), (0.5, 0.3, 0.2)), (1.0, 3.0, 10.0), (0.5, 0.3, 0.2)),
    (preferences.make_distribution("user_study_54_37_9"), (1.0, 2.0, 3.0), (0.54, 0.37, 0.09)),
    (preferences.make_distribution("user_study_34_43_23"), (1.0, 2.0, 3.0), (0.34, 0.43, 0.23)),
])
def test_group_proportions_within_statistical_tolerance(dist, levels, ratios):
  # n = 200,000 per check; each proportion within 5 standard errors (≤ 0.0052).
  # For a fresh seed the three checks together fail with probability < 2e-6.
  n = 200_000
  x = dist.sample(n, np.random.default_rng(2024))
  for level, p in zip(levels, ratios):
    assert abs(np.mean(x == level) - p) <= binomial_tolerance(p, n), (level, p)


def truncated_pareto_cdf(x, shape=1.0, low=0.1, high=10.0):
  x = np.clip(x, low, high)
  return (1.0 - (low / x) ** shape) / (1.0 - (low / high) ** shape)


@pytest.mark.parametrize("shape,low,high", [(1.0, 0.1, 10.0), (0.5, 1.0, 3.0)])
def test_bounded_pareto_matches_the_truncated_cdf(shape, low, high):
  x = preferences.BoundedPareto(shape, low, high).sample(20_000, np.random.default_rng(7))
  # Under H0, p is uniform: a fresh seed fails "p > 1e-3" with probability 1e-3.
  ks = stats.kstest(x, lambda v: truncated_pareto_cdf(v, shape, low, high))
  assert ks.pvalue > 1e-3, ks
  # The test has power: it rejects a 25% larger shape, and the rPDP-FL
  # reference code's variant (Lomax + low, then clipped into [low, high]).
  wrong_shape = stats.kstest(x, lambda v: truncated_pareto_cdf(v, 1.25 * shape, low, high))
  assert wrong_shape.pvalue < 1e-6
  lomax_clipped = np.clip(np.random.default_rng(8).pareto(shape, 20_000) + low, low, high)
  assert stats.ks_2samp(x, lomax_clipped).pvalue < 1e-6


def test_bounded_pareto_truncation_matters():
  """With 57% of the Pareto mass above `high`, the untruncated CDF is rejected."""
  x = preferences.BoundedPareto(0.5, 1.0, 3.0).sample(20_000, np.random.default_rng(7))
  assert stats.kstest(x, stats.pareto(0.5, scale=1.0).cdf).pvalue < 1e-6


def test_bounded_pareto_median_is_the_closed_form():
  x = preferences.BoundedPareto().sample(200_000, np.random.default_rng(9))
  # F(m) = 1/2  =>  m = L / (1 - (1 - (L/H)) / 2) for shape 1: m = 0.1/0.505.
  assert np.median(x) == pytest.approx(0.1 / 0.505, rel=0.01)


def test_bounded_mix_gauss_component_weights():
  n = 200_000
  x = preferences.BoundedMixGauss().sample(n, np.random.default_rng(11))
  # The components are separated by > 6 of their stds, so windows classify
  # every draw: N(0.1, 0.01) in [0.1, 0.2], N(1, 0.05) in [0.7, 1.3],
  # N(5, 0.5) in [2, 10].
  windows = [(0.1, 0.2), (0.7, 1.3), (2.0, 10.0)]
  counts = [np.count_nonzero((x >= lo) & (x <= hi)) for lo, hi in windows]
  assert sum(counts) == n
  for count, p in zip(counts, (0.7, 0.2, 0.1)):
    # 5 standard errors (a fresh seed fails with probability < 2e-6 overall).
    assert abs(count / n - p) <= binomial_tolerance(p, n), (count / n, p)


def test_bounded_mix_gauss_components_are_truncated_normals():
  x = preferences.BoundedMixGauss().sample(100_000, np.random.default_rng(12))
  first = x[x <= 0.2]
  # N(0.1, 0.01) truncated at its mean: a half-normal on [0.1, ∞).
  half = stats.truncnorm(0.0, (10.0 - 0.1) / 0.01, loc=0.1, scale=0.01)
  assert stats.kstest(first, half.cdf).pvalue > 1e-3  # fresh-seed flake rate 1e-3
  assert first.mean() == pytest.approx(0.1 + 0.01 * math.sqrt(2 / math.pi), rel=2e-3)
  second = x[(x > 0.5) & (x < 2.0)]
  assert second.mean() == pytest.approx(1.0, abs=2e-3)
  assert second.std() == pytest.approx(0.05, rel=0.03)


def test_bad_parameters_raise():
  with pytest.raises(ValueError, match="1 ratios for 2 budget levels.*one ratio per level"):
    preferences.Groups((1.0, 2.0), (1.0,))
  with pytest.raises(ValueError, match="sum to"):
    preferences.ThreeLevels((0.1, 1.0, 5.0), (0.7, 0.2, 0.2))
  with pytest.raises(ValueError, match="must be > 0"):
    preferences.ThreeLevels((0.0, 1.0, 5.0))
  with pytest.raises(ValueError, match="as many stds and weights"):
    preferences.BoundedMixGauss(means=(1.0,))
  with pytest.raises(ValueError, match="every std must be > 0"):
    preferences.BoundedMixGauss(stds=(0.01, 0.0, 0.5))
  with pytest.raises(ValueError, match="0 < low < high"):
    preferences.BoundedMixGauss(low=5.0, high=1.0)
  with pytest.raises(ValueError, match="shape > 0"):
    preferences.BoundedPareto(shape=0.0)
  with pytest.raises(ValueError, match="0 < low < high"):
    preferences.BoundedPareto(low=0.0)
  with pytest.raises(ValueError, match="unknown; choose one of"):
    preferences.make_distribution("uniform")
  with pytest.raises(ValueError, match="exclude almost all"):
    preferences.BoundedMixGauss(means=(100.0,), stds=(0.1,), weights=(1.0,)).sample(
        10, np.random.default_rng(0))


# Budgets by class (data-dependent budgets, rPDP-FL with INO-SGD's groups).


def test_parse_class_budgets_ranges_singles_and_lists():
  expected = {c: 0.1 for c in range(5)} | {c: 1.0 for c in range(5, 10)}
  assert preferences.parse_class_budgets("0-4:0.1,5-9:1", 10) == expected
  assert preferences.parse_class_budgets(["0-4:0.1", "5-9:1"], 10) == expected
  out = preferences.parse_class_budgets(" 2:3 , 0-1 : 0.5,3:inf", 4)
  assert out == {0: 0.5, 1: 0.5, 2: 3.0, 3: math.inf}
  assert list(out) == [0, 1, 2, 3]


@pytest.mark.parametrize("spec,match", [
    ("0-4:0.1", "classes 5-9 got no budget"),
    ("0-3:0.1,5-9:1", "class 4 got no budget"),
    ("0-4:0.1,4-9:1", "class 4 already got a budget.*remove the overlap"),
    ("0-9:1,0-9:2", "classes 0-9 already got a budget"),
    ("0-4:0,5-9:1", "must be > 0"),
    ("0-4:-1,5-9:1", "must be > 0"),
    ("0-4:nan,5-9:1", "must be > 0"),
    ("0-4:abc,5-9:1", "is not a number"),
    ("0-4=0.1,5-9:1", "is not <class>:<ε>"),
    ("0-4,5-9:1", "is not <class>:<ε>"),
    ("a:1", "is not <class>:<ε>"),
    ("4-0:1,5-9:1", "write it as 0-4"),
    ("0-10:1", "class 10 does not exist.*0-9"),
    ("", "empty"),
])
def test_parse_class_budgets_errors_say_what_to_change(spec, match):
  with pytest.raises(ValueError, match=match):
    preferences.parse_class_budgets(spec, 10)


def test_class_budgets_without_the_data_check_all_that_needs_no_class_count():
  """Issue 50: ``num_classes=None`` (before the data loads) still refuses bad syntax, a bad ε
  and an overlap, and leaves the class range and the missing classes to the later check."""
  assert preferences.parse_class_budgets("0-4:0.1,12:1", None) == {
      **{c: 0.1 for c in range(5)}, 12: 1.0}
  for spec, match in [("foo", "is not <class>:<ε>"), ("0-4:-1", "must be > 0"),
                      ("0-4:1,4:2", "already got a budget"), ("", "empty")]:
    with pytest.raises(ValueError, match=match):
      preferences.parse_class_budgets(spec, None)
  with pytest.raises(ValueError, match="class 12 does not exist"):
    preferences.parse_class_budgets("0-4:0.1,12:1", 10)


def test_class_record_budgets_follow_the_labels():
  labels = {"b": np.array([9, 0, 5, 4, 4]), "a": np.array([], dtype=np.int32),
            "c": np.array([7], dtype=np.int64)}
  budgets = preferences.class_record_budgets(
      labels, preferences.parse_class_budgets("0-4:0.5,5-9:5", 10))
  # Same shape as assign_record_budgets: client id -> float64 array, clients in order.
  assert list(budgets) == ["b", "a", "c"]
  np.testing.assert_array_equal(budgets["b"], [5.0, 0.5, 5.0, 0.5, 0.5])
  assert budgets["a"].shape == (0,) and budgets["a"].dtype == np.float64
  assert budgets["b"].dtype == np.float64 and budgets["c"].tolist() == [5.0]
  # Every record of every client takes its own label's ε.
  rng = np.random.default_rng(0)
  big = {"x": rng.integers(0, 10, 1000)}
  spec = {c: float(c + 1) for c in range(10)}
  np.testing.assert_array_equal(preferences.class_record_budgets(big, spec)["x"],
                                big["x"] + 1.0)


def test_class_record_budgets_refuses_labels_without_a_budget():
  with pytest.raises(ValueError, match=r"client 'a' has records of classes \[3\]"):
    preferences.class_record_budgets({"a": np.array([0, 3])}, {0: 1.0, 1: 2.0})


def test_class_groups_are_named_by_epsilon_most_private_first():
  groups = preferences.class_groups(preferences.parse_class_budgets("0-1:5,2:0.1,3:5,4:1", 5))
  assert groups == {2: "eps=0.1", 4: "eps=1", 0: "eps=5", 1: "eps=5", 3: "eps=5"}
  # Equal ε: one group; order of first appearance = ascending ε.
  assert list(dict.fromkeys(groups.values())) == ["eps=0.1", "eps=1", "eps=5"]
  assert preferences.budget_group_name(0.5) == "eps=0.5"
  assert preferences.budget_group_name(math.inf) == "eps=inf"
  with pytest.raises(ValueError, match="both be reported as group 'eps=0.1'"):
    preferences.class_groups({0: 0.1, 1: 0.1000001})


def test_by_class_is_not_a_sampled_distribution():
  assert preferences.BY_CLASS not in preferences.DISTRIBUTIONS


# The authors' code's variants (github.com/JunxuLiu/rPDP-FL): other parameters, clipping.


@pytest.mark.parametrize("name", ["bounded_mix_gauss_code", "bounded_pareto_code"])
def test_code_variants_stay_within_bounds(name):
  x = preferences.make_distribution(name).sample(200_000, np.random.default_rng(21))
  assert x.shape == (200_000,) and np.all(np.isfinite(x))
  assert x.min() >= 0.1 and x.max() <= 10.0


def test_code_variants_parameters():
  mix = preferences.make_distribution("bounded_mix_gauss_code")
  assert isinstance(mix, preferences.BoundedMixGauss)
  assert tuple(mix.means) == (0.1, 1.0, 5.0) and tuple(mix.stds) == (0.05, 0.1, 0.5)
  assert tuple(mix.weights) == (0.7, 0.2, 0.1) and (mix.low, mix.high) == (0.1, 10.0)
  assert mix.out_of_bounds == "clip"
  assert preferences.BoundedMixGauss().out_of_bounds == "redraw"  # the paper's
  assert preferences.make_distribution("bounded_pareto_code") == preferences.ClippedLomax(
      4.0, 0.1, 10.0)


def test_clipped_mix_gauss_piles_mass_on_the_bounds_redrawn_does_not():
  n = 200_000
  code = preferences.make_distribution("bounded_mix_gauss_code").sample(
      n, np.random.default_rng(22))
  # Half of N(0.1, 0.05), weight 0.7, lies below 0.1 and is clipped onto it:
  # P(ε = 0.1) = 0.35, within 5 standard errors (fresh-seed failure < 6e-7).
  assert abs(np.mean(code == 0.1) - 0.35) <= binomial_tolerance(0.35, n)
  # The same parameters, redrawn instead of clipped: no point mass.
  redrawn = preferences.BoundedMixGauss(stds=(0.05, 0.1, 0.5)).sample(
      n, np.random.default_rng(22))
  assert np.count_nonzero(redrawn == 0.1) == 0 and np.count_nonzero(redrawn == 10.0) == 0
  # Both bounds, where the components reach past them (N(0.5, 1) and N(3, 4) on [0.2, 4]).
  wide = dict(means=(0.5, 3.0), stds=(1.0, 4.0), weights=(0.5, 0.5), low=0.2, high=4.0)
  clipped = preferences.BoundedMixGauss(**wide, out_of_bounds="clip").sample(
      n, np.random.default_rng(23))
  below = 0.5 * stats.norm.cdf(0.2, 0.5, 1.0) + 0.5 * stats.norm.cdf(0.2, 3.0, 4.0)
  above = 0.5 * stats.norm.sf(4.0, 0.5, 1.0) + 0.5 * stats.norm.sf(4.0, 3.0, 4.0)
  assert abs(np.mean(clipped == 0.2) - below) <= binomial_tolerance(below, n)
  assert abs(np.mean(clipped == 4.0) - above) <= binomial_tolerance(above, n)
  truncated = preferences.BoundedMixGauss(**wide).sample(n, np.random.default_rng(23))
  assert np.count_nonzero(truncated == 0.2) == 0 and np.count_nonzero(truncated == 4.0) == 0
  # Between the bounds the clipped variant is the untouched mixture: N(1, 0.1) keeps its std.
  second = code[(code > 0.5) & (code < 2.0)]
  assert second.mean() == pytest.approx(1.0, abs=2e-3)
  assert second.std() == pytest.approx(0.1, rel=0.03)


def clipped_lomax_cdf(x, shape=4.0, low=0.1, high=10.0):
  """CDF of clip(Lomax(shape) + low, low, high) (1 at ``high``: the clipped mass)."""
  x = np.asarray(x, dtype=float)
  return np.where(x >= high, 1.0, 1.0 - (1.0 + np.maximum(x - low, 0.0)) ** -shape)


def test_pareto_code_matches_the_formula():
  """numpy's pareto(4) + 0.1 clipped to [0.1, 10]: mean, quantiles and point mass."""
  n = 200_000
  x = preferences.make_distribution("bounded_pareto_code").sample(n, np.random.default_rng(24))
  # Mean: 0.1 + E[min(Lomax(4), 9.9)] = 0.1 + (1 - 10.9^-3) / 3 = 0.43308. The
  # clipped draw's std is 0.47, so one standard error is 1.05e-3: the
  # tolerance 0.006 is 5.7 of them (fresh-seed failure ~1e-8).
  mean = 0.1 + (1.0 - 10.9 ** -3) / 3.0
  assert x.mean() == pytest.approx(mean, abs=0.006)
  # Quantiles: q_p = 0.1 + (1 - p)^(-1/4) - 1. The share of draws below q_p
  # is p within 5 standard errors of a proportion (fresh-seed failure < 3e-6).
  for p in (0.1, 0.25, 0.5, 0.75, 0.9, 0.99):
    q_p = 0.1 + (1.0 - p) ** -0.25 - 1.0
    assert abs(np.mean(x <= q_p) - p) <= binomial_tolerance(p, n), p
  assert np.median(x) == pytest.approx(0.1 + 2 ** 0.25 - 1, rel=0.01)
  # Clipping at 10 leaves a point mass of 10.9^-4 = 7.1e-5 (14 of 200,000
  # expected; within 5 Poisson standard deviations), and none at 0.1.
  expected = n * 10.9 ** -4
  assert abs(np.count_nonzero(x == 10.0) - expected) <= 5 * math.sqrt(expected)
  assert np.count_nonzero(x == 0.1) == 0
  # The whole CDF (a fresh seed fails "p > 1e-3" with probability 1e-3).
  assert stats.kstest(x[x < 10.0], lambda v: clipped_lomax_cdf(v) / clipped_lomax_cdf(
      np.nextafter(10.0, 0))).pvalue > 1e-3
  # It is not the paper's BoundedPareto (Pareto(1, scale 0.1) truncated: median 0.198).
  paper = preferences.BoundedPareto().sample(20_000, np.random.default_rng(25))
  assert stats.ks_2samp(x[:20_000], paper).pvalue < 1e-6


def test_code_variant_bad_parameters_raise():
  with pytest.raises(ValueError, match=r"out_of_bounds='wrap' must be one of \('redraw', 'clip'\)"):
    preferences.BoundedMixGauss(out_of_bounds="wrap")
  with pytest.raises(ValueError, match="ClippedLomax needs shape > 0"):
    preferences.ClippedLomax(shape=0.0)
  with pytest.raises(ValueError, match="0 < low < high"):
    preferences.ClippedLomax(low=2.0, high=1.0)
