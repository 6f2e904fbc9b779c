"""benchmarks.bench_default_hyperparameters: its grid, and the docs quoting its last result."""
import json
import os

from benchmarks import bench_default_hyperparameters as bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_sweep_changes_one_setting_at_a_time():
  grid = bench.settings()
  assert grid[0] == ("default", {})
  assert all(len(override) == 1 for _, override in grid[1:])
  assert len(grid) == 1 + sum(len(v) for v in bench.NEIGHBOURS.values())


def test_the_docs_table_is_the_recorded_result():
  """docs/idp_fedavg.md's sweep table quotes benchmarks/results/default_hyperparameters.json."""
  with open(os.path.join(ROOT, "benchmarks", "results", "default_hyperparameters.json")) as f:
    result = json.load(f)
  with open(os.path.join(ROOT, "docs", "idp_fedavg.md")) as f:
    docs = f.read()
  readme, digits = result["datasets"]["readme"], result["datasets"]["digits"]
  for label in readme:
    assert f"| {readme[label]:.1f} | {digits[label]:.1f} |" in docs, label
  assert max(digits, key=digits.get) == "default"  # what the docs claim of the defaults
  assert max(readme.values()) - readme["default"] <= 1.0
