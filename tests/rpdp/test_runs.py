"""rPDP-FL's run outputs: the released budget histogram (issue 31 item 5)."""
import types

import numpy as np

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
