"""rPDP-FL on a small silo: the defaults against the setting docs/rpdp.md suggests (issue 51).

A newcomer's real silo was 4 clients × about 125 records with a binary
outcome; with the defaults (T = 30, τ = 10, λ = 0.5, σ = 2) ours did not
separate from Minimum or Dropout. This generates a federation of that shape
(4 clients × 125 train records, 10 features, a noisy logistic outcome, 500
test records; ``datasets.from_arrays``, i.i.d.) and runs rPDP-FL's methods
ours, minimum and dropout through ``tff_idp.run_rpdp`` (ThreeLevels budgets
0.1/1/5 at 70/20/10%, sigmoid head) under both settings with the same seeds:

* defaults: T = 30, τ = 10, λ = 0.5, σ = 2;
* suggested (docs/rpdp.md, "Small silos"): T = 15, τ = 10, λ = 1, σ = 12.25.

  python -m benchmarks.bench_small_silo [--seeds=5]

Prints each setting's table (mean ± sd of the final accuracy over the seeds)
and writes ``benchmarks/results/small_silo.json``.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

import numpy as np

from benchmarks import arguments

RESULTS = os.path.join(os.path.dirname(__file__), "results", "small_silo.json")
SETTINGS = {
    "defaults (T=30, τ=10, λ=0.5, σ=2)": {},
    "suggested (T=15, τ=10, λ=1, σ=12.25)": dict(rounds=15, local_steps=10, client_rate=1.0,
                                                 noise_multiplier=12.25),
}


def small_silo(seed: int = 0):
  """4 clients × 125 records, a binary outcome of 10 features (logistic, 10% label noise)."""
  import datasets  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  n = 4 * 125 + 500
  x = rng.normal(size=(n, 10)).astype(np.float32)
  w = rng.normal(size=10)
  y = (x @ w + rng.logistic(size=n) * 0.5 > 0).astype(np.int64)
  return datasets.from_arrays(x[:500], y[:500], partition="iid", num_clients=4,
                              test_x=x[500:], test_y=y[500:], seed=seed)


def main(seeds: int = 5) -> dict:
  import tff_idp  # pylint: disable=g-import-not-at-top
  split = small_silo()
  out: dict = {"seeds": seeds, "settings": {}}
  for name, setting in SETTINGS.items():
    with tempfile.TemporaryDirectory() as tmp:
      result = tff_idp.run_rpdp(split, output_dir=tmp, methods=("ours", "minimum", "dropout"),
                                seeds=list(range(seeds)), head="sigmoid", progress=False,
                                **setting)
    rows = {r["method"]: {"mean_accuracy": r["mean_accuracy"], "std_accuracy": r["std_accuracy"],
                          "final_accuracies": r["final_accuracies"]} for r in result.rows}
    out["settings"][name] = rows
    print(f"## {name}\n\n{result.table}\n", flush=True)
  os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
  with open(RESULTS, "w") as f:
    json.dump(out, f, indent=1)
  print(f"written to {RESULTS}")
  return out


if __name__ == "__main__":
  main(**arguments.parse(sys.argv[1:], "benchmarks.bench_small_silo", __doc__, ints=("seeds",)))
