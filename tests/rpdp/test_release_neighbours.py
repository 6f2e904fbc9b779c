"""rPDP-FL's release reveals no record by differencing (issue 48 A).

Two ``experiments.rpdp --release_only`` runs on datasets that differ in one
record (N and N − 1 records, budgets by class, the same seeds and flags)
must write releases in which every field is identical, except the fields of
:data:`ALLOWED`: values the DP analysis covers. Before the fix, the release
held ``mean_budget`` (N·m − (N−1)·m′ is the removed record's budget, under
``by_class`` its label), ``mean_expected_batch``, the budget histogram (a
cell moves by one, or turns "withheld") and, in ``metrics.csv``, the record
ledger's counts and ε means. Bug caught: any of them, or any new
data-dependent statistic, back in ``summary.json``, ``summary.md``,
``metrics.csv`` or the printed lines.
"""
import csv
import json
import os
import re

import numpy as np
import pytest

import datasets
from tests import release_diff  # pylint: disable=g-bad-import-order
from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Fields allowed to differ between the two releases, each covered by the DP analysis:
ALLOWED = (
    # The released models' accuracy and loss on held-out test data (summary rows, the
    # per-round history, metrics.csv's eval_* columns, the table's accuracy column):
    # post-processing of models trained under every record's ε_ij (rPDP-FL Thm 1; under
    # Type II every round's global model is covered).
    r"results/\d+/(final_accuracies/\d+|mean_accuracy|std_accuracy|history/\d+/1)",
    r"metrics/eval_(loss|accuracy)",
    # The same evaluations per class group (the groups are --class_budgets, a flag):
    # accuracy, recall, the worst group's accuracy and name, the imbalance of the recalls.
    r"results/\d+/(group_accuracy|group_recall)/eps=[\d.]+",
    r"results/\d+/(worst_groups|final_worst_group_accuracies|final_imbalances)/\d+",
    r"results/\d+/(mean_worst_group_accuracy|mean_imbalance)",
    r"metrics/eval_(acc|recall)/eps=[\d.]+", r"metrics/eval_(worst_group_accuracy|imbalance)",
    r"table/(accuracy \(mean ± sd, 1 seed\)|accuracy per group \(mean\)|"
    r"worst group accuracy \(mean\)|imbalance \(sd of group recalls\))",
)
# No ε spent value is allowed: a release holds none (per record they are functions of
# the records' own budgets; the guarantee is each record's ε_ij, not a statistic).


def _release(out, proc, split, names):
  """Everything the release wrote, normalised for the paths the operator chose."""
  def norm(text):
    return text.replace(str(split), "<split>").replace(str(out), "<out>")
  summary = json.loads(norm((out / "summary.json").read_text()))
  files = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out)
                 for f in fs if "checkpoints" not in d and "tensorboard" not in d)
  metrics = {}
  for name in names:
    with open(out / name / "seed0" / "metrics.csv", newline="") as f:
      rows = list(csv.DictReader(f))
    metrics[name] = ({f"metrics/{k}#{i}": v for i, r in enumerate(rows) for k, v in r.items()},
                     list(rows[0]))
  printed = release_diff.table_cells(norm(proc.stdout).splitlines())
  written = release_diff.table_cells(norm((out / "summary.md").read_text()).splitlines())
  # Log lines without absl's time and thread prefix (e.g. "W1129 02:40:04.36 1399 ").
  logged = [re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ", "", line)
            for line in norm(proc.stderr).splitlines()]
  return summary, files, metrics, printed, written, logged


def _run(split, out):
  proc = forked_runs.run_module(
      "experiments.rpdp", [f"--dataset={split}", f"--output_dir={out}",
       "--release_only", "--insecure_reproducible_noise", "--distribution=by_class",
       "--class_budgets=0:0.5,1:2", "--methods=ours,minimum,dropout", "--rounds=1",
       "--local_steps=1", "--seeds=0", "--eval_every=1", "--client_rate=1",
       "--progress=false"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc


@pytest.mark.slow
def test_two_releases_differing_in_one_record_differ_only_in_covered_fields(tmp_path):
  rng = np.random.default_rng(0)
  n = 90
  x = rng.normal(size=(n + 30, 4))
  y = (x[:, 0] > 0).astype(np.int64)
  owner = np.array(["a", "b", "c"])[np.arange(n + 30) % 3]
  y[n - 1] = 1   # the record removed: a class-1 record (budget 2 under by_class)
  splits = {}
  for size in (n, n - 1):
    keep = np.arange(size)
    splits[size] = tmp_path / f"split{size}"
    datasets.from_arrays(x[keep], y[keep], partition="natural", groups=owner[keep],
                         test_x=x[n:], test_y=y[n:], seed=0).save(str(splits[size]))
  names = ("ours", "minimum", "dropout")
  releases = []
  for size in (n, n - 1):
    out = tmp_path / f"out{size}"
    proc = _run(splits[size], out)
    releases.append(_release(out, proc, splits[size], names))
  (sa, fa, ma, pa, wa, la), (sb, fb, mb, pb, wb, lb) = releases

  assert fa == fb and "summary.json" in fa and "accuracy.png" in fa
  assert not [f for f in fa if "diagnostics" in f or "record_plan" in f], fa
  bad = release_diff.differences(release_diff.flatten(sa), release_diff.flatten(sb),
                                 "summary.json", ALLOWED)
  for name in names:
    assert ma[name][1] == mb[name][1], (name, ma[name][1], mb[name][1])   # the columns
    bad += release_diff.differences(ma[name][0], mb[name][0], f"{name}/metrics.csv",
                                    ALLOWED)
  for (cells_a, lines_a), (cells_b, lines_b), what in ((pa, pb, "stdout"),
                                                       (wa, wb, "summary.md")):
    assert lines_a == lines_b, what
    bad += release_diff.differences(cells_a, cells_b, what, ALLOWED)
  assert not bad, "\n".join(bad)
  assert la == lb, "\n".join(set(la) ^ set(lb))   # stderr: warnings and logs
  for name in names:   # the record ledger's columns (counts, ε means) are not released
    assert not {"records_active", "records_excluded", "epsilon_spent_mean"} & set(ma[name][1])
  # The release is not empty: the accuracies are there and the rows are the methods.
  assert [r["method"] for r in sa["results"]] == list(names)
  assert all(0 <= r["mean_accuracy"] <= 1 for r in sa["results"])
