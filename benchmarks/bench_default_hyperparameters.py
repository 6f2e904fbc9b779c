"""How IDP-FedAvg's training defaults were checked: a small non-private sweep (issue 34 item 3).

The defaults (``tff_idp.idp_fedavg.config.TRAINING_DEFAULTS``: 5 local epochs,
batch 16, client SGD lr 0.6, server lr 1.0, 20 rounds of 10 expected clients)
are shared by ``experiments.idp_fedavg`` and ``tff_idp.run_idp_fedavg``. This
sweep trains the non-private run of ``run_idp_fedavg`` with the defaults and
with each neighbour (local epochs 1 / 5 / 10, batch 8 / 16 / 32, lr 0.1 / 0.6 /
1.0; one setting changed at a time) on data the project can generate or ship:

* ``readme``: the README's own-data example (300 phones, 8 features, a
  linear label, ``partition="dirichlet"``, α = 0.5, sigmoid head);
* ``digits``: scikit-learn's 8×8 handwritten digits (1,797 images, 10
  classes) as 300 clients (``partition="dirichlet"``, α = 0.5; a random
  quarter held out), if scikit-learn is installed.

It prints final test accuracy (mean over ``--seeds``) per setting and marks
the default; the table in docs/idp_fedavg.md ("How the training defaults were
chosen") is its output:

  .venv/bin/python -m benchmarks.bench_default_hyperparameters [--seeds=0,1]

Results also go to ``benchmarks/results/default_hyperparameters.json``.
"""
from __future__ import annotations

import json
import os
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
# Imported before absl's app.run (see tff_idp.cli.launch): imported inside it, every
# Keras Sequential model fails with "Output tensors of a Sequential model must be ...".
import tensorflow  # noqa: F401  pylint: disable=unused-import

_SEEDS = flags.DEFINE_list("seeds", ["0", "1"], "Training seeds (accuracy is averaged).")
_OUT = flags.DEFINE_string("out", os.path.join(os.path.dirname(__file__), "results",
                                               "default_hyperparameters.json"), "Result file.")

# One setting changed at a time around the defaults.
NEIGHBOURS = {"local_epochs": (1, 10), "batch_size": (8, 32),
              "client_learning_rate": (0.1, 1.0)}


def readme_split():
  """The README's own-data IDP-FedAvg example (same arrays and partition)."""
  import datasets  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.normal(size=(6000, 8))
  y = (x[:, 0] - x[:, 2] > 0).astype(int)
  return datasets.from_arrays(x[:5000], y[:5000], partition="dirichlet", num_clients=300,
                              alpha=0.5, test_x=x[5000:], test_y=y[5000:]), "sigmoid"


def digits_split():
  """scikit-learn's real 8×8 digits as 300 clients (None without scikit-learn)."""
  try:
    from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None, None
  import datasets  # pylint: disable=g-import-not-at-top
  x, y = load_digits(return_X_y=True)
  x = (x / 16.0).astype(np.float32)
  order = np.random.default_rng(0).permutation(len(y))
  test, train = order[:450], order[450:]
  return datasets.from_arrays(x[train], y[train], partition="dirichlet", num_clients=300,
                              alpha=0.5, test_x=x[test], test_y=y[test]), "softmax"


def settings() -> list[tuple[str, dict]]:
  """("default", {}) and one (label, override) per neighbour."""
  out = [("default", {})]
  for name, values in NEIGHBOURS.items():
    out += [(f"{name}={v:g}", {name: v}) for v in values]
  return out


def main(argv) -> int:
  del argv
  import tff_idp  # pylint: disable=g-import-not-at-top
  from tff_idp.idp_fedavg.config import TRAINING_DEFAULTS  # pylint: disable=g-import-not-at-top
  seeds = [int(s) for s in _SEEDS.value]
  print(f"load average {os.getloadavg()[0]:.2f}; defaults: "
        + ", ".join(f"{k}={TRAINING_DEFAULTS[k]}" for k in (
            "rounds", "clients_per_round", "local_epochs", "batch_size",
            "client_learning_rate", "server_learning_rate")), flush=True)
  results: dict = {"seeds": seeds, "defaults": {k: TRAINING_DEFAULTS[k] for k in (
      "rounds", "clients_per_round", "local_epochs", "batch_size", "client_learning_rate",
      "server_learning_rate")}, "datasets": {}}
  for name, make in (("readme", readme_split), ("digits", digits_split)):
    split, head = make()
    if split is None:
      print(f"{name}: skipped (scikit-learn is not installed)")
      continue
    rows = {}
    for label, override in settings():
      start = time.monotonic()
      with tempfile.TemporaryDirectory() as tmp:
        result = tff_idp.run_idp_fedavg(split, output_dir=tmp, runs=["nonprivate"],
                                        seeds=seeds, head=head, progress=False, **override)
      accuracy = 100 * result.rows[0]["mean_accuracy"]
      rows[label] = accuracy
      print(f"{name:7s} {label:26s} {accuracy:6.2f}%  ({time.monotonic() - start:.0f} s)",
            flush=True)
    results["datasets"][name] = rows
  print("\n| setting | " + " | ".join(results["datasets"]) + " |")
  print("|---|" + "---:|" * len(results["datasets"]))
  for label, _ in settings():
    print(f"| {label} | " + " | ".join(f"{rows[label]:.1f}"
                                        for rows in results["datasets"].values()) + " |")
  os.makedirs(os.path.dirname(_OUT.value), exist_ok=True)
  with open(_OUT.value, "w") as f:
    json.dump(results, f, indent=1)
  print(f"\nwritten to {_OUT.value}")
  return 0


if __name__ == "__main__":
  app.run(main)
