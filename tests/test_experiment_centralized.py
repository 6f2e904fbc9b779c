"""experiments.centralized end to end on a tiny silo (slow), and its flag errors (fast)."""
import json
import os

import pytest

from tests import flag_driver
from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)


def _run(args, tmp_path, timeout=300):
  return forked_runs.run_module("experiments.centralized", [f"--output_dir={tmp_path}", *args],
                                env=ENV, timeout=timeout)


@pytest.mark.slow
def test_centralized_compares_scf_binary_search_and_filter(tmp_path):
  proc = _run(["--mode=both", "--methods=scf,binary_search,exact,filter",
               "--train_examples=600", "--test_examples=300", "--steps=40", "--eval_every=20",
               "--seeds=0", "--table3_examples=200", "--table3_steps=20", "--table3_trials=1"],
              tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = proc.stdout
  for name in ("SCF", "BinarySearch", "Exact", "Filter"):
    assert f"| {name} |" in out
  for scenario in ("Group-3", "Group-100", "Individual-200"):
    assert f"| {scenario} | SCF |" in out and f"| {scenario} | BinarySearch |" in out
  assert "active records" in out
  summary = json.load(open(tmp_path / "summary.json"))
  assert summary["details"]["records"] == 600
  rows = {r["method"]: r for r in summary["results"] if r["table"] == "compare"}
  for method, row in rows.items():
    assert row["max_spent_over_budget"] <= 1.0 + 1e-9, method
    assert 0.0 <= row["mean_accuracy"] <= 1.0
    assert row["seconds_per_step"] > 0
  # same σ and steps for every DP-SGD method, and (almost) the same rates
  assert {rows[m]["noise_multiplier"] for m in ("scf", "binary_search", "exact")} == {1.0}
  for level, q in rows["binary_search"]["rates"].items():
    assert rows["exact"]["rates"][level] == pytest.approx(q, rel=1e-3)
  filt = rows["filter"]
  assert len(filt["active"]) == 40 and filt["active"][0] <= 600
  assert all(a >= b for a, b in zip(filt["active"], filt["active"][1:]))  # worst_case check
  first = filt["first_filtered"]
  assert first["11.8"] is None  # the auto σ lets the largest budget afford every step
  assert first["2.0"] is not None and first["2.0"] <= (first["4.7"] or 10**9)
  assert filt["orders"]["2.0"] > filt["orders"]["4.7"] > filt["orders"]["11.8"] > 1
  t3 = {(r["scenario"], r["method"]): r for r in summary["results"] if r["table"] == "table3"}
  assert t3["Group-100", "scf"]["distinct_budgets"] == 100
  assert t3["Group-3", "scf"]["distinct_budgets"] == 3
  assert t3["Individual-200", "binary_search"]["distinct_budgets"] == 200
  for r in t3.values():
    assert r["calibration_seconds"] and r["max_abs_q_difference_scf_vs_binary_search"] < 0.05
  assert (tmp_path / "centralized.png").stat().st_size > 1000
  assert "Table 3" in open(tmp_path / "summary.md").read()


@pytest.mark.slow
def test_table3_mode_alone_writes_its_table_and_summary(tmp_path):
  """--mode=table3 runs no comparison (it once crashed writing the summary)."""
  proc = _run(["--mode=table3", "--methods=scf,binary_search", "--train_examples=300",
               "--test_examples=100", "--seeds=0", "--table3_examples=100",
               "--table3_steps=4", "--table3_trials=2"], tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.load(open(tmp_path / "summary.json"))
  assert {r["table"] for r in summary["results"]} == {"table3"}
  assert all(len(r["final_accuracies"]) == 2 for r in summary["results"])
  assert "Table 2" not in proc.stdout and "| Group-3 | SCF |" in proc.stdout
  assert (tmp_path / "centralized.png").stat().st_size > 1000


# Every bad flag set is checked by calling main() in ONE subprocess (a fresh
# absl flag registry, no TensorFlow), which keeps these tests at ~1 s in all.
BAD_FLAGS = [
    (["--methods=scf,bogus"], "bogus"),
    (["--methods="], "nothing"),
    (["--steps=0"], r"--steps=0: DP-SGD steps must be an integer >= 1"),
    (["--noise_multiplier=0"], "noise_multiplier"),
    (["--delta=2"], "delta"),
    (["--levels=0,1,5"], r"--levels=0,1,5: item 0 is out of range; each item \(ε levels\) must be a number > 0"),
    (["--levels=a,b,c"], r"--levels: 'a' is not a number"),
    (["--level_ratios=0.5,0.2,0.1"], "sum to"),
    (["--clip_norm=-1"], "clip_norm"),
    (["--learning_rate=0"], "learning_rate"),
    (["--filter_alpha=0.5"], "filter_alpha"),
    (["--filter_noise_multiplier=-1"], "filter_noise_multiplier"),
    (["--seeds="], "seeds"),
    (["--mode=table3", "--methods=filter"], "table3"),
    (["--mode=table3", "--train_examples=500"], "exceeds"),
]

@pytest.fixture(scope="module")
def bad_flag_results(tmp_path_factory):
  out = tmp_path_factory.mktemp("bad_flags")
  return flag_driver.run_bad_flags("experiments.centralized", [f"--output_dir={out}"],
                                   [a for a, _ in BAD_FLAGS])


@pytest.mark.parametrize("index", range(len(BAD_FLAGS)),
                         ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flags_fail_fast_with_advice(index, bad_flag_results):
  flag_driver.assert_fails_with_advice(bad_flag_results[index], BAD_FLAGS[index][1])


def test_flag_checks_need_no_tensorflow(bad_flag_results):
  assert bad_flag_results[-1] == {"tensorflow_imported": False}


def test_command_line_bad_flag_exits_2(tmp_path):
  proc = _run(["--steps=-3"], tmp_path, timeout=120)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert "error: --steps=-3: DP-SGD steps must be an integer >= 1" in proc.stderr
