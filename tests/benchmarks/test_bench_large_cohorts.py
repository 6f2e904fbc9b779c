"""benchmarks.bench_large_cohorts: its arithmetic, its arguments, and one short run."""
import os
import subprocess
import sys

import pytest

from benchmarks import bench_large_cohorts as bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_summary_is_the_median_round_with_its_range_and_ratios():
  res = {"rounds": {"logreg|100|vectorized": [0.1, 0.2, 0.4],
                    "logreg|100|tff": [1.0, 1.2, 0.8],
                    "logreg|100|plain tf.function loop": [0.5, 0.5, 0.5]}}
  s = bench.summarize(res)
  row = s["logreg|100|vectorized"]
  assert row["round_s"] == pytest.approx(0.2)
  assert row["clients_per_s"] == pytest.approx(500.0)
  assert row["clients_per_s_range"] == pytest.approx([250.0, 1000.0])
  assert row["x_tff"] == pytest.approx(5.0)
  assert row["x_plain tf.function loop"] == pytest.approx(2.5)
  assert row["x_in_process"] is None  # not measured at this c


@pytest.mark.parametrize("argv", [["--passes=0"], ["--cohorts=10,x"], ["--clients=3"]])
def test_bad_arguments_are_refused_with_the_usage(argv):
  with pytest.raises(SystemExit, match="use --passes=N"):
    bench._parse(argv)  # pylint: disable=protected-access


@pytest.mark.slow
@pytest.mark.bench  # make bench; in make test: the summary and argument tests above
def test_a_short_run_prints_every_entry():
  code = ("from benchmarks import bench_large_cohorts as b; "
          "print(b.table(b.main(passes=1, cohorts=(4, 12), per_client_max=4)))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                        text=True, timeout=600, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  for entry in bench.ENTRIES:
    assert f"| logreg | 4 | {entry} |" in proc.stdout and f"| mlp | 4 | {entry} |" in proc.stdout
  assert "| logreg | 12 | vectorized |" in proc.stdout
  assert "| logreg | 12 | tff |" not in proc.stdout  # above --per_client_max


def test_results_go_to_a_file_named_by_the_cohorts():
  """The default run keeps its name; another run's cohorts name its file (no overwriting)."""
  assert bench.results_path().endswith("results/large_cohorts.json")
  assert bench.results_path((1000,)).endswith("results/large_cohorts_c1000.json")
  assert bench.results_path((10, 100)).endswith("results/large_cohorts_c10_100.json")
