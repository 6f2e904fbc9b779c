"""rPDP-FL's run outputs: the budget histogram (issue 31 item 5), release mode (issue 48 A)."""
import types

import numpy as np

from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.rpdp import runs


def test_budget_histogram_withholds_small_cells_and_uses_fixed_bins():
  """Cells below the minimum count are None; the edges never depend on the data.

  Bug caught: a histogram whose edges follow the budgets (min/max would
  reveal single records) or that releases a cell of 1-19 records.
  """
  budgets = np.concatenate([np.full(500, 0.5), np.full(480, 2.0), np.full(7, 9.0), [np.inf]])
  hist = runs.budget_histogram(budgets)
  assert hist["edges"] == list(runs.BUDGET_HISTOGRAM_EDGES)
  assert runs.budget_histogram(budgets * 1.01)["edges"] == hist["edges"]
  edges = np.asarray(hist["edges"])
  counts = hist["counts"]
  assert counts[int(np.searchsorted(edges, 0.5, side="right")) - 1] == 500
  assert counts[int(np.searchsorted(edges, 2.0, side="right")) - 1] == 480
  assert counts[int(np.searchsorted(edges, 9.0, side="right")) - 1] is None  # 7 < 20
  assert hist["unbounded"] is None and hist["below"] is None
  assert sum(c for c in counts if c is not None) == 980
  assert all(c is None or c >= hist["min_cell_count"] for c in counts)


def _plan(method, rates):
  return types.SimpleNamespace(method=method, rates={c: np.asarray(r) for c, r in rates.items()})


def test_a_method_drawing_under_one_record_per_step_is_warned_about(capsys):
  """Issue 34 item 3: on 4 hospitals Minimum drew 0.3-3 records per step and scored below
  the majority class, silently. Σ_j q_ij averaged over clients below 1 gets one line
  naming the setting to raise; at 1 or more, nothing is printed."""
  small = _plan("minimum", {"a": [0.01] * 30, "b": [0.02] * 20})  # 0.3 and 0.4 per step
  message = runs.warn_if_batch_below_one(small)
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and err.startswith("warning: minimum samples 0.35 records")
  assert message in err and "raise noise_multiplier" in err
  assert runs.warn_if_batch_below_one(_plan("ours", {"a": [0.05] * 20, "b": [0.5] * 2})) is None
  assert capsys.readouterr().err == ""
  runs.warn_if_batch_below_one(_plan("privacy_free", {"a": [0.1] * 5}))
  assert "raise privacy_free_batch" in capsys.readouterr().err
  # Issue 51: with the plan's parameters, the flags and their values now (a small silo).
  with_params = _plan("ours", {"a": [0.01] * 30})
  with_params.params = types.SimpleNamespace(noise_multiplier=2.0, rounds=30, local_steps=10)
  runs.warn_if_batch_below_one(with_params)
  err = capsys.readouterr().err
  assert "--noise_multiplier, now 2" in err and "--rounds, now 30" in err
  assert "--local_steps, now 10" in err and "docs/rpdp.md" in err


def test_the_table_names_its_training_settings_and_counts_seeds_grammatically(tmp_path):
  """The summary's table opens with the hyperparameters it trained with; "1 seed"."""
  config = dict(rounds=7, local_steps=3, client_rate=0.25, noise_multiplier=1.5,
                clip_norm=0.8, learning_rate=0.3, delta=1e-5, threat_model="type1")
  line = runs.training_line(config)
  for text in ("T=7", "τ=3", "λ=0.25", "σ=1.5", "L=0.8", "η=0.3", "δ=1e-05", "type1"):
    assert text in line, (text, line)
  row = {"method": "ours", "mean_accuracy": 0.5, "std_accuracy": 0.0,
         "mean_expected_batch": 2.0, "records_q0": 0, "excluded_at_end": 0,
         "mean_epsilon_spent": None, "calibration": {}}
  assert "(mean ± sd, 1 seed)" in runs.format_table([row], 1)
  assert "(mean ± sd, 3 seeds)" in runs.format_table([row], 3)


def _release_row(method="ours", calibration=None):
  return {"method": method, "label": method, "final_accuracies": [0.5], "mean_accuracy": 0.5,
          "std_accuracy": 0.0, "history": [[1, 0.5]],
          "calibration": calibration or {"method": method}}


