"""benchmarks.bench_rpdp_cohorts: its summary, table and arguments (the run itself is make bench)."""
import pytest

from benchmarks import bench_rpdp_cohorts as bench


def test_summary_is_the_median_round_with_clients_per_second_and_the_ratios():
  s = bench.summarize({"100|tff": [0.4, 0.5, 0.6], "100|in_process": [0.6, 0.6, 0.6],
                       "100|vectorized": [0.1, 0.2, 0.3]})
  row = s["100|vectorized"]
  assert row["round_s"] == pytest.approx(0.2) and row["range_s"] == [0.1, 0.3]
  assert row["clients_per_s"] == pytest.approx(500.0)
  assert row["x_tff"] == pytest.approx(2.5) and row["x_in_process"] == pytest.approx(3.0)
  text = bench.table({"summary": s})
  assert "| 100 | vectorized | 0.20 (0.10–0.30) | 500 | 2.50× | 3.00× |" in text


@pytest.mark.parametrize("argv", [["--passes=0"], ["--cohorts=10,x"], ["--clients=3"]])
def test_bad_arguments_are_refused_with_the_usage(argv):
  with pytest.raises(SystemExit, match="usage"):
    bench._parse(argv)  # pylint: disable=protected-access
