"""INO-SGD vs IDP-SGD vs "Drop x%": utility imbalance under individualized DP (INO-SGD paper).

Data owners hold classes and set budgets; IDP-SGD (SAMPLE or SCALE) meets
every budget, INO-SGD (Alg. 1) adds importance weights ρ to the clipped
gradients, "Drop x%" (Table 3) removes x% of the less private owners'
records. Per method and seed: the overall accuracy, per owner group the
accuracy and recall, the worst group and the imbalance (D.4.3):

  python -m experiments.ino_sgd                       # embedded default, about 1 min
  python -m experiments.ino_sgd --seeds=0,1,2,3,4 --drop_percents=10,20,30,40,50
  python -m experiments.ino_sgd --preset=mn --data_dir=~/.tff   # needs EMNIST files
  python -m experiments.ino_sgd --preset=cm --data_dir=~/.tff   # needs CIFAR-10 files
  python -m experiments.ino_sgd --preset=cl --data_dir=~/.tff

Presets (``--preset``, :data:`tff_idp.ino_sgd.defaults.PRESETS`; explicit flags
override them): ``embedded`` (default, no network: the MN setting on pooled
Synthetic IID records, owner "0-4" at ε = 0.1 and "5-9" at ε = 1, the
defaults ``tff_idp.run_ino_sgd`` shares), ``mn`` (EMNIST digits, PC-MNIST),
``cm`` / ``cl`` (CIFAR-10, ten one-class owners, SCALE, ε = linspace(0.5, 5)
/ linspace(6, 15), PC-CIFAR). docs/ino_sgd.md has their values, the outputs
in ``--output_dir`` and what ``--release_only`` leaves out (issue 48).
"""
from __future__ import annotations

import logging
import sys

from absl import flags
from absl import logging as absl_logging

from experiments import privacy_flags
from experiments import silos
from tff_idp import cli
from tff_idp import model_catalog
from tff_idp import preferences
from tff_idp.accounting.owner import plan as owner_plan
from tff_idp.ino_sgd import config as ino_config
from tff_idp.ino_sgd import defaults as ino_defaults
from tff_idp.ino_sgd import methods as ino_methods

D = ino_defaults.DEFAULTS  # shared with tff_idp.run_ino_sgd (one source, issue 34)

_PRESET = flags.DEFINE_enum("preset", "embedded", list(ino_defaults.PRESETS),
                            "The setting (module doc).")
_METHODS = flags.DEFINE_list("methods", list(D["methods"]),
                             "Among idp_sgd, drop (one run per --drop_percents), ino_sgd.")
_DROP = flags.DEFINE_list("drop_percents", [f"{p:g}" for p in D["drop_percents"]],
                          "Drop x%: percentages of the less private owners' records removed.")
_SEEDS = flags.DEFINE_list(
    "seeds", [str(s) for s in D["seeds"]],
    "Repeats, averaged (the paper uses 5): each seed sets the model init; sampling and "
    "noise are secret and fresh (derived from the seed only with "
    "--insecure_reproducible_noise).")
_STEPS = flags.DEFINE_integer("steps", None, "T (default: the preset's).")
_BATCH = flags.DEFINE_float(
    "expected_batch", None,
    "b = Σ_n q_n|D_n|, the expected batch (default: the preset's; embedded and --dataset: a "
    "tenth of the records, at most 1,000).")
_LR = flags.DEFINE_float("learning_rate", None, "SGD η (default: the preset's).")
_CLIP = flags.DEFINE_float("clip_norm", None, "C, the largest clip threshold (preset's).")
_MECHANISM = flags.DEFINE_enum("mechanism", None, list(owner_plan.MECHANISMS),
                               "sample (per-owner q) or scale (per-owner C); preset's.")
_EPSILONS = flags.DEFINE_list("epsilons", None, "One ε per owner (default: the preset's).")
_DELTA = flags.DEFINE_float("delta", D["delta"],
                            "δ of every owner (the INO-SGD paper's 1e-5; the other families: "
                            "1e-4).")
_GAMMA = flags.DEFINE_float(
    "ino_gamma_ratio", None,
    "INO-SGD tail length γ as a fraction of the expected Σ_d q_d C_d of a batch (the "
    "paper's guidance is ≤ 0.5, D.4.2); 0 = IDP-SGD. Default: the preset's.")
_ALPHA = flags.DEFINE_float("ino_alpha", None, "Beta(α, β) tail function α (preset's).")
_BETA = flags.DEFINE_float("ino_beta", None, "Beta(α, β) tail function β (preset's).")
_TRAIN = flags.DEFINE_integer("train_examples", None,
                              "Records in the silo (0 = all; default: the preset's, with "
                              "--dataset all).")
_TEST = flags.DEFINE_integer("test_examples", None,
                             "Test examples (0 = all; default: the preset's, with --dataset all).")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", D["eval_every"],
                                   "Evaluate every k steps (0 = only at the end).")
