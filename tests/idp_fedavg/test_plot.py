"""The main job's picture: mean over seeds with a 95% band, and the paired comparisons."""
import math

import numpy as np
import pytest
from scipy import stats

from tff_idp.idp_fedavg import runs


def test_mean_band_is_the_t_interval_over_seeds():
  histories = [[[2, 0.5], [4, 0.6]], [[2, 0.7], [4, 0.8]], [[2, 0.6], [4, 0.7], [6, 0.9]]]
  rounds, mean, half = runs.mean_band(histories)
  np.testing.assert_array_equal(rounds, [2, 4])  # only rounds every seed evaluated
  np.testing.assert_allclose(mean, [0.6, 0.7])
  want = stats.t.ppf(0.975, 2) * np.std([0.5, 0.7, 0.6], ddof=1) / math.sqrt(3)
  np.testing.assert_allclose(half, [want, want])
  _, _, single = runs.mean_band([[[1, 0.3]]])
  assert single.tolist() == [0.0]


def test_plot_draws_both_panels(tmp_path):
  rng = np.random.default_rng(0)
  results = []
  for k, run in enumerate(["nonprivate", "0-0-100", "100-0-0"]):
    hist = [[[r, 0.8 - 0.1 * k + 0.01 * r + 0.01 * rng.normal()] for r in (2, 4, 6)]
            for _ in range(4)]
    results.append({"run": run, "history": hist[0], "history_by_seed": hist,
                    "final_accuracies": [h[-1][1] for h in hist]})
  runs.add_paired_comparisons(results)
  path = tmp_path / "accuracy.png"
  runs.plot_accuracy(results, str(path), warning="NOT PRIVATE")
  assert path.stat().st_size > 10_000
  assert results[1]["paired"]["separated"]