def test_release_calibration_keeps_only_what_the_flags_fix():
  """Issue 48 A: the SCF fit, counts, ε_min and the record count are statistics of the
  records' budgets; Dropout's ε_mod is kept only when it comes from the specification."""
  from tff_idp.accounting.record import plan as record_plan  # pylint: disable=g-import-not-at-top
  ours = {"method": "ours", "records": 90, "distinct_budgets": 2, "r_squared": 0.99,
          "fit": {"a": 1.0}, "lowered_by_exact_check": 3, "excluded_q0": 0, "seconds": 0.1,
          "unused_budget": {"mean": 0.01}}
  assert runs.release_calibration(ours) == {"method": "ours"}
  assert runs.release_calibration({"method": "minimum", "epsilon_min": 0.5}) == {
      "method": "minimum"}
  spec = {"method": "dropout", "epsilon_mod": 1.25, "dropped_records": 40,
          "epsilon_mod_source": "the budget specification"}
  assert runs.release_calibration(spec) == {
      "method": "dropout", "epsilon_mod": 1.25,
      "epsilon_mod_source": "the budget specification"}
  from_records = dict(spec, epsilon_mod_source=record_plan.DROPOUT_CUTOFF_FROM_RECORDS)
  assert runs.release_calibration(from_records) == {"method": "dropout"}
  assert runs.release_calibration({"method": "privacy_free", "expected_batch": 64.0}) == {
      "method": "privacy_free", "expected_batch": 64.0}


def test_a_release_ledger_enforces_budgets_but_reports_no_column():
  """metrics.csv's ledger columns (records active, ε spent means) count the records and
  average their budgets: a release plan's ledger reports none, and charges as before."""
  from tff_idp.accounting.record import plan as record_plan  # pylint: disable=g-import-not-at-top
  from tff_idp.accounting.record import rdp_two_stage  # pylint: disable=g-import-not-at-top
  params = rdp_two_stage.TwoStageParams(2.0, 1, 2, 1.0, 1e-4, "type2")
  plan = record_plan.make_record_plan("ours", {"a": np.array([0.5, 2.0, 2.0])}, params, 1.0,
                                      estimator="exact")
  released = runs.release_plan(plan)
  assert isinstance(released, record_plan.RecordPlan) and released.rates is plan.rates
  ledger, reference = released.new_accountant(), plan.new_accountant()
  assert ledger.metric_names() == [] and ledger.metrics() == {}
  assert reference.metric_names() and reference.metrics()["records_active"] == 3
  for accountant in (ledger, reference):
    accountant.begin_round()
    accountant.end_round(["a"])
  np.testing.assert_array_equal(ledger.spent(), reference.spent())
  assert runs.release_plan(record_plan.make_record_plan(
      "privacy_free", {"a": np.ones(3)}, params, 1.0)).new_accountant() is None


def test_release_rows_give_a_release_table_and_summary(tmp_path):
  """Rows without budget statistics: the table has the accuracy only, summary.json no
  not-private label; rows with them: the statistics are labelled not private."""
  import json  # pylint: disable=g-import-not-at-top
  rows = [_release_row("ours"), _release_row("minimum")]
  assert runs.is_release(rows)
  table = runs.write_summary(rows, 1, str(tmp_path / "release"))
  assert "E[batch]" not in table and "Not private" not in table and "| ours |" in table
  summary = json.loads((tmp_path / "release" / "summary.json").read_text())
  assert summary["details"] == {}
  import importlib.util  # pylint: disable=g-import-not-at-top
  if importlib.util.find_spec("matplotlib"):  # optional: without it, no figure
    assert (tmp_path / "release" / "accuracy.png").stat().st_size > 0
  full = dict(_release_row("ours"), mean_expected_batch=2.0, records_q0=0, excluded_at_end=0,
              mean_epsilon_spent=0.4, mean_budget=0.8, budget_histogram=runs.budget_histogram(
                  np.full(30, 0.5)))
  assert not runs.is_release([full])
  table = runs.write_summary([full], 1, str(tmp_path / "full"))
  assert "E[batch]/step" in table and runs.NOT_PRIVATE_NOTE in table
  details = json.loads((tmp_path / "full" / "summary.json").read_text())["details"]
  assert set(runs.NOT_PRIVATE_FIELDS) <= set(details["not_private"]["fields"])
  # A row with only some of the statistics still gets the labelled table (dashes).
  assert "| — |" in runs.format_table([dict(_release_row(), mean_budget=0.8)], 1)


def test_the_line_before_training_names_the_settings_and_no_record_count_in_a_release():
  federation = types.SimpleNamespace(
      name="Synthetic IID, 2 silos × 2 users", test_y=np.zeros(7),
      records=types.SimpleNamespace(sizes={"silo_00": 30, "silo_01": 12}))
  params = TwoStageParams(2.0, 10, 30, 0.5, 1e-4, "type2")
  line = runs.federation_line(federation, "three_levels", params, 1.0, "dp_sgd", False)
  assert line == ("federation: Synthetic IID, 2 silos × 2 users: 42 records, 7 test; "
                  "three_levels; T=30, τ=10, λ=0.5, σ=2, L=1, δ=0.0001, type2, local: dp_sgd")
  release = runs.federation_line(federation, "three_levels", params, 1.0, "dp_sgd", True)
  assert "records" not in release and release.startswith("federation: Synthetic IID, 2 silos "
                                                           "× 2 users: 7 test; three_levels;")
