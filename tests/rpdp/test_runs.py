"""rPDP-FL's run outputs: the released budget histogram (issue 31 item 5)."""
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
