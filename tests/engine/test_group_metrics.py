"""Per-group utility metrics (no TensorFlow)."""
import math

import numpy as np
import pytest

from tff_idp.engine import group_metrics


def test_two_groups_by_class_hand_computed():
  labels = np.array([0, 0, 1, 1, 2, 2, 2, 3])
  preds = np.array([0, 1, 1, 1, 2, 0, 0, 3])
  report = group_metrics.group_report(labels, preds,
                                      class_groups={0: "a", 1: "a", 2: "b", 3: "b"})
  assert report.overall_accuracy == pytest.approx(5 / 8)
  assert report.accuracy == {"a": pytest.approx(3 / 4), "b": pytest.approx(2 / 4)}
  # macro recall: a = mean(1/2, 1) ; b = mean(1/3, 1)
  assert report.recall["a"] == pytest.approx(0.75)
  assert report.recall["b"] == pytest.approx((1 / 3 + 1) / 2)
  assert report.worst_group == ("b", pytest.approx(0.5))
  assert report.imbalance == pytest.approx(np.std([0.75, 2 / 3]))
  assert report.support == {"a": 4, "b": 4}


def test_one_class_per_group_recall_equals_accuracy():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 10, 500)
  preds = np.where(rng.random(500) < 0.6, labels, rng.integers(0, 10, 500))
  report = group_metrics.group_report(labels, preds,
                                      class_groups={c: f"class{c}" for c in range(10)})
  for g in report.accuracy:
    assert report.recall[g] == pytest.approx(report.accuracy[g])
  per_class = [np.mean(preds[labels == c] == c) for c in range(10)]
  assert report.imbalance == pytest.approx(np.std(per_class))


def test_example_groups_and_empty_group_is_nan_and_skipped():
  labels = np.array([0, 1, 0])
  preds = np.array([0, 0, 0])
  report = group_metrics.group_report(labels, preds, example_groups=["x", "x", "y"],
                                      group_names=["x", "y", "z"])
  assert math.isnan(report.accuracy["z"]) and report.support["z"] == 0
  assert report.worst_group == ("x", 0.5)
  assert not math.isnan(report.imbalance)
  flat = report.flat("test/")
  assert list(flat) == group_metrics.flat_field_names(["x", "y", "z"], "test/")


def test_bad_input_is_explained():
  with pytest.raises(ValueError, match="no group"):
    group_metrics.group_report([0, 5], [0, 5], class_groups={0: "a"})
  with pytest.raises(ValueError, match="exactly one"):
    group_metrics.group_report([0], [0])
  with pytest.raises(ValueError, match="one entry per test example"):
    group_metrics.group_report([0, 1], [0], class_groups={0: "a", 1: "a"})
