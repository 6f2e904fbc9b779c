"""The main job end to end on a tiny federation (slow), and its flag errors (fast)."""
import csv
import json
import os

import pytest
from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, tmp_path, timeout=600):
  return forked_runs.run_module("experiments.idp_fedavg",
                                [f"--output_dir={tmp_path}", "--progress=false", *args],
                                timeout=timeout)


@pytest.mark.slow
def test_main_job_runs_every_mode_and_reports_spent_budget(tmp_path):
  proc = _run(["--num_clients=120", "--clients_per_round=12", "--rounds=3",
               "--seeds=0,1", "--budgets=4,8", "--ratios=0.5,0.5",
               "--runs=nonprivate,50-50,100-0,scale", "--eval_every=1",
               "--checkpoint_every=2", "--clipped_count_stddev=1.5"], tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| 50-50 |" in proc.stdout and "| scale-50-50 |" in proc.stdout
  assert "| z_Δ |" in proc.stdout and "paired t-test over seeds" in proc.stdout
  assert "vs 50-50:" in proc.stdout  # SCALE is compared with SAMPLE on its distribution
  summary = json.load(open(tmp_path / "summary.json"))
  assert summary["config"]["clipped_count_stddev"] == 1.5
  runs = {r["run"]: r for r in summary["results"]}
  assert set(runs) == {"nonprivate", "50-50", "100-0", "scale-50-50"}
  for name in ("50-50", "100-0", "scale-50-50"):
    for spent, budget in zip(runs[name]["epsilon_spent"], [4, 8]):
      assert spent <= budget
    # The aggregator got σ_b from the flag: its noise is z_Δ·C with the z_Δ reported.
    r = runs[name]
    sigma, z_value = r["noise_multiplier"], r["value_noise_multiplier"]
    assert r["clipped_count_stddev"] == 1.5
    assert z_value == pytest.approx((sigma**-2 - 3.0**-2) ** -0.5)
    with open(tmp_path / name / "seed0" / "metrics.csv") as f:
      rows = list(csv.DictReader(f))
    for row in rows:
      assert float(row["noise_std"]) == pytest.approx(z_value * float(row["clip"]), rel=1e-5)
  assert runs["nonprivate"]["noise_multiplier"] is None
  assert runs["nonprivate"]["value_noise_multiplier"] is None
  assert runs["nonprivate"]["paired"] is None
  assert runs["50-50"]["paired"]["a"] == "nonprivate"
  assert runs["100-0"]["paired"]["a"] == "50-50"
  assert runs["scale-50-50"]["paired"]["a"] == "50-50"
  assert runs["100-0"]["paired"]["n"] == 2
  # IDP gives the relaxed group a higher rate at one σ.
  q = runs["50-50"]["group_rates"]
  assert q[1] > q[0]
  assert (tmp_path / "accuracy.png").stat().st_size > 1000
  assert (tmp_path / "50-50" / "seed0" / "checkpoints" / "ckpt_000003.json").exists()


def test_clipped_count_stddev_flag_is_honoured_by_validation(tmp_path):
  base = ["--num_clients=100", "--rounds=2", "--budgets=1,2", "--ratios=0.5,0.5",
          "--runs=50-50", "--clients_per_round=10"]
  # σ ≈ 1.1 here: σ_b = 0.3 < σ/2 must fail before training, naming the flag.
  proc = _run(base + ["--clipped_count_stddev=0.3"], tmp_path / "low", timeout=120)
  assert proc.returncode == 2
  assert "--clipped_count_stddev" in proc.stderr and "σ_b=0.3" in proc.stderr


@pytest.mark.parametrize("args,match", [
    (["--runs=50-60"], "sum to"),
    (["--runs=30-30"], "--runs: run spec '30-30': the percentages 30-30 sum to 60, not 100"),
    (["--runs=foo:1-2"], "mode must be idp or scale"),
    (["--runs=10-90", "--budgets=1,2,3"], "give 3, one per budget"),
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


def _config(**kw):
  from experiments import common  # pylint: disable=g-import-not-at-top
  base = dict(budgets=[1.0, 2.0], ratios=[0.5, 0.5], runs=["50-50"], seeds=[0, 1],
              rounds=2, clients_per_round=10, local_epochs=1, batch_size=16,
              client_learning_rate=1.0, server_learning_rate=1.0, client_optimizer="sgd",
              delta=1e-4, accountant="rdp", output_dir="unused", eval_every=1,
              checkpoint_every=1)
  base.update(kw)
  return common.TrainingConfig(**base)


def test_validate_uses_config_clipped_count_stddev():
  from experiments import common  # pylint: disable=g-import-not-at-top
  # σ ≈ 1.1 >= 2 · 0.05 · 10: the default falls back to σ_b = σ (issue 33), so it validates.
  common.validate(_config(), 100)
  common.validate(_config(clipped_count_stddev=0.6), 100)
  with pytest.raises(ValueError, match="σ_b=0.55"):
    common.validate(_config(clipped_count_stddev=0.55), 100)
  with pytest.raises(ValueError, match="finite number > 0"):
    common.validate(_config(clipped_count_stddev=-1.0), 100)
  with pytest.raises(ValueError, match="initial_clip"):
    common.validate(_config(clipped_count_stddev=0.6, initial_clip=0.0), 100)


def _row(run, accs, sigma=None, z=None, rates=(0.1, 0.1), sizes=(50, 50)):
  return dict(run=run, noise_multiplier=sigma, value_noise_multiplier=z,
              group_rates=list(rates), group_sizes=list(sizes),
              expected_clients_per_round=10.0, final_accuracies=accs,
              mean_accuracy=sum(accs) / len(accs), std_accuracy=0.01)


def test_table_shows_z_and_a_paired_comparison_per_neighbour():
  from experiments import common  # pylint: disable=g-import-not-at-top
  config = _config(runs=["nonprivate", "0-100", "50-50", "100-0", "scale"],
                   seeds=[0, 1, 2])
  results = [_row("nonprivate", [0.80, 0.81, 0.82]),
             _row("0-100", [0.70, 0.72, 0.71], 0.6, 0.7),
             _row("50-50", [0.69, 0.71, 0.72], 0.7, 0.9),
             _row("100-0", [0.60, 0.61, 0.63], 0.9, 1.4),
             _row("scale-50-50", [0.66, 0.70, 0.69], 0.6, 0.7)]
  common.add_paired_comparisons(results)
  refs = {r["run"]: (r["paired"] or {}).get("a") for r in results}
  assert refs == {"nonprivate": None, "0-100": "nonprivate", "50-50": "0-100",
                  "100-0": "50-50", "scale-50-50": "50-50"}
  assert results[1]["paired"]["separated"] and not results[2]["paired"]["separated"]
  table = common.format_table(config, results)
  assert "| σ | z_Δ |" in table
  assert "| 100-0 | 0.9000 | 1.4000 |" in table
  assert "| scale-50-50 | 0.6000 | 0.7000 |" in table and "vs 50-50: +" in table
  assert "n=3 seeds, df=2" in table and "paired t-test over seeds" in table
  lines = [l for l in table.splitlines() if l.startswith("| 0-100 ")]
  assert lines and lines[0].endswith("| yes |")
