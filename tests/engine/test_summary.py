"""The one summary schema (tff_idp/engine/summary.py, docs/api.md)."""
import json
import math

import numpy as np
import pytest

from tests.golden import runs as golden
from tff_idp.engine import summary


def test_sample_sd_is_ddof_one_and_zero_for_one_value():
  assert summary.sample_sd([0.5]) == 0.0
  assert summary.sample_sd([1.0, 3.0]) == pytest.approx(math.sqrt(2.0))
  assert summary.sample_sd([1.0, 3.0, float("nan")]) == pytest.approx(math.sqrt(2.0))


def test_written_summary_is_strict_json_with_infinity_as_null(tmp_path):
  path = summary.write_summary(
      str(tmp_path), "idp_fedavg", {"budgets": [1.0, math.inf]},
      [{"label": "50-50", "final_accuracies": [0.5], "mean_accuracy": 0.5,
        "std_accuracy": 0.0, "epsilon_spent": [np.float64(0.9), math.inf], "n": np.int64(3)}],
      privacy_warning=None, details={"x": (1, 2)})
  text = open(path).read()
  assert "Infinity" not in text and "NaN" not in text
  doc = json.loads(text)
  summary.check_summary(doc)
  assert doc["config"]["budgets"] == [1.0, None]
  assert doc["results"][0]["epsilon_spent"] == [0.9, None] and doc["results"][0]["n"] == 3


def test_rows_need_a_label_and_the_accuracies_and_families_are_known(tmp_path):
  with pytest.raises(ValueError, match="label"):
    summary.write_summary(str(tmp_path), "rpdp", {}, [{"method": "ours"}])
  with pytest.raises(ValueError, match="lacks std_accuracy"):
    summary.write_summary(str(tmp_path), "rpdp", {}, [
        {"label": "ours", "final_accuracies": [0.5], "mean_accuracy": 0.5}])
  with pytest.raises(ValueError, match="family"):
    summary.write_summary(str(tmp_path), "nope", {}, [])


@pytest.mark.parametrize("name", sorted(golden.RUNS))
def test_every_experiment_module_writes_the_schema(name):
  """The golden runs cover every family; their recorded summaries follow the schema."""
  recorded = golden.load(name)["summary"]
  assert set(recorded) == set(summary.TOP_LEVEL_KEYS)
  assert recorded["schema"] == summary.SCHEMA_VERSION
  assert recorded["family"] in summary.FAMILIES
  assert recorded["results"]
  # The recording sorts keys; the file itself has them in schema order.
  summary.check_summary({k: recorded[k] for k in summary.TOP_LEVEL_KEYS})
