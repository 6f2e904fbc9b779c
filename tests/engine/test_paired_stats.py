"""The paired t-test behind the main job's table (TF-free, fast)."""
import math

import numpy as np
import pytest
from scipy import stats

from tff_idp.engine import paired_stats


def test_matches_scipy_paired_t_test():
  a = [0.81, 0.79, 0.84, 0.80, 0.83]
  b = [0.78, 0.77, 0.80, 0.79, 0.79]
  cmp = paired_stats.paired_comparison(a, b, a="x", b="y")
  ref = stats.ttest_rel(a, b, alternative="greater")
  assert cmp.n == 5 and cmp.a == "x" and cmp.b == "y"
  assert cmp.mean == pytest.approx(np.mean(np.subtract(a, b)))
  assert cmp.sd == pytest.approx(np.std(np.subtract(a, b), ddof=1))
  assert cmp.p_value == pytest.approx(ref.pvalue)
  half = stats.t.ppf(0.975, 4) * cmp.sd / math.sqrt(5)
  assert cmp.ci_low == pytest.approx(cmp.mean - half)
  assert cmp.ci_high == pytest.approx(cmp.mean + half)
  assert cmp.separated


def test_overlapping_runs_are_not_separated():
  cmp = paired_stats.paired_comparison([0.80, 0.78, 0.81], [0.79, 0.80, 0.80])
  assert cmp.ci_low < 0 < cmp.ci_high
  assert not cmp.separated
  assert 0.05 < cmp.p_value < 0.95


def test_p_value_is_one_sided_in_the_direction_a_better():
  better = paired_stats.paired_comparison([0.9, 0.8, 0.85], [0.8, 0.75, 0.8])
  worse = paired_stats.paired_comparison([0.8, 0.75, 0.8], [0.9, 0.8, 0.85])
  assert better.p_value < 0.05 and worse.p_value > 0.95
  assert better.p_value + worse.p_value == pytest.approx(1.0)


def test_single_seed_has_no_interval():
  cmp = paired_stats.paired_comparison([0.8], [0.7])
  assert cmp.mean == pytest.approx(0.1)
  assert cmp.ci_low is None and cmp.p_value is None and not cmp.separated
  assert "no CI" in cmp.format()


def test_constant_difference_has_zero_width_interval():
  cmp = paired_stats.paired_comparison([0.8, 0.7], [0.75, 0.65])
  assert cmp.sd == pytest.approx(0.0, abs=1e-12)
  assert cmp.separated


def test_format_and_dict_round_trip():
  cmp = paired_stats.paired_comparison([0.81, 0.79, 0.84], [0.78, 0.77, 0.80], "p", "q")
  text = cmp.format()
  assert text.startswith("+3.00 [") and "p=" in text
  d = cmp.to_dict()
  assert d["test"] == paired_stats.TEST_NAME and d["separated"] == cmp.separated
  assert paired_stats.PairedComparison.from_dict(d) == cmp


@pytest.mark.parametrize("a,b,match", [
    ([0.1, 0.2], [0.1], "one value per seed"),
    ([], [], "no values"),
    ([0.1, float("nan")], [0.1, 0.2], "non-finite"),
])
def test_bad_input_raises_with_advice(a, b, match):
  with pytest.raises(ValueError, match=match):
    paired_stats.paired_comparison(a, b)


def test_bad_confidence_raises():
  with pytest.raises(ValueError, match="confidence"):
    paired_stats.paired_comparison([0.1, 0.2], [0.1, 0.1], confidence=1.0)
