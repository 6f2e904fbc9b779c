"""Your own data through the command line: a split saved by datasets.from_arrays runs in
experiments.rpdp (a binary tabular federation with natural owners, sigmoid head) and in
the paper presets (--dataset=<path>), with no code copied from the experiments."""
import csv
import json
import os
import subprocess

import numpy as np
import pytest

import datasets
from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(module: str, args: list, timeout: int = 600) -> subprocess.CompletedProcess:
  return forked_runs.run_module(module, ["--progress=false", *args], timeout=timeout)


@pytest.fixture(scope="module")
def hospitals(tmp_path_factory) -> str:
  """Four 'hospitals' of tabular records with a binary outcome (float64/int64 on purpose)."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(800, 6))
  y = (x @ np.array([1.5, -1.0, 0.5, 0, 0, 0]) + 0.3 * rng.normal(size=800) > 0).astype(np.int64)
  hospital = rng.choice(["north", "south", "east", "west"], size=800)
  split = datasets.from_arrays(x[:600], y[:600], partition="natural", groups=hospital[:600],
                               test_x=x[600:], test_y=y[600:], seed=0)
  path = str(tmp_path_factory.mktemp("own") / "hospitals")
  split.save(path)
  return path


def test_rpdp_runs_on_a_saved_split_with_a_sigmoid_head(hospitals, tmp_path):
  out = tmp_path / "rpdp"
  proc = _run("experiments.rpdp", [f"--dataset={hospitals}", "--head=sigmoid", "--rounds=3",
                                   "--seeds=0", "--methods=ours,minimum", "--client_rate=1",
                                   "--eval_every=3", "--checkpoint_every=3",
                                   f"--output_dir={out}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "4 clients" in proc.stdout, proc.stdout
  summary = json.loads((out / "summary.json").read_text())
  by_method = {r["method"]: r for r in summary["results"]}
  assert set(by_method) == {"ours", "minimum"}
  for row in by_method.values():
    assert 0.0 <= row["mean_accuracy"] <= 1.0
    assert row["max_budget_used_vs_effective"] <= 1.0 + 1e-9
  # Personalized budgets use more of the personal budgets than the uniform minimum.
  assert by_method["ours"]["mean_budget_used_vs_own"] > by_method["minimum"]["mean_budget_used_vs_own"]


def test_fresh_budget_draw_per_seed_writes_one_plan_per_seed(hospitals, tmp_path,
                                                             tff_runtime):  # pylint: disable=unused-argument
  """issue 25 item 12: every seed its own budget draw, each plan checkable from its file."""
  import tff_idp  # pylint: disable=g-import-not-at-top
  out = tmp_path / "fresh"
  result = tff_idp.run_rpdp(datasets.resolve(hospitals), output_dir=str(out), head="sigmoid",
                            rounds=1, local_steps=1, seeds=(0, 1), methods=("ours",),
                            fresh_budgets_per_seed=True, progress=False, eval_every=1)
  plans = []
  for s in (0, 1):
    with open(out / f"record_plan_seed{s}.csv") as f:
      plans.append(list(csv.DictReader(line for line in f if not line.startswith("#"))))
  assert not (out / "record_plan.csv").exists()
  assert len(plans[0]) == len(plans[1]) == 600
  own = [[float(r["own_budget"]) for r in plan] for plan in plans]
  assert own[0] != own[1]                                           # two draws
  for plan in plans:                                                # each within budget
    assert all(float(r["epsilon_charged"]) <= float(r["effective_budget"]) * (1 + 1e-9)
               for r in plan)
  from tff_idp import preferences  # pylint: disable=g-import-not-at-top
  assert preferences.per_seed_budget_seed(0, 1) == preferences.per_seed_budget_seed(0, 1)
  assert preferences.per_seed_budget_seed(0, 1) != preferences.per_seed_budget_seed(0, 0)
  config = json.loads((out / "summary.json").read_text())["config"]
  assert config["fresh_budgets_per_seed"] is True
  assert len(result.rows[0]["final_accuracies"]) == 2


def test_bad_dataset_path_is_one_line(tmp_path):
  proc = _run("experiments.rpdp", [f"--dataset={tmp_path / 'nowhere'}",
                                   f"--output_dir={tmp_path / 'out'}"], timeout=300)
  assert proc.returncode == 2, proc.stderr[-3000:]
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
  assert "tfds:" in lines[0]  # the message lists what --dataset accepts


@pytest.mark.slow
@pytest.mark.bench  # make bench (issue 52); in make test: the CIFAR-10 preset's two rounds
# (tests/test_experiment_presets.py, the same preset runner) and
# test_idp_fedavg_cli_runs_a_saved_split (--dataset=<saved split>)
def test_paper_preset_runs_on_a_saved_image_split(tmp_path):
  rng = np.random.default_rng(1)
  x = rng.integers(0, 256, size=(400, 28, 28, 1)).astype(np.uint8)
  y = rng.integers(0, 10, size=400)
  path = str(tmp_path / "images")
  datasets.from_arrays(x, y, partition="iid", num_clients=20, seed=0,
                       test_x=x[:80], test_y=y[:80]).save(path)
  proc = _run("experiments.fmnist", [f"--dataset={path}", "--rounds=2", "--runs=nonprivate",
                                     "--seeds=0", "--clients_per_round=5",
                                     f"--output_dir={tmp_path / 'out'}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "20 clients" in proc.stdout
  assert "paper (%)" not in proc.stdout  # the paper's numbers are not for this data


@pytest.mark.slow
@pytest.mark.bench  # make bench; in make test: tests/rpdp/test_record_level.py::
# test_rerun_returns_stored_rows_and_refuses_other_learning_rate (the same check, in process)
def test_changed_learning_rate_refuses_resume_until_restart(hospitals, tmp_path):
  base = [f"--dataset={hospitals}", "--rounds=2", "--seeds=0", "--methods=ours",
          "--client_rate=1", "--eval_every=2", "--checkpoint_every=1",
          f"--output_dir={tmp_path / 'run'}"]
  assert _run("experiments.rpdp", base).returncode == 0
  again = _run("experiments.rpdp", base)  # finished: reported, not retrained
  assert again.returncode == 0, again.stderr[-3000:]
  refused = _run("experiments.rpdp", base + ["--learning_rate=0.5"])
  assert refused.returncode == 2, refused.stderr[-3000:]
  line = refused.stderr.strip().splitlines()[-1]
  assert line.startswith("error: ") and "client_learning_rate" in line and "--restart" in line
  assert "Traceback" not in refused.stderr
  fresh = _run("experiments.rpdp", base + ["--learning_rate=0.5", "--restart"])
  assert fresh.returncode == 0, fresh.stderr[-3000:]


def test_run_idp_fedavg_on_your_arrays(tmp_path, tff_runtime):  # pylint: disable=unused-argument
  from tff_idp import runners  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.normal(size=(3000, 8))
  y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
  split = datasets.from_arrays(x[:2500], y[:2500], partition="iid", num_clients=100,
                               test_x=x[2500:], test_y=y[2500:])
  result = runners.run_idp_fedavg(split, head="sigmoid", rounds=3, clients_per_round=20,
                                  runs=("nonprivate", "idp", "scale"), eval_every=3,
                                  checkpoint_every=3, output_dir=str(tmp_path / "idp"),
                                  progress=False, own_runtime=False)
  assert [r["run"] for r in result.rows] == ["nonprivate", "34-43-23", "scale-34-43-23"]
  assert "z_Δ" in result.table and (tmp_path / "idp" / "summary.json").exists()
  idp = result.rows[1]
  assert idp["noise_multiplier"] > 0 and len(idp["group_rates"]) == 3


@pytest.mark.slow
def test_idp_fedavg_cli_runs_a_saved_split(tmp_path):
  rng = np.random.default_rng(2)
  x = rng.normal(size=(1500, 5))
  y = (x[:, 0] > 0).astype(np.int64)
  path = str(tmp_path / "split")
  datasets.from_arrays(x[:1200], y[:1200], partition="dirichlet", num_clients=60, alpha=1.0,
                       test_x=x[1200:], test_y=y[1200:]).save(path)
  proc = _run("experiments.idp_fedavg", [f"--dataset={path}", "--head=sigmoid", "--rounds=2",
                                         "--runs=nonprivate", "--seeds=0",
                                         "--clients_per_round=6",
                                         f"--output_dir={tmp_path / 'out'}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "60 clients" in proc.stdout


def test_a_split_without_test_examples_is_refused_before_training(tmp_path):
  """from_arrays without test_x/test_y makes a split with an empty test set; every run
  evaluates, so the runners and the CLI refuse it in one line before training."""
  from tff_idp import runners
  from tff_idp.errors import ToolkitValueError
  rng = np.random.default_rng(1)
  x, y = rng.normal(size=(120, 4)), np.arange(120) % 2
  split = datasets.from_arrays(x, y, partition="iid", num_clients=4)
  with pytest.raises(ToolkitValueError, match="no test examples.*test_x= and test_y="):
    split.evaluation_arrays()
  with pytest.raises(ToolkitValueError, match="no test examples"):
    runners.run_rpdp(split, output_dir=str(tmp_path / "rpdp"), head="sigmoid", rounds=1)
  assert not (tmp_path / "rpdp").exists() or not any((tmp_path / "rpdp").iterdir())
  path = str(tmp_path / "no_test")
  split.save(path)
  proc = _run("experiments.rpdp", [f"--dataset={path}", "--head=sigmoid", "--rounds=1",
                                   f"--output_dir={tmp_path / 'out'}"])
  assert proc.returncode == 2, proc.stderr[-2000:]
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("error: the split at") and "no test examples" in last, last


@pytest.mark.slow
def test_run_ino_sgd_on_your_split_by_class_and_per_record(hospitals, tmp_path):
  """INO-SGD's own-data path: the runner (budgets by class) and the CLI (per record)."""
  import tff_idp  # pylint: disable=g-import-not-at-top
  result = tff_idp.run_ino_sgd(datasets.resolve(hospitals), output_dir=str(tmp_path / "lib"),
                               budgets={0: 0.5, 1: 4.0}, methods=["idp_sgd", "ino_sgd"],
                               steps=20, expected_batch=60, eval_every=10, progress=False,
                               seeds=[0, 1])
  assert [r["label"] for r in result.rows] == ["IDP-SGD", "INO-SGD"]
  assert "class 0 (ε=0.5)" in result.table and "INO-SGD on your data" in result.table
  assert "| class 0 (ε=0.5) |" in result.table  # the paired INO − IDP row of the group
  for row in result.rows:
    assert row["achieved_epsilons"][0] <= 0.5 and row["achieved_epsilons"][1] <= 4.0
    assert 0.0 <= row["mean_accuracy"] <= 1.0
  summary = json.load(open(tmp_path / "lib" / "summary.json"))
  assert summary["family"] == "ino_sgd" and summary["details"]["owners"] == {
      "class 0": 0.5, "class 1": 4.0}
  proc = _run("experiments.ino_sgd", [
      f"--dataset={hospitals}", "--record_distribution=three_levels", "--methods=idp_sgd",
      "--steps=10", "--expected_batch=60", "--eval_every=10", "--seeds=0",
      f"--output_dir={tmp_path / 'cli'}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "acc class 0 (%)" in proc.stdout and "acc class 1 (%)" in proc.stdout
  summary = json.load(open(tmp_path / "cli" / "summary.json"))
  plan = summary["details"]["runs"][0]["plan"]
  assert len(plan["achieved_epsilons"]) == 3  # three_levels: one owner per level
  for spent, budget in zip(plan["achieved_epsilons"], summary["config"]["epsilons"]):
    assert spent <= budget * (1 + 1e-9)
