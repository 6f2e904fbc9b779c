"""benchmarks.bench_small_model_rounds: its arithmetic, its arguments, and one short run."""
import os
import subprocess
import sys

import pytest

from benchmarks import bench_small_model_rounds as bench

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _driver_entry(round_s, **stages):
  entry = {"round_s": round_s}
  for key in bench.STAGES:
    entry[key] = stages.get(key, [0.0] * len(round_s))
  return entry


def test_summary_leaves_out_the_first_round_and_its_stages_add_up():
  # Round 1 traces (10 s) and is left out; evaluation every 2nd round averages to 0.05 s.
  entry = _driver_entry([10.0, 0.2, 0.3, 0.2, 0.3],
                        next_s=[9.0, 0.1, 0.15, 0.1, 0.15],
                        evaluation_s=[0.5, 0.0, 0.1, 0.0, 0.1])
  res = {"passes": {"driver, client_execution=tff": [entry],
                    "Keras model.fit loop": [{"round_s": [5.0, 0.5, 0.5]}]}}
  summary = bench.summarize(res)
  row = summary["driver, client_execution=tff"]
  assert row["round_ms"] == pytest.approx(250.0)
  assert row["rounds_per_s"] == pytest.approx(4.0)
  assert row["next_ms"] == pytest.approx(125.0)
  assert row["evaluation_ms"] == pytest.approx(50.0)
  assert row["rest_ms"] == pytest.approx(75.0)
  assert summary["Keras model.fit loop"]["rounds_per_s"] == pytest.approx(2.0)


def test_summary_is_the_median_over_passes_with_their_range():
  passes = [{"round_s": [9.0, t, t]} for t in (0.1, 0.2, 0.4)]
  row = bench.summarize({"passes": {"plain tf.function loop": passes}})[
      "plain tf.function loop"]
  assert row["rounds_per_s"] == pytest.approx(5.0)
  assert row["rounds_per_s_range"] == pytest.approx([2.5, 10.0])


@pytest.mark.parametrize("argv", [["--rounds=0"], ["--passes=x"], ["--clients=3"]])
def test_bad_arguments_are_refused_with_the_usage(argv):
  with pytest.raises(SystemExit, match="use --rounds=N --passes=N"):
    bench._parse(argv)  # pylint: disable=protected-access


@pytest.mark.slow
@pytest.mark.bench  # make bench; in make test: the summary and argument tests above
def test_a_short_run_prints_every_entry_and_stage():
  code = ("from benchmarks import bench_small_model_rounds as b; "
          "print(b.table(b.main(rounds=3, passes=1, out_path=None)))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                        text=True, timeout=600, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  for name in ("driver, client_execution=tff", "driver, client_execution=in_process",
               "Keras model.fit loop", "plain tf.function loop"):
    assert f"| {name} |" in proc.stdout
  assert "| … of which client training (in process) | 0.0 |" in proc.stdout
  assert "610 parameters (logreg)" in proc.stdout
