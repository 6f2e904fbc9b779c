"""INO-SGD's results table (issue 34 item 4): groups named by their classes, the seed count
in words, and INO − IDP per group with its 95% CI and p, checked against scipy."""
import json
import math

import numpy as np
import pytest
from scipy import stats

from tff_idp.engine import report
from tff_idp.ino_sgd import methods
from tff_idp.ino_sgd import runs

NAMES = ["0-4", "5-9"]


def _stat(values):
  v = np.asarray(values, float)
  return {"mean": float(np.mean(v)), "std": float(np.std(v, ddof=1)) if v.size > 1 else 0.0,
          "values": v.tolist()}


def _row(label, low, high, overall):
  worst = np.minimum(low, high)
  return {"label": label, "seeds": len(low), "accuracy": _stat(overall),
          "final_accuracies": list(overall), "mean_accuracy": _stat(overall)["mean"],
          "std_accuracy": _stat(overall)["std"],
          "group_accuracy": {"0-4": _stat(low), "5-9": _stat(high)},
          "group_recall": {"0-4": _stat(low), "5-9": _stat(high)},
          "worst_group_accuracy": _stat(worst), "imbalance": _stat(np.abs(np.subtract(high, low))),
          "records": 100, "rates": [0.01, 0.1], "thresholds": [1.0, 1.0],
          "noise_multiplier": 3.0, "achieved_epsilons": [0.1, 1.0], "gamma": 0.0,
          "history": [[1, overall[0]]]}


IDP_LOW, IDP_HIGH = [0.30, 0.34, 0.31, 0.36], [0.90, 0.91, 0.89, 0.90]
INO_LOW, INO_HIGH = [0.35, 0.36, 0.37, 0.38], [0.90, 0.90, 0.90, 0.91]
ROWS = [_row("IDP-SGD", IDP_LOW, IDP_HIGH, [0.60, 0.62, 0.60, 0.63]),
        _row("Drop 10%", [0.3] * 4, [0.8] * 4, [0.55] * 4),
        _row("INO-SGD", INO_LOW, INO_HIGH, [0.62, 0.63, 0.64, 0.65])]


def _scipy_cell(a, b):
  """The CI and one-sided p of a − b from scipy's paired t-test (not paired_stats)."""
  d = np.subtract(a, b)
  ci = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
  p = stats.ttest_rel(a, b, alternative="greater").pvalue
  p_text = "p<0.001" if p < 0.001 else f"p={p:.3f}"
  return f"{100 * d.mean():+.2f} [{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}], {p_text}", ci[0] > 0


def _line(text, first_cell):
  return next(l for l in text.splitlines() if l.startswith(f"| {first_cell} |"))


def test_paired_differences_per_group_match_scipy():
  text = runs.format_paired(ROWS, NAMES, [0.1, 1.0])
  for head, a, b in [("classes 0-4 (ε=0.1)", INO_LOW, IDP_LOW),
                     ("classes 5-9 (ε=1)", INO_HIGH, IDP_HIGH),
                     ("overall", ROWS[2]["accuracy"]["values"], ROWS[0]["accuracy"]["values"]),
                     ("worst group", ROWS[2]["worst_group_accuracy"]["values"],
                      ROWS[0]["worst_group_accuracy"]["values"])]:
    cell, above = _scipy_cell(a, b)
    line = _line(text, head)
    assert f"| {cell} |" in line, (line, cell)
    assert line.endswith("| yes |" if above else "| no |"), line
  assert "paired t-test over seeds" in text and "n = 4 seeds, df = 3" in text


def test_the_more_private_groups_gain_is_separated_and_the_other_is_not():
  pairs = {g: cmp for g, _, _, cmp in runs.paired_by_group(ROWS, NAMES)}
  assert pairs["0-4"].separated and not pairs["5-9"].separated
  assert pairs["0-4"].mean == pytest.approx(np.mean(np.subtract(INO_LOW, IDP_LOW)))
  assert pairs["0-4"].a == "INO-SGD" and pairs["0-4"].b == "IDP-SGD"


def test_one_seed_has_no_interval_and_the_heading_says_one_seed(tmp_path):
  rows = [_row("IDP-SGD", [0.3], [0.9], [0.6]), _row("INO-SGD", [0.35], [0.9], [0.62])]
  cfg = {"seeds": [0], "epsilons": [0.1, 1.0], "owner_names": NAMES, "delta": 1e-5,
         "insecure_reproducible_noise": False}
  body = runs.write_summary(rows, [], cfg, NAMES, str(tmp_path), title="t", data_name="d",
                            group_epsilons=[0.1, 1.0])
  assert "per-group test accuracy (1 seed)" in body and "1 seeds" not in body
  line = _line(body, "classes 0-4 (ε=0.1)")
  assert "+5.00 (n=1: no CI)" in line and line.endswith("| — |"), line
  assert "n = 1 seed, df = 0" in body
  paired = json.load(open(tmp_path / "summary.json"))["details"]["paired"]
  assert [p["group"] for p in paired] == ["0-4", "5-9", "overall", "worst group"]
  assert paired[0]["ci_low"] is None and paired[0]["mean"] == pytest.approx(0.05)


