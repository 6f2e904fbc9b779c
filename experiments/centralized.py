"""Centralized comparison of rPDP-FL §7.1: SCF vs BinarySearch vs Filter (Tables 2-3, Fig. 7).

One silo, every record with its own budget ε_i:

* **scf / binary_search / exact**: rPDP-SGD, i.e. DP-SGD whose mini-batches
  Poisson-sample record i at its own rate q_i (the expected batch is Σ q_i),
  with q_i from SCF (Alg. 2, re-checked exactly), the IDP-SGD BinarySearch
  baseline, or the exact inverse. Centralized DP-SGD is Lemma 4 without
  client sampling: ``TwoStageParams(σ, local_steps=steps, rounds=1,
  client_rate=1)``. All of them use the same σ and number of steps.
* **filter**: private full-batch GD with an individual Rényi filter
  (Feldman & Zrnic 2021, Alg. 3; :mod:`tff_idp.centralized.filter_gd`): every record
  takes part until its own RDP budget, derived from (ε_i, δ), is spent.

``--mode=compare`` prints a Table 2-style table (test accuracy, expected batch,
runtime per step, calibration runtime, unused budget) and Fig. 7's active
records of Filter; ``--mode=table3`` reproduces Table 3 (Group-3, Group-100,
Individual-1000 calibration runtimes and test accuracies of SCF vs
BinarySearch on a 1,000-record subset); ``--mode=both`` (default) does both:

  python -m experiments.centralized                     # both, embedded data
  python -m experiments.centralized --mode=compare --seeds=0,1,2
  python -m experiments.centralized --mode=table3 --table3_trials=5
  python -m experiments.centralized --dataset=fmnist --data_dir=~/.tff  # if present

The functions import TensorFlow lazily, so checking the flags (``main``
called directly, as the tests do) needs no TensorFlow. The default dataset
is embedded: the pooled train records of Synthetic IID
users (:mod:`datasets.synthetic`) with multinomial logistic regression.
``--dataset=fmnist`` pools the datasets/ FMNIST split (when its source files
are present) and uses the paper's two-layer CNN.
"""
from __future__ import annotations

import logging
import sys

from absl import flags
from absl import logging as absl_logging

from experiments import privacy_flags
from tff_idp import cli
from tff_idp.centralized import filter_gd  # its TensorFlow parts import TF lazily
from tff_idp.centralized import settings
from tff_idp.centralized.methods import METHODS
from tff_idp.centralized.silo import Silo
from tff_idp import preferences
from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL

MODES = settings.MODES

_MODE = flags.DEFINE_enum("mode", "both", list(MODES),
                          "compare: Table 2 + Fig. 7; table3: Table 3; both.")
_METHODS = flags.DEFINE_list("methods", ["scf", "binary_search", "filter"],
                             f"compare mode: methods among {', '.join(METHODS)}.")
_LEVELS = flags.DEFINE_list("levels", ["2.0", "4.7", "11.8"],
                            "ThreeLevels ε of the compare mode (Table 2: ≈2.0/4.7/11.8).")
_LEVEL_RATIOS = flags.DEFINE_list("level_ratios", ["0.7", "0.2", "0.1"],
                                  "Share of records at each level.")
_NOISE = flags.DEFINE_float("noise_multiplier", 1.0, "σ of rPDP-SGD (all DP-SGD methods).")
_STEPS = flags.DEFINE_integer("steps", 1000, "DP-SGD steps (the accounting's τ).")
_CLIP = flags.DEFINE_float("clip_norm", 1.0, "L: per-example clipping norm (all methods).")
_LR = flags.DEFINE_float("learning_rate", 2.0, "DP-SGD learning rate.")
_DELTA = flags.DEFINE_float("delta", 1e-5, "Target δ of every record.")
_FILTER_NOISE = flags.DEFINE_float(
    "filter_noise_multiplier", 0.0,
    "σ of Filter; 0 = the smallest σ with which the largest finite budget affords "
    "--filter_steps worst-case steps (smaller budgets are filtered earlier).")
_FILTER_STEPS = flags.DEFINE_integer("filter_steps", 0, "Filter's GD steps (0 = --steps).")
_FILTER_LR = flags.DEFINE_float("filter_learning_rate", 16.0,
                                "Filter's learning rate (its update is divided by n).")
_FILTER_ALPHA = flags.DEFINE_float(
    "filter_alpha", 0.0, "Filter's RDP order: 0 = per record, the order that affords the "
    "most worst-case steps for its ε; > 1 = one shared order.")
_FILTER_CHECK = flags.DEFINE_enum(
    "filter_check", "worst_case", list(filter_gd.CHECKS),
    "worst_case: drop a record that cannot afford one more worst-case step (one pass); "
    "actual: Alg. 3 as written, checks the step's actual norm (two passes).")
_DATASET = flags.DEFINE_enum("dataset", "synthetic", ["synthetic", "fmnist"],
                             "synthetic: embedded pooled Synthetic IID; fmnist: datasets/ split.")
