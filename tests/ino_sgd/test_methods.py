"""INO-SGD's methods and owners (tff_idp/ino_sgd/methods.py), without TensorFlow."""
import numpy as np
import pytest

from tff_idp.ino_sgd import methods


def test_drop_expands_to_one_run_per_percentage():
  runs = methods.method_runs(["idp_sgd", "drop", "ino_sgd"], [10, 30])
  assert [r.label for r in runs] == ["IDP-SGD", "Drop 10%", "Drop 30%", "INO-SGD"]
  assert runs[1].drop == pytest.approx(0.1) and runs[1].slug == "drop_10pct"
  with pytest.raises(ValueError, match="choose from"):
    methods.method_runs(["bogus"], [])


def test_owners_by_class_group_classes_of_equal_budget_most_private_first():
  labels = np.array([0, 1, 2, 3, 2, 0])
  owners = methods.owners_by_class(labels, {0: 1.0, 1: 0.1, 2: 1.0, 3: 0.1})
  assert owners.epsilons == (0.1, 1.0) and owners.names == ("1,3", "0,2")  # by their classes
  assert owners.of_record.tolist() == [1, 0, 1, 0, 1, 1]
  assert owners.class_groups == {1: "1,3", 3: "1,3", 0: "0,2", 2: "0,2"}
  assert owners.by_class
  with pytest.raises(ValueError, match=r"classes \[3\] have no owner"):
    methods.owners_by_class(labels, {0: 1.0, 1: 0.1, 2: 1.0})


def test_owners_by_record_are_the_budget_levels_and_the_groups_are_classes():
  labels = np.array([0, 1, 1, 0])
  owners = methods.owners_by_record(labels, np.array([2.0, 0.5, 2.0, 0.5]), num_classes=2)
  assert owners.epsilons == (0.5, 2.0)
  assert owners.of_record.tolist() == [1, 0, 1, 0]
  assert owners.class_groups == {0: "class 0", 1: "class 1"} and not owners.by_class
  with pytest.raises(ValueError, match="one ε per record"):
    methods.owners_by_record(labels, np.ones(3), num_classes=2)
  with pytest.raises(ValueError, match="> 0"):
    methods.owners_by_record(labels, np.array([1.0, 0.0, 1.0, 1.0]), num_classes=2)


def test_a_presets_owners_hold_their_classes_and_name_themselves_by_them():
  labels = np.array([0, 5, 9, 4, 7])
  owners = methods.owners_of_classes(labels, ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)), [0.1, 1.0])
  assert owners.names == ("0-4", "5-9") and owners.epsilons == (0.1, 1.0)
  assert owners.of_record.tolist() == [0, 1, 1, 0, 1]
  assert owners.classes_of_owners() == {"0-4": [0, 1, 2, 3, 4], "5-9": [5, 6, 7, 8, 9]}
  by_record = methods.owners_by_record(np.array([0, 1]), np.array([1.0, 2.0]), num_classes=2)
  assert by_record.classes_of_owners() is None  # the groups are classes, not owners
