"""tff_idp/engine/report.py: the table cells every family prints."""
from tff_idp.engine import report


def test_mean_and_sd_in_points_and_a_dash_where_there_is_no_spread():
  assert report.percent_pm(0.8125, 0.004) == "81.25 ± 0.40"
  assert report.percent_pm(0.8125, 0.004, 3) == "81.25 ± 0.40"
  assert report.percent_pm(0.4072, 0.0, 1) == "40.72 ± —"  # issue 51: one seed is not "± 0.00"
  assert report.percent_pm(0.5, 0.0, 2) == "50.00 ± 0.00"  # two equal values: a real 0
  assert report.percent_pm(0.5, 0.0) == "50.00 ± 0.00"  # count unknown


def test_markdown_table_and_count():
  assert report.markdown_table(["a", "b"], [[1, 2]]) == "| a | b |\n|---|---|\n| 1 | 2 |"
  assert report.count(1, "seed") == "1 seed" and report.count(3, "seed") == "3 seeds"