def test_several_seeds_are_plural(tmp_path):
  cfg = {"seeds": [0, 1, 2, 3], "epsilons": [0.1, 1.0], "owner_names": NAMES, "delta": 1e-5,
         "insecure_reproducible_noise": False}
  body = runs.write_summary(ROWS, [], cfg, NAMES, str(tmp_path), title="t", data_name="d",
                            group_epsilons=[0.1, 1.0])
  assert "per-group test accuracy (4 seeds)" in body
  assert "| method | overall acc (%) | acc classes 0-4 (ε=0.1) (%) |" in body
  assert "INO-SGD − IDP-SGD per group" in body


def test_no_paired_table_without_both_methods():
  assert runs.format_paired([ROWS[0], ROWS[1]], NAMES) is None


def test_a_group_without_test_records_gets_a_dash_not_a_crash():
  rows = [dict(r, group_accuracy=dict(r["group_accuracy"], **{"5-9": _stat([math.nan] * 4)}))
          for r in ROWS]
  line = _line(runs.format_paired(rows, NAMES), "classes 5-9")
  assert line.endswith("| — | — |"), line


def test_owners_by_class_are_named_by_their_classes():
  labels = np.arange(10).repeat(2)
  owners = methods.owners_by_class(labels, {c: (0.1 if c < 5 else 1.0) for c in range(10)})
  assert owners.names == ("0-4", "5-9") and owners.epsilons == (0.1, 1.0)
  assert owners.class_groups[7] == "5-9"
  mixed = methods.owners_by_class(labels, {0: 1.0, 2: 1.0, 1: 0.5, **{c: 2.0 for c in
                                                                      range(3, 10)}})
  assert mixed.names == ("class 1", "0,2", "3-9")
  assert methods.classes_name([9, 7, 8, 0, 1, 2, 5]) == "0-2,5,7-9"
  assert runs.group_heads(["class 1", "0,2"], [0.5, 1.0]) == ["class 1 (ε=0.5)",
                                                               "classes 0,2 (ε=1)"]


def test_counts_are_grammatical():
  assert [report.count(n, "seed") for n in (0, 1, 2, 5)] == [
      "0 seeds", "1 seed", "2 seeds", "5 seeds"]


def _release_rows():
  return [{k: v for k, v in r.items() if k not in runs.NOT_PRIVATE_FIELDS} for r in ROWS]


def test_release_mode_writes_no_plan_and_nothing_the_records_set(tmp_path):
  """Issue 48: budgets per record (no ``group_epsilons``) make the owners the budget
  levels the records hold; b from the default rule is a tenth of the records. A release
  holds neither, nor the plans, nor the record count in the data's name, nor the owners
  (here as a library caller passes them). Bug caught: any of them written."""
  cfg = {"seeds": [0, 1, 2, 3], "epsilons": [0.1, 0.7, 1.0], "owner_names": ["a", "b", "c"],
         "delta": 1e-5, "expected_batch": 8.9, "insecure_reproducible_noise": False,
         "release_only": True}
  body = runs.write_summary(_release_rows(), [], cfg, NAMES, str(tmp_path), title="t",
                            data_name="cifar10 (clients pooled, 89 records)",
                            details={"owners": {"eps=0.1": 0.1}, "budgets": "uniform"})
  summary = json.load(open(tmp_path / "summary.json"))
  assert not {"epsilons", "owner_names", "expected_batch"} & set(summary["config"])
  assert summary["details"]["data"] == "cifar10 (clients pooled)"
  assert "owners" not in summary["details"] and "not_private" not in summary["details"]
  assert summary["details"]["budgets"] == "uniform"
  text = (tmp_path / "summary.md").read_text()
  assert "records" not in text and "per owner: q / C" not in text and "Not private" not in text
  assert "holds none of them" in body


def test_release_mode_keeps_what_flags_fix(tmp_path):
  """Owners by class (``group_epsilons`` given: --class_budgets or a preset) and b from a
  flag are flags: a release keeps them."""
  cfg = {"seeds": [0], "epsilons": [0.1, 1.0], "owner_names": NAMES, "delta": 1e-5,
         "expected_batch": 60.0, "insecure_reproducible_noise": False, "release_only": True}
  runs.write_summary(_release_rows(), [], cfg, NAMES, str(tmp_path), title="t",
                     data_name="d", group_epsilons=[0.1, 1.0],
                     details={"owners": {"0-4": [0, 1, 2, 3, 4]}}, expected_batch_given=True)
  summary = json.load(open(tmp_path / "summary.json"))
  assert summary["config"]["epsilons"] == [0.1, 1.0]
  assert summary["config"]["expected_batch"] == 60.0
  assert summary["details"]["owners"] == {"0-4": [0, 1, 2, 3, 4]}


def test_outside_release_mode_the_plans_are_labelled_not_private(tmp_path):
  cfg = {"seeds": [0, 1, 2, 3], "epsilons": [0.1, 1.0], "owner_names": NAMES, "delta": 1e-5,
         "insecure_reproducible_noise": False}
  body = runs.write_summary(ROWS, [], cfg, NAMES, str(tmp_path), title="t", data_name="d",
                            group_epsilons=[0.1, 1.0])
  assert "per owner: q / C / ε spent" in body and runs.NOT_PRIVATE_NOTE in body
  details = json.load(open(tmp_path / "summary.json"))["details"]
  assert set(runs.NOT_PRIVATE_FIELDS) <= set(details["not_private"]["fields"])
  assert details["not_private"]["note"] == runs.NOT_PRIVATE_NOTE
