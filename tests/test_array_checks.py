"""tff_idp.array_checks: user arrays converted or refused, with the field named."""
import numpy as np
import pytest

from tff_idp import array_checks
from tff_idp.errors import ToolkitValueError


def test_float64_features_and_int64_labels_are_converted():
  x = array_checks.as_features(np.ones((3, 2), np.float64))
  y = array_checks.as_labels(np.array([0, 1, 1], np.int64))
  assert x.dtype == np.float32 and y.dtype == np.int32
  assert array_checks.as_labels(np.array([0.0, 2.0])).tolist() == [0, 2]
  assert array_checks.as_labels(np.array([[1], [0]])).tolist() == [1, 0]
  assert array_checks.as_labels(np.array([True, False])).tolist() == [1, 0]


@pytest.mark.parametrize("x,match", [
    (np.array([[1.0, np.nan]]), r"x: example 0 has a NaN"),
    (np.array([[1e300]]), r"beyond float32"),
    (np.array([1.0, 2.0]), r"shape \[examples, \.\.\.\]"),
    (np.array([["a", "b"]]), r"must be numeric"),
])
def test_bad_features_name_the_field(x, match):
  with pytest.raises(ToolkitValueError, match=match):
    array_checks.as_features(x)


@pytest.mark.parametrize("y,kwargs,match", [
    (np.array([0.5, 1.0]), {}, "whole numbers"),
    (np.array([-1, 1]), {}, ">= 0"),
    (np.array([0, 57]), {"num_classes": 10}, "label 57 is out of range for 10 classes"),
    (np.eye(3), {}, "not one-hot"),
    (np.array(["cat", "dog"]), {}, "integer class ids"),
])
def test_bad_labels_name_the_field(y, kwargs, match):
  with pytest.raises(ToolkitValueError, match=match):
    array_checks.as_labels(y, "labels", **kwargs)


def test_record_federation_converts_and_names_the_client():
  from tff_idp.rpdp.record_level import RecordFederation  # pylint: disable=g-import-not-at-top
  fed = RecordFederation({"a": np.zeros((2, 3)), "b": np.ones((1, 3))},
                         {"a": np.array([0, 1], np.int64), "b": np.array([1.0])})
  assert fed.x["a"].dtype == np.float32 and fed.y["b"].dtype == np.int32
  with pytest.raises(ToolkitValueError, match=r"y\['b'\]: labels must be whole numbers"):
    RecordFederation({"a": np.zeros((2, 3)), "b": np.ones((1, 3))},
                     {"a": np.array([0, 1]), "b": np.array([0.5])})
  with pytest.raises(ToolkitValueError, match="client 'a': 2 features vs 1 labels"):
    RecordFederation({"a": np.zeros((2, 3))}, {"a": np.array([0])})
