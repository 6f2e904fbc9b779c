"""The main job's outputs under the audit's seed and diagnostics policy (D2, D3), end to end.

Four tiny runs of ``experiments.idp_fedavg`` with the same ``--seeds``: two
default (secret randomness; the second also ``--release_only``) and two with
``--insecure_reproducible_noise``. The first also runs SCALE, so the secrecy scan
covers both calibrations; the other three run the 50-50 distribution the tests
compare (each distribution costs ~8 s of tracing and training).
"""
import json
import os

import pytest

from tests import secret_scan
from tests import forked_runs
from tff_idp.engine.metrics import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--num_clients=120", "--clients_per_round=12", "--rounds=2", "--seeds=0",
        "--budgets=4,8", "--ratios=0.5,0.5", "--eval_every=1",
        "--checkpoint_every=1", "--progress=false"]
RUN = os.path.join("50-50", "seed0")


def _run(out, *extra):
  proc = forked_runs.run_module("experiments.idp_fedavg", [f"--output_dir={out}", *ARGS, *extra])
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  base = tmp_path_factory.mktemp("privacy_outputs")
  out = {}
  for name, extra in [("secret_a", ["--runs=50-50,scale"]),
                      ("secret_b", ["--runs=50-50", "--release_only"]),
                      ("debug_a", ["--runs=50-50", "--insecure_reproducible_noise"]),
                      ("debug_b", ["--runs=50-50", "--insecure_reproducible_noise"])]:
    out[name] = (base / name, _run(base / name, *extra))
  return out


def _column(out_dir, name, file="metrics.csv"):
  return [r[name] for r in read_metrics(out_dir / RUN / file)]


@pytest.mark.slow
def test_same_seeds_draw_different_noise_by_default(runs):
  a, b = runs["secret_a"][0], runs["secret_b"][0]
  # The noised clip-bit fraction carries fresh noise every round.
  assert _column(a, "unclipped_fraction") != _column(b, "unclipped_fraction")
  assert _column(a, "eval_loss") != _column(b, "eval_loss")


@pytest.mark.slow
def test_insecure_flag_reproduces_noise_and_sampling_and_labels_everything(runs):
  (a, proc_a), (b, _) = runs["debug_a"], runs["debug_b"]
  for column in ("unclipped_fraction", "eval_loss", "clip"):
    assert _column(a, column) == _column(b, column)
  assert (_column(a, "clients_sampled", "diagnostics.csv")
          == _column(b, "clients_sampled", "diagnostics.csv"))
  label = "NOT PRIVATE: noise derivable from seed"
  assert label in proc_a.stderr and label in proc_a.stdout
  assert json.load(open(a / "summary.json"))["privacy_warning"] == label
  assert label in (a / "summary.md").read_text()
  for file in ("metrics.csv", "diagnostics.csv"):
    assert all(r["privacy_warning"] == label for r in read_metrics(a / RUN / file))


@pytest.mark.slow
def test_no_seed_material_in_any_output_or_console(runs):
  assert (runs["secret_a"][0] / "scale-50-50" / "seed0" / "metrics.csv").exists()
  for name in ("secret_a", "secret_b"):
    out, proc = runs[name]
    secret_scan.assert_no_secret_outside_checkpoints(out, proc.stdout, proc.stderr)
    summary = (out / "summary.json").read_text()
    assert "noise_seed" not in summary and "NOT PRIVATE" not in summary
    assert "NOT PRIVATE" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_release_only_writes_no_diagnostics(runs):
  a, b = runs["secret_a"][0], runs["secret_b"][0]
  assert (a / RUN / "diagnostics.csv").exists()
  assert not list(b.rglob("diagnostics.csv"))
  assert not list(b.rglob("tensorboard/diagnostics"))
  release_columns = set(read_metrics(b / RUN / "metrics.csv")[0])
  assert not {"clients_sampled", "train_loss", "num_clients", "seconds"} & release_columns
