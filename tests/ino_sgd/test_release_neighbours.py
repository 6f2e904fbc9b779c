"""INO-SGD's release reveals no record by differencing (issue 48).

Two ``experiments.ino_sgd --release_only`` runs on datasets that differ in
one record (N and N − 1 records, owners by class, the same seeds and flags)
must write releases in which every field is identical, except the fields of
:data:`ALLOWED`: values the DP analysis covers. Before the fix, the release
held each row's ``records`` (N − (N−1) = 1 record, and Drop's count moves
with the owner's), the plan's ``owner_sizes`` (the removed record's owner,
i.e. under budgets by class its label) and ``expected_batch``, the rates,
z and the achieved ε computed from them, INO-SGD's γ, the per-run plans of
``details.runs``, the record count in ``details.data`` and the printed
line, and the expected batch a tenth of the records set. Bug caught: any of
them, or any new data-dependent statistic, back in ``summary.json``,
``summary.md``, ``metrics.csv`` or the printed lines.
"""
import csv
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import datasets
from tests import release_diff  # pylint: disable=g-bad-import-order

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_STAT = r"(mean|std|values/\d+)"
_GROUP = r"class \d"
# Fields allowed to differ between the two releases, each covered by the DP analysis:
ALLOWED = (
    # The released models' accuracy, recall, worst group and imbalance on held-out test
    # data (the rows' statistics over seeds, the per-step history, the per-run final
    # report, metrics.csv, the tables' accuracy cells): post-processing of models trained
    # under every owner's (ε_n, δ) (INO-SGD Thm 3.3). The groups are --class_budgets's.
    rf"results/\d+/(accuracy|worst_group_accuracy|imbalance)/{_STAT}",
    rf"results/\d+/(group_accuracy|group_recall)/{_GROUP}/{_STAT}",
    r"results/\d+/(final_accuracies/\d+|mean_accuracy|std_accuracy|history/\d+/1)",
    rf"details/runs/\d+/final/(overall_accuracy|imbalance|(accuracy|recall)/{_GROUP})",
    r"details/runs/\d+/final/worst_group/(name|accuracy)",
    # The paired comparison of those accuracies (INO-SGD − IDP-SGD, per group).
    r"details/paired/\d+/(mean|sd|ci_low|ci_high|p_value|separated)",
    rf"metrics/(accuracy|worst_group_accuracy|imbalance|(acc|recall)/{_GROUP})",
    r"table/(overall acc \(%\)|acc class \d \(ε=[\d.]+\) \(%\)|worst group \(%\)|"
    r"imbalance \(std of recalls, %\)|IDP-SGD acc \(%\)|INO-SGD acc \(%\)|"
    r"INO − IDP \(points, 95% CI, one-sided p\)|INO better)",
)
# No plan value is allowed: a release holds none (they are functions of the owners'
# record counts; the guarantee is each owner's (ε_n, δ), a flag).
# INO-SGD alone: every method's row, run record and plan come from the same code
# (IDP-SGD's are INO-SGD's with γ = 0, Drop's those of fewer records), and each method
# costs a TensorFlow trace of its own.
NAMES = ("ino-sgd",)


def _release(out, stdout, stderr, split):
  """Everything the release wrote, normalised for the paths the operator chose."""
  def norm(text):
    return text.replace(str(split), "<split>").replace(str(out), "<out>")
  summary = json.loads(norm((out / "summary.json").read_text()))
  files = sorted(os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out)
                 for f in fs if "tensorboard" not in d)
  metrics = {}
  for name in NAMES:
    with open(out / name / "seed0" / "metrics.csv", newline="") as f:
      rows = list(csv.DictReader(f))
    metrics[name] = ({f"metrics/{k}#{i}": v for i, r in enumerate(rows) for k, v in r.items()},
                     list(rows[0]))
  printed = release_diff.table_cells(norm(stdout).splitlines())
  written = release_diff.table_cells(norm((out / "summary.md").read_text()).splitlines())
  # Log lines without absl's time and thread prefix (e.g. "W1129 02:40:04.36 1399 ").
  logged = [re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ ", "", line)
            for line in norm(stderr).splitlines()]
  return summary, files, metrics, printed, written, logged


