"""The main job end to end on a tiny federation (slow), and its flag errors (fast)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, tmp_path, timeout=600):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
  return subprocess.run(
      [sys.executable, "-m", "experiments.idp_fedavg", f"--output_dir={tmp_path}",
       "--progress=false", *args], capture_output=True, text=True, timeout=timeout,
      env=env, cwd=ROOT, stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_main_job_runs_every_mode_and_reports_spent_budget(tmp_path):
  proc = _run(["--num_clients=120", "--clients_per_round=12", "--rounds=3",
               "--seeds=0", "--budgets=4,8", "--ratios=0.5,0.5",
               "--runs=nonprivate,50-50,100-0,scale", "--eval_every=1",
               "--checkpoint_every=2"], tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| 50-50 |" in proc.stdout and "| scale-50-50 |" in proc.stdout
  summary = json.load(open(tmp_path / "summary.json"))
  runs = {r["run"]: r for r in summary["results"]}
  assert set(runs) == {"nonprivate", "50-50", "100-0", "scale-50-50"}
  for name in ("50-50", "100-0", "scale-50-50"):
    for spent, budget in zip(runs[name]["epsilon_spent"], [4, 8]):
      assert spent <= budget
  assert runs["nonprivate"]["noise_multiplier"] is None
  # IDP gives the relaxed group a higher rate at one σ.
  q = runs["50-50"]["group_rates"]
  assert q[1] > q[0]
  assert (tmp_path / "accuracy.png").stat().st_size > 1000
  assert (tmp_path / "50-50" / "seed0" / "checkpoints" / "ckpt_000003.json").exists()


@pytest.mark.parametrize("args,match", [
    (["--runs=50-60"], "sum to"),
    (["--runs=foo:1-2"], "mode must be idp or scale"),
    (["--runs=10-90", "--budgets=1,2,3"], "one percentage per budget"),
    (["--clients_per_round=500", "--num_clients=100"], "exceeds num_clients"),
    (["--budgets=0,1", "--runs=50-50", "--ratios=0.5,0.5"], "item 0 is out of range.*must be a number > 0"),
    (["--delta=1.5"], "delta"),
])
def test_bad_flags_fail_fast_with_advice(args, match, tmp_path):
  base = ["--num_clients=100", "--rounds=2", "--budgets=1,2", "--ratios=0.5,0.5",
          "--runs=50-50"]
  proc = _run(base + args, tmp_path, timeout=120)
  assert proc.returncode == 2
  assert "error:" in proc.stderr
  import re
  assert re.search(match, proc.stderr), proc.stderr[-2000:]
