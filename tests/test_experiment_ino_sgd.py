"""experiments.ino_sgd: the embedded default (slow), the presets on tiny fake data (slow), flags."""
import csv
import json
import os

import pytest

from tests import flag_driver
from tests.datasets import fakes
from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)


def _run(args, tmp_path, timeout=600):
  return forked_runs.run_module("experiments.ino_sgd",
                                [f"--output_dir={tmp_path}", "--noprogress", *args],
                                env=ENV, timeout=timeout)


@pytest.mark.slow
def test_embedded_default_compares_idp_drop_and_ino_per_group(tmp_path):
  proc = _run(["--train_examples=3000", "--test_examples=1000", "--steps=60",
               "--expected_batch=300", "--eval_every=30", "--seeds=0,1",
               "--drop_percents=20"], tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = proc.stdout
  assert ("| method | overall acc (%) | acc classes 0-4 (ε=0.1) (%) | "
          "acc classes 5-9 (ε=1) (%) |") in out
  assert "per-group test accuracy (2 seeds)" in out
  assert "| classes 0-4 (ε=0.1) |" in out and "INO − IDP (points, 95% CI" in out
  for label in ("IDP-SGD", "Drop 20%", "INO-SGD"):
    assert f"| {label} |" in out
  summary = json.load(open(tmp_path / "summary.json"))
  rows = {r["label"]: r for r in summary["results"]}
  assert set(rows) == {"IDP-SGD", "Drop 20%", "INO-SGD"}
  for r in rows.values():
    assert r["seeds"] == 2
    for eps, spent in zip([0.1, 1.0], r["achieved_epsilons"]):
      assert spent <= eps
    assert 0 <= r["worst_group_accuracy"]["mean"] <= r["accuracy"]["mean"] + 1e-12 or \
        r["worst_group_accuracy"]["mean"] <= 1
  assert rows["Drop 20%"]["records"] < rows["IDP-SGD"]["records"]
  assert rows["INO-SGD"]["gamma"] > 0 and rows["IDP-SGD"]["gamma"] == 0
  assert rows["INO-SGD"]["rates"] == rows["IDP-SGD"]["rates"]  # same sampling and noise
  assert rows["INO-SGD"]["noise_multiplier"] == rows["IDP-SGD"]["noise_multiplier"]
  with open(tmp_path / "ino-sgd" / "seed1" / "metrics.csv") as f:
    metrics = list(csv.DictReader(f))
  assert [m["round"] for m in metrics] == ["30", "60"]
  assert {"acc/0-4", "recall/5-9", "worst_group_accuracy", "imbalance"} <= set(metrics[0])
  assert "mean_batch" not in metrics[0]  # diagnostics stay out of the release
  assert (tmp_path / "ino-sgd" / "seed1" / "diagnostics.csv").exists()
  assert (tmp_path / "per_group.png").stat().st_size > 1000
  assert "Privacy plans" in open(tmp_path / "summary.md").read()


@pytest.mark.slow
def test_release_only_writes_no_diagnostics(tmp_path):
  proc = _run(["--train_examples=1500", "--test_examples=300", "--steps=10",
               "--expected_batch=100", "--seeds=0", "--methods=ino_sgd", "--release_only"],
              tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert not (tmp_path / "ino-sgd" / "seed0" / "diagnostics.csv").exists()
  summary = json.load(open(tmp_path / "summary.json"))
  assert all("diagnostics" not in r for r in summary["details"]["runs"])


@pytest.mark.slow
@pytest.mark.parametrize("preset", [
    "mn",
    # make bench (issue 52); in make test: the mn preset above (the same preset runner on
    # files built from local sources) and SCALE's owner plan in tests/accounting/owner/test_plan.py
    pytest.param("cm", marks=pytest.mark.bench)])
def test_presets_run_on_tiny_local_data(tmp_path, preset):
  raw = tmp_path / "raw"
  if preset == "mn":
    fakes.write_emnist_sqlite(str(raw), num_writers=40)
    extra = ["--expected_batch=40", "--epsilons=1,8"]
  else:
    fakes.write_cifar10(str(raw), n_train=600, n_test=60, as_tar=True)
    extra = ["--expected_batch=100"]
  proc = _run([f"--preset={preset}", f"--data_dir={raw}", f"--split_dir={tmp_path / 'split'}",
               "--steps=3", "--eval_every=0", "--seeds=0", "--methods=idp_sgd,ino_sgd",
               *extra], tmp_path / "out")
  assert proc.returncode == 0, proc.stderr[-3000:]
  summary = json.load(open(tmp_path / "out" / "summary.json"))
  rows = {r["label"]: r for r in summary["results"]}
  if preset == "cm":
    assert len(rows["IDP-SGD"]["group_accuracy"]) == 10
    assert len(set(rows["IDP-SGD"]["thresholds"])) == 10   # SCALE: one C per owner
    assert len(set(rows["IDP-SGD"]["rates"])) == 1
  else:
    assert set(rows["INO-SGD"]["group_accuracy"]) == {"0-4", "5-9"}
    assert rows["IDP-SGD"]["rates"][0] < rows["IDP-SGD"]["rates"][1]   # SAMPLE


def test_missing_preset_data_is_one_clear_line(tmp_path):
  proc = _run(["--preset=cm", f"--data_dir={tmp_path / 'nothing'}",
               f"--split_dir={tmp_path / 'split'}"], tmp_path / "out", timeout=300)
  assert proc.returncode == 2
  assert "error: cifar10: no local copy found" in proc.stderr
  assert "Traceback" not in proc.stderr


CASES = [
    (["--methods=idp_sgd,sgd"], "choose from"),
    (["--drop_percents=0"], "percentages in (0, 100)"),
    (["--epsilons=0.1"], "has 2 owners"),
    (["--epsilons=0,1"], "item 0 is out of range"),
    (["--delta=2"], "target δ must be a finite number > 0 and < 1"),
    (["--expected_batch=0"], "expected batch size must be a finite number > 0"),
    (["--ino_gamma_ratio=-1"], ">= 0"),
    (["--ino_alpha=0"], "ino_alpha"),
    (["--learning_rate=0"], "learning_rate"),
    (["--seeds="], "at least one seed"),
    (["--split_dir=/nonexistent"], "--split_dir cannot apply here: --preset=embedded uses the "
                                   "embedded data"),
    (["--data_dir=/x", "--split_dir=/y"], "--data_dir, --split_dir cannot apply here"),
    (["--class_budgets=0-9:1", "--record_distribution=three_levels"], "not both"),
    (["--class_budgets=0-9:1", "--epsilons=1,2"], "drop --epsilons"),
    (["--budget_seed=3"], "--budget_seed cannot apply here"),
    (["--model=mlp"], "--model cannot apply here"),
    (["--class_budgets=0-4:0.1"], "--class_budgets:"),
]


@pytest.fixture(scope="module")
def bad_flag_results():
  return flag_driver.run_bad_flags("experiments.ino_sgd", ["--output_dir=/tmp/unused"],
                                   [args for args, _ in CASES])


@pytest.mark.parametrize("index", range(len(CASES)))
def test_bad_flags_fail_fast_with_advice(index, bad_flag_results):
  result = bad_flag_results[index]
  assert result["rc"] == 2
  assert CASES[index][1] in result["stderr"], result["stderr"]


def test_flag_checks_need_no_tensorflow(bad_flag_results):
  assert bad_flag_results[-1] == {"tensorflow_imported": False}


def test_batch_larger_than_the_silo_is_refused_before_training():
  result = flag_driver.run_bad_flags(
      "experiments.ino_sgd", ["--output_dir=/tmp/unused"],
      [["--expected_batch=1e9", "--train_examples=500"]])[0]
  assert result["rc"] == 2 and "exceeds the 500 records; lower it" in result["stderr"]


def test_a_missing_dataset_path_is_one_line(tmp_path):
  result = flag_driver.run_bad_flags(
      "experiments.ino_sgd", ["--output_dir=/tmp/unused"],
      [[f"--dataset={tmp_path / 'nowhere'}"]])[0]
  assert result["rc"] == 2 and "nowhere" in result["stderr"], result["stderr"]
