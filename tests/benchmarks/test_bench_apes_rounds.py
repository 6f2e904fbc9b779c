"""benchmarks.bench_apes_rounds: its table and its arguments (the run itself is make bench)."""
import pytest

from benchmarks import bench_apes_rounds as bench


def test_table_gives_users_per_second_and_the_ratio_to_tff():
  res = {"summary": {"tff": {"median_s": 6.0, "min_s": 5.5, "max_s": 7.0, "users_per_s": 1000 / 6},
                     "vectorized": {"median_s": 0.5, "min_s": 0.4, "max_s": 0.6,
                                    "users_per_s": 2000.0}},
         "max_weight_gap_after_round_1": 3e-8}
  text = bench.table(res)
  assert "| vectorized | 0.50 (0.40–0.60) | 2,000 | 12.00× |" in text
  assert "| tff | 6.00 (5.50–7.00) | 167 | 1.00× |" in text


@pytest.mark.parametrize("argv", [["--passes=0"], ["--users=3"], ["--rounds=x"]])
def test_bad_arguments_are_refused_with_the_usage(argv):
  with pytest.raises(SystemExit, match="usage"):
    bench._parse(argv)  # pylint: disable=protected-access


def test_help_prints_the_docstring(capsys):
  with pytest.raises(SystemExit) as exit_info:
    bench._parse(["--help"])  # pylint: disable=protected-access
  assert exit_info.value.code == 0
  assert "APES rounds" in capsys.readouterr().out