def _start(split, out):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
  # No --expected_batch: b is then a tenth of the records, which a release must not show.
  return subprocess.Popen(
      [sys.executable, "-m", "experiments.ino_sgd", f"--dataset={split}",
       f"--output_dir={out}", "--release_only", "--insecure_reproducible_noise",
       "--class_budgets=0:0.5,1:2", "--methods=ino_sgd",
       "--steps=2", "--eval_every=1", "--seeds=0", "--noprogress"],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
      stdin=subprocess.DEVNULL)


@pytest.mark.slow
def test_two_releases_differing_in_one_record_differ_only_in_covered_fields(tmp_path):
  rng = np.random.default_rng(0)
  n = 90
  x = rng.normal(size=(n + 30, 4))
  y = (x[:, 0] > 0).astype(np.int64)
  owner = np.array(["a", "b", "c"])[np.arange(n + 30) % 3]
  y[n - 1] = 1   # the record removed: a class-1 record (owner "1", ε = 2)
  splits = {}
  for size in (n, n - 1):
    keep = np.arange(size)
    splits[size] = tmp_path / f"split{size}"
    datasets.from_arrays(x[keep], y[keep], partition="natural", groups=owner[keep],
                         test_x=x[n:], test_y=y[n:], seed=0).save(str(splits[size]))
  # Both releases at once (two processes): each is mostly TensorFlow's import.
  procs = {size: _start(splits[size], tmp_path / f"out{size}") for size in (n, n - 1)}
  releases = []
  for size, proc in procs.items():
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    releases.append(_release(tmp_path / f"out{size}", stdout, stderr, splits[size]))
  (sa, fa, ma, pa, wa, la), (sb, fb, mb, pb, wb, lb) = releases

  assert fa == fb and "summary.json" in fa and "per_group.png" in fa
  assert not [f for f in fa if "diagnostics" in f], fa
  bad = release_diff.differences(release_diff.flatten(sa), release_diff.flatten(sb),
                                 "summary.json", ALLOWED)
  for name in NAMES:
    assert ma[name][1] == mb[name][1], (name, ma[name][1], mb[name][1])   # the columns
    bad += release_diff.differences(ma[name][0], mb[name][0], f"{name}/metrics.csv",
                                    ALLOWED)
  for (cells_a, lines_a), (cells_b, lines_b), what in ((pa, pb, "stdout"),
                                                       (wa, wb, "summary.md")):
    assert lines_a == lines_b, (what, "\n".join(set(lines_a) ^ set(lines_b)))
    bad += release_diff.differences(cells_a, cells_b, what, ALLOWED)
  assert not bad, "\n".join(bad)
  assert la == lb, "\n".join(set(la) ^ set(lb))   # stderr: warnings and logs
  # No plan value at all, not even where the two releases happen to agree.
  for row in sa["results"]:
    assert not {"records", "rates", "thresholds", "noise_multiplier", "achieved_epsilons",
                "gamma"} & set(row), row.keys()
  assert all("plan" not in r and "gamma" not in r for r in sa["details"]["runs"])
  assert "expected_batch" not in sa["config"] and "not_private" not in sa["details"]
  assert not re.search(r"\d+ records", sa["details"]["data"] + "".join(pa[1]))
  # The release is not empty: the accuracies are there and the rows are the methods.
  assert [r["label"] for r in sa["results"]] == ["INO-SGD"]
  assert all(0 <= r["mean_accuracy"] <= 1 for r in sa["results"])
  assert sa["config"]["epsilons"] == [0.5, 2.0]   # owners by class: --class_budgets
