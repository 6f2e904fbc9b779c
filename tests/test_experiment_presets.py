"""The paper's presets: defaults, flag errors, and two-round runs with the CNN."""
import json
import os
import subprocess
import sys

import pytest

from tests.datasets import fakes
from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(module, args, timeout=300):
  return forked_runs.run_module(module, ["--progress=false", *args], timeout=timeout)


def test_aldaghri_comparison_sets_its_budgets_runs_and_rate_cap():
  code = ("import json; from absl import flags; from experiments import fmnist, presets; "
          "flags.FLAGS(['x', '--comparison=aldaghri']); "
          "print(json.dumps(presets.resolved_flags(fmnist.PRESET)))")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-2000:]
  v = json.loads(proc.stdout.strip().splitlines()[-1])
  assert v["budgets"] == ["0.6", "inf", "inf"] and v["runs"] == ["95-0-5"]
  assert v["max_rate"] == 0.1 and v["partition"] == "natural" and v["delta"] == 1e-5


@pytest.mark.parametrize("module,args,match", [
    ("experiments.svhn", [], "train_32x32.mat"),
    ("experiments.cifar10", ["--iid", "--partition=dirichlet"], "contradicts"),
    ("experiments.fmnist", ["--partition=pachinko"], "natural"),
])
def test_bad_flags_and_missing_data_fail_fast(tmp_path, module, args, match):
  proc = _run(module, [f"--data_dir={tmp_path / 'none'}",
                       f"--split_dir={tmp_path / 'split'}", *args], timeout=120)
  assert proc.returncode != 0
  assert match in proc.stderr, proc.stderr[-2000:]
  assert not (tmp_path / "split").exists()


@pytest.mark.slow
def test_cifar10_preset_trains_two_rounds_on_a_tiny_split(tmp_path):
  raw = tmp_path / "raw"
  fakes.write_cifar10(str(raw), n_train=200, n_test=40, as_tar=True)
  out = tmp_path / "run"
  proc = _run("experiments.cifar10", [
      f"--data_dir={raw}", f"--split_dir={tmp_path / 'split'}", "--num_clients=20",
      "--rounds=2", "--clients_per_round=5", "--local_epochs=1", "--batch_size=8",
      "--runs=nonprivate,34-43-23", "--eval_every=1", "--checkpoint_every=1",
      f"--output_dir={out}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| run | measured here (%) | paper (%), cifar10 non-i.i.d. |" in proc.stdout
  assert "| 34-43-23 |" in proc.stdout and "| 26.5 |" in proc.stdout
  manifest = json.load(open(tmp_path / "split" / "manifest.json"))
  assert manifest["partition"] == "pachinko" and manifest["client_sizes"] == [10] * 20
  summary = json.load(open(out / "summary.json"))
  runs = {r["run"]: r for r in summary["results"]}
  assert set(runs) == {"nonprivate", "34-43-23"}
  for spent, budget in zip(runs["34-43-23"]["epsilon_spent"], [10, 20, 30]):
    assert spent <= budget
  assert summary["config"]["client_optimizer"] == "adam"
  assert summary["config"]["delta"] == 1e-4
  assert (out / "34-43-23" / "seed0" / "checkpoints" / "ckpt_000002.json").exists()


@pytest.mark.slow
@pytest.mark.bench  # make bench; in make test: the CIFAR-10 preset run above (the same preset
# runner), the paper's CNN in tests/idp_fedavg/test_in_process.py, saved splits in test_own_data.py
def test_fmnist_preset_trains_two_rounds_with_the_28x28_cnn(tmp_path):
  raw = tmp_path / "raw"
  fakes.write_emnist_sqlite(str(raw), num_writers=12)
  split = tmp_path / "split"
  out = tmp_path / "run"
  proc = _run("experiments.fmnist", [
      f"--data_dir={raw}", f"--split_dir={split}", "--iid", "--budgets=10,20,30",
      "--rounds=2", "--clients_per_round=6", "--local_epochs=1", "--batch_size=8",
      "--runs=34-43-23", "--eval_every=1", f"--output_dir={out}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "fmnist (iid)" in proc.stdout and "| 34-43-23 | " in proc.stdout
  assert "| 95.9 |" in proc.stdout                       # Table I, FMNIST i.i.d.
  assert json.load(open(split / "manifest.json"))["num_clients"] == 12
  # A second run reuses the split (no source files needed any more).
  again = _run("experiments.fmnist", [
      f"--data_dir={tmp_path / 'gone'}", f"--split_dir={split}", "--budgets=10,20,30",
      "--rounds=2", "--clients_per_round=6", "--local_epochs=1", "--batch_size=8",
      "--runs=nonprivate", "--eval_every=2", f"--output_dir={tmp_path / 'run2'}"])
  assert again.returncode == 0, again.stderr[-3000:]
  assert "fmnist (iid)" in again.stdout