_DATA_SEED = flags.DEFINE_integer("data_seed", D["data_seed"],
                                  "Seed of the data and of Drop's choice.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "mn/cm/cl: source data directory.")
_SPLIT_DIR = flags.DEFINE_string("split_dir", None, "mn/cm/cl: built split directory.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/ino_sgd", "Where results go.")
_PROGRESS = flags.DEFINE_bool("progress", D["progress"], "Show progress bars.")
_DATASET = flags.DEFINE_string(
    "dataset", None,
    "Your own data instead of the preset's: a split directory (datasets.from_arrays(...)"
    ".save(dir)), fmnist | cifar10 | svhn or tfds:<name>; every client's records are pooled "
    "into one silo. The preset still gives the hyperparameters.")
_MODEL = flags.DEFINE_enum("model", D["model"], list(model_catalog.MODELS),
                           "--dataset: the model (auto: logreg for features, cnn for images).")
_CLASS_BUDGETS = flags.DEFINE_list(
    "class_budgets", None,
    "Owners by class: ε per class as <class>:<ε> or <first>-<last>:<ε> items covering every "
    "class once, e.g. 0-4:0.1,5-9:1; classes of equal ε form one owner. Replaces the "
    "preset's owners and --epsilons.")
_RECORD_DISTRIBUTION = flags.DEFINE_enum(
    "record_distribution", None, sorted(preferences.DISTRIBUTIONS),
    "Budgets per record instead, drawn from this distribution (tff_idp.preferences, seeded "
    "by --budget_seed); records of equal ε form one owner and the table reports each class.")
_BUDGET_SEED = flags.DEFINE_integer("budget_seed", D["budget_seed"],
                                    "--record_distribution: draw seed.")
privacy_flags.define(release_only=True)


def parse_config() -> dict:
  """Preset values overridden by explicit flags, all checked (ValueError with advice)."""
  given = cli.values(ino_config.SETTINGS)  # privacy_flags' too
  return ino_config.resolve(_PRESET.value, given, own_data=bool(_DATASET.value))


def check() -> dict:
  """Every flag check that needs no data (``cli.launch`` runs them before TensorFlow)."""
  cfg = parse_config()
  _check_owner_flags(cfg)
  ino_config.check_batch(cfg)
  return cfg


def _check_owner_flags(cfg: dict) -> None:
  """The budget and data flags must fit together (ValueError saying what to drop)."""
  ino_config.check_owner_settings(_CLASS_BUDGETS.value, _RECORD_DISTRIBUTION.value,
                                  epsilons_given=flags.FLAGS["epsilons"].present)
  if not _RECORD_DISTRIBUTION.value:
    cli.refuse_inapplicable(("budget_seed",), "it seeds --record_distribution's draw")
  if not _DATASET.value:
    cli.refuse_inapplicable(("model",), "it chooses the model for --dataset; the presets "
                            "fix theirs")
    if ino_defaults.PRESETS[cfg["preset"]].dataset == "synthetic":
      cli.refuse_inapplicable(
          ("data_dir", "split_dir"),
          f"--preset={cfg['preset']} uses the embedded data, and only the mn/cm/cl presets "
          "and --dataset read source files or a built split")
    ino_config.class_budgets(_CLASS_BUDGETS.value, 10)  # every preset's data has ten classes


def _data_and_owners(preset: ino_defaults.Preset, cfg: dict):
  """The silo (the preset's data or --dataset) and its owners (the preset's, or from flags)."""
  _check_owner_flags(cfg)
  data, num_classes = silos.ino_sgd_silo(preset, _DATASET.value, _MODEL.value, cfg,
                                         _DATA_DIR.value, _SPLIT_DIR.value)
  if _CLASS_BUDGETS.value:
    return data, ino_methods.owners_by_class(
        data.y, ino_config.class_budgets(_CLASS_BUDGETS.value, num_classes))
  if _RECORD_DISTRIBUTION.value:
    return data, ino_config.owners_by_drawn_budgets(data.y, _RECORD_DISTRIBUTION.value,
                                                    _BUDGET_SEED.value, num_classes)
  return data, ino_methods.owners_of_classes(data.y, preset.owners, cfg["epsilons"])


@cli.entry(rules={"eval_every": cli.Rule(
    "int", low=0, meaning="steps between evaluations (0 = at the end only)")})
def main(argv):
  del argv
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  try:
    cfg = parse_config()
    preset = ino_defaults.PRESETS[cfg["preset"]]
    batch_given = cfg["expected_batch"] is not None  # else a tenth of the records
    data, owners = _data_and_owners(preset, cfg)
    ino_config.fit_to_data(cfg, owners, len(data.y))  # b, and a feasible plan, before training
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  privacy_flags.announce()
  out_dir = cli.prepare_output_dir(_OUTPUT_DIR.value)
  # --dataset is the user's own data, not the preset's (issue 51: it was called Synthetic IID).
  opening = f"INO-SGD on --dataset={_DATASET.value}" if _DATASET.value else preset.name
  print(ino_config.run_line(opening, data.name, len(data.test_y), owners, cfg, batch_given),
        flush=True)
  # TensorFlow loads here, once the flags and the plan are known to be valid.
  from tff_idp.ino_sgd import runs as ino_runs  # pylint: disable=g-import-not-at-top
  own = _DATASET.value or _CLASS_BUDGETS.value or _RECORD_DISTRIBUTION.value
  paper = preset.paper if not own else None
  body, _ = ino_runs.compare(
      data, owners, cfg, out_dir, title=preset.name if not own else "INO-SGD on your data",
      group_epsilons=cfg["epsilons"] if owners.by_class else None,
      notes=ino_config.paper_notes(paper), expected_batch_given=batch_given,
      details={"owners": owners.classes_of_owners(), "paper": paper})
  print()
  print(body)
  print(f"\nsummary.md/json, per_group.png and per-run metrics.csv in {out_dir}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check=check)