_TRAIN = flags.DEFINE_integer("train_examples", 4000, "Records in the silo (0 = all).")
_TEST = flags.DEFINE_integer("test_examples", 2000, "Test examples (0 = all).")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "fmnist: source data directory.")
_SPLIT_DIR = flags.DEFINE_string("split_dir", None, "fmnist: built split directory.")
_DATA_SEED = flags.DEFINE_integer("data_seed", 0, "Seed of the data (and of subsets).")
_BUDGET_SEED = flags.DEFINE_integer("budget_seed", 0, "Seed of the budget assignment.")
_SEEDS = flags.DEFINE_list(
    "seeds", ["0", "1"], "Training seeds, averaged: each sets the model init (Table 3: each "
    "trial's index does); sampling and noise are secret and fresh.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 100, "Evaluate every k steps.")
_T3_EXAMPLES = flags.DEFINE_integer("table3_examples", 1000, "table3: records in the subset.")
_T3_TRIALS = flags.DEFINE_integer("table3_trials", 2,
                                  "table3: trials (budget draw + training seed) averaged.")
_T3_NOISE = flags.DEFINE_float("table3_noise_multiplier", 1.0, "table3: σ.")
_T3_STEPS = flags.DEFINE_integer("table3_steps", 300, "table3: DP-SGD steps.")
_T3_LR = flags.DEFINE_float("table3_learning_rate", 1.0, "table3: learning rate.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/centralized", "Where results go.")
privacy_flags.define(release_only=False)


def synthetic_silo(train_examples: int, test_examples: int, seed: int) -> Silo:
  """Pooled train records of Synthetic IID users; their test records are the test set."""
  from datasets import synthetic  # pylint: disable=g-import-not-at-top
  pooled = synthetic.pooled_arrays(train_examples, test_examples, seed)
  x, y, tx, ty, config = (pooled[k] for k in ("x", "y", "test_x", "test_y", "config"))
  nf, nc = config.num_features, config.num_classes

  def builder(init_seed: int):
    from tff_idp import models  # pylint: disable=g-import-not-at-top
    return models.build_logistic_regression(nf, nc, seed=init_seed)

  return Silo(x, y, tx, ty, builder, f"Synthetic IID (pooled, {len(y)} records)")


def fmnist_silo(train_examples: int, test_examples: int, seed: int, data_dir,
                split_dir) -> Silo:
  """The datasets/ FMNIST i.i.d. split, every writer pooled; the paper's two-layer CNN.

  Built from local source files when present (never downloaded); a random
  ``train_examples`` of the pooled records form the silo.
  """
  from datasets import specs  # pylint: disable=g-import-not-at-top
  from datasets import training_data  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  info = specs.info("fmnist")
  # The rPDP-FL CNN expects [0, 1] inputs: rescale the stored pixels here.
  x, y, tx, ty = training_data.pooled_records(
      "fmnist", seed, data_dir, split_dir, train_examples, test_examples, info.rescale)
  shape = tuple(info.input_shape)
  return Silo(x, y, tx, ty,
              lambda s: models.build_rpdp_mnist_cnn(shape, info.num_classes, seed=s),
              f"FMNIST (i.i.d. split, writers pooled, {len(y)} records)")


def parse_config() -> dict:
  """All flags, checked (:func:`tff_idp.centralized.settings.checked`); ValueError with advice."""
  values = {h.name: h.value for h in globals().values() if isinstance(h, flags.FlagHolder)}
  cfg = settings.checked(dict(values, insecure_reproducible_noise=privacy_flags.insecure()))
  if _DATASET.value == "synthetic":  # issue 33: these were ignored silently
    cli.refuse_inapplicable(("data_dir", "split_dir"), "they locate FMNIST's files, and "
                            "--dataset=synthetic is generated")
  return cfg


@cli.entry
def main(argv):
  del argv
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  try:
    cfg = parse_config()
    if _DATASET.value == "synthetic":
      silo = synthetic_silo(_TRAIN.value, _TEST.value, _DATA_SEED.value)
    else:
      silo = fmnist_silo(_TRAIN.value, _TEST.value, _DATA_SEED.value, _DATA_DIR.value,
                         _SPLIT_DIR.value)
    settings.check_silo(cfg, len(silo.y))
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  privacy_flags.announce()
  warning = NOT_PRIVATE_LABEL if cfg["insecure_reproducible_noise"] else None
  out_dir = cli.prepare_output_dir(_OUTPUT_DIR.value)
  budgets = preferences.assign_record_budgets(cfg["distribution"], [len(silo.y)],
                                              cfg["budget_seed"])["0"]
  print(f"silo: {silo.name}, {len(silo.test_y)} test; δ={cfg['delta']:g}, "
        f"L={cfg['clip_norm']:g}")
  # TensorFlow loads here, once the flags and the data are known to be valid.
  from tff_idp.centralized import runs  # pylint: disable=g-import-not-at-top
  config = {h.name: h.value for h in globals().values() if isinstance(h, flags.FlagHolder)}
  body = runs.run_experiment(silo, budgets, cfg, out_dir, config, warning)
  print()
  print(body)
  print(f"\nsummary.md/json and centralized.png in {out_dir}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check=parse_config)
