"""INO-SGD vs IDP-SGD vs "Drop x%": utility imbalance under individualized DP (INO-SGD paper).

Data owners hold different classes and set different budgets; IDP-SGD
(SAMPLE or SCALE, :mod:`tff_idp.accounting.owner.plan`) meets every budget
but the more private owners' classes end up with worse accuracy. INO-SGD
(Alg. 1) keeps IDP-SGD's sampling, noise and accounting and multiplies each
clipped gradient by an importance score ρ ∈ [0, 1] that down-weights the
low-loss end of every batch (:mod:`tff_idp.ino_sgd.importance`, Beta(α, β)
tail of length γ). "Drop x%" (Table 3) randomly removes x% of the less
private owners' records and recalibrates.

For every method and seed this prints and writes the overall accuracy, the
accuracy and recall per owner group, the worst group and the imbalance (the
std of per-group recalls, D.4.3), plus a per-group bar plot:

  python -m experiments.ino_sgd                       # embedded default, about 1 min
  python -m experiments.ino_sgd --seeds=0,1,2,3,4 --drop_percents=10,20,30,40,50
  python -m experiments.ino_sgd --preset=mn --data_dir=~/.tff   # needs EMNIST files
  python -m experiments.ino_sgd --preset=cm --data_dir=~/.tff   # needs CIFAR-10 files
  python -m experiments.ino_sgd --preset=cl --data_dir=~/.tff

Presets (``--preset``; any flag given explicitly overrides the preset):

* ``embedded`` (default, no network): the MN setting on the embedded data.
  The pooled train records of Synthetic IID users (:mod:`datasets.synthetic`,
  60 features, 10 classes), classes 0-4 owned by owner "0-4" at ε = 0.1 and
  classes 5-9 by owner "5-9" at ε = 1, δ = 1e-5, SAMPLE, multinomial
  logistic regression. Its hyperparameters are the defaults shared with
  ``tff_idp.run_ino_sgd`` (``tff_idp/ino_sgd/defaults.py``), and so are those
  of ``--dataset`` runs under this preset, which use every record of your split.
* ``mn``: the same owners and budgets on the datasets/ FMNIST source (EMNIST
  digits, writers pooled), with PC-MNIST.
* ``cm`` / ``cl``: CIFAR-10, ten owners with one class each, SCALE, ε =
  linspace(0.5, 5) / linspace(6, 15) over the classes, with PC-CIFAR.

The paper publishes none of T, b, η, σ, γ, α, β (notes §1.5); the values the
presets use, and how they were chosen, are in the README. Per-step privacy is
owner-level: owner n's records are Poisson-sampled at q_n, clipped to C_n and
noised with std z·C, so owner n spends exactly the ε of the IDP-SGD plan,
re-verified with dp-accounting before training (INO-SGD Thm 3.3).

Outputs in ``--output_dir``: ``summary.md``/``summary.json`` (the table, the
plans), ``per_group.png`` (bar plot), and per method and seed a
``metrics.csv`` + TensorBoard of the evaluations (the released model on
held-out data) and, unless ``--release_only``, a ``diagnostics.csv`` of the
realised batch sizes and clipped fractions (not covered by the guarantee).
``--release_only`` also leaves out every statistic of the records (issue 48;
:mod:`tff_idp.ino_sgd.runs`): the plans (computed from the owners' record
counts), the record counts, b where a tenth of the records set it, and with
budgets per record the owners' ε levels; outside it they are labelled not
private.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import sys
from typing import Optional

from absl import flags
from absl import logging as absl_logging
import numpy as np

from experiments import privacy_flags
from tff_idp import cli
from tff_idp import model_catalog
from tff_idp import preferences
from tff_idp.accounting.owner import plan as owner_plan
from tff_idp.centralized.silo import Silo
from tff_idp.ino_sgd import defaults as ino_defaults
from tff_idp.ino_sgd import methods as ino_methods

D = ino_defaults.DEFAULTS  # shared with tff_idp.run_ino_sgd (one source, issue 34)


@dataclasses.dataclass(frozen=True)
class Preset:
  """One INO-SGD setting: data, owners (class → owner), budgets, mechanism, hyperparameters."""
  name: str
  dataset: str                       # "synthetic", "fmnist" or "cifar10"
  model: str                         # "logistic", "pc_mnist", "pc_cifar"
  owners: tuple[tuple[int, ...], ...]  # classes of each owner
  epsilons: tuple[float, ...]
  mechanism: str
  steps: int
  expected_batch: Optional[float]    # None: a tenth of the records, at most 1,000
  learning_rate: float
  clip_norm: float
  ino_gamma_ratio: float
  ino_alpha: float
  ino_beta: float
  train_examples: int
  test_examples: int
  paper: Optional[dict] = None       # Table 3 numbers, where the paper printed them

  @property
  def owner_names(self) -> tuple[str, ...]:
    return tuple(ino_methods.classes_name(c) for c in self.owners)


_TEN = tuple((c,) for c in range(10))
PRESETS = {
    # The defaults (tff_idp/ino_sgd/defaults.py) on the embedded data; its
    # owners are those of D["budgets"].
    "embedded": Preset("embedded (MN setting, Synthetic IID)", "synthetic", "logistic",
                       ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)), (0.1, 1.0), D["mechanism"],
                       steps=D["steps"], expected_batch=D["expected_batch"],
                       learning_rate=D["learning_rate"], clip_norm=D["clip_norm"],
                       ino_gamma_ratio=D["ino_gamma_ratio"], ino_alpha=D["ino_alpha"],
                       ino_beta=D["ino_beta"],
                       train_examples=ino_defaults.EMBEDDED_TRAIN_EXAMPLES,
                       test_examples=ino_defaults.EMBEDDED_TEST_EXAMPLES),
    "mn": Preset("MN (EMNIST digits, 2 owners)", "fmnist", "pc_mnist",
                 ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)), (0.1, 1.0), "sample",
                 steps=1000, expected_batch=1000, learning_rate=2.0, clip_norm=1.0,
                 ino_gamma_ratio=0.5, ino_alpha=4.0, ino_beta=1.0,
                 train_examples=0, test_examples=0),
    "cm": Preset("CM (CIFAR-10, 10 owners, ε 0.5..5, SCALE)", "cifar10", "pc_cifar", _TEN,
                 tuple(np.round(np.linspace(0.5, 5, 10), 6)), "scale",
                 steps=1000, expected_batch=1024, learning_rate=2.0, clip_norm=1.0,
                 ino_gamma_ratio=0.5, ino_alpha=1.0, ino_beta=1.0,
                 train_examples=0, test_examples=0),
    "cl": Preset("CL (CIFAR-10, 10 owners, ε 6..15, SCALE)", "cifar10", "pc_cifar", _TEN,
                 tuple(np.round(np.linspace(6, 15, 10), 6)), "scale",
                 steps=1000, expected_batch=1024, learning_rate=2.0, clip_norm=1.0,
                 ino_gamma_ratio=0.5, ino_alpha=1.0, ino_beta=1.0,
                 train_examples=0, test_examples=0,
                 paper={"IDP-SGD": 63.35, "Drop 10%": 62.48, "Drop 20%": 61.64,
                        "Drop 30%": 60.41, "Drop 40%": 58.83, "Drop 50%": 56.47,
                        "INO-SGD": 66.73, "_source": "Table 3, CL-PC (5 runs)"}),
}
METHODS = ino_methods.METHODS
OWN_DATA_MODELS = model_catalog.MODELS

_PRESET = flags.DEFINE_enum("preset", "embedded", list(PRESETS), "The setting (module doc).")
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
_MODEL = flags.DEFINE_enum("model", D["model"], list(OWN_DATA_MODELS),
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


def _builder(model: str, input_shape: tuple, num_classes: int, rescale: float):
  """``init_seed -> fresh Keras model`` for the preset's model (each seed its own init)."""
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  if model == "logistic":
    return lambda s: models.build_logistic_regression(input_shape[0], num_classes, seed=s)
  if model == "pc_mnist":
    return lambda s: models.build_pc_mnist_cnn(input_shape, num_classes, seed=s)
  return lambda s: models.build_pc_cifar_cnn(input_shape, num_classes, rescale=rescale, seed=s)


def load_data(preset: Preset, train_examples: int, test_examples: int, seed: int,
              data_dir: Optional[str], split_dir: Optional[str]) -> Silo:
  """The preset's records pooled into one silo (never downloaded: local files or embedded)."""
  if preset.dataset == "synthetic":
    from datasets import synthetic  # pylint: disable=g-import-not-at-top
    p = synthetic.pooled_arrays(train_examples, test_examples, seed)
    config = p["config"]
    return Silo(p["x"], p["y"], p["test_x"], p["test_y"],
                _builder("logistic", (config.num_features,), config.num_classes, 1.0),
                f"Synthetic IID (pooled, {len(p['y'])} records)")
  from datasets import resolution  # pylint: disable=g-import-not-at-top
  from datasets import specs  # pylint: disable=g-import-not-at-top
  info = specs.info(preset.dataset)
  mnist_shaped = tuple(info.input_shape)[-1] == 1
  split = resolution.resolve(preset.dataset, partition="iid", seed=seed, data_dir=data_dir,
                             split_dir=split_dir, progress=False)
  factor = info.rescale if mnist_shaped else 1.0   # the MNIST CNN expects [0, 1] inputs
  parts = list(split.train_arrays().values())
  x = np.concatenate([a for a, _ in parts]) * factor
  y = np.concatenate([b for _, b in parts])
  order = np.random.default_rng(seed).permutation(len(y))
  if train_examples:
    order = order[:train_examples]
  tx, ty = split.evaluation_arrays()
  tx = tx * factor
  if test_examples:
    tx, ty = tx[:test_examples], ty[:test_examples]
  builder = _builder(preset.model, tuple(info.input_shape), info.num_classes,
                     1.0 if mnist_shaped else info.rescale)
  return Silo(x[order], y[order], tx, ty, builder,
              f"{preset.dataset} (writers/clients pooled, {order.size} records)")


def _floats(values, name: str) -> list[float]:
  try:
    return [float(v) for v in values]
  except ValueError as e:
    raise ValueError(f"--{name} must be numbers: {e}") from None


def parse_config() -> dict:
  """Preset values overridden by explicit flags, all checked (ValueError with advice)."""
  preset = PRESETS[_PRESET.value]

  def pick(holder, default):
    return default if holder.value is None else holder.value

  methods = list(_METHODS.value)
  unknown = sorted(set(methods) - set(METHODS))
  if unknown or not methods:
    raise ValueError(f"--methods has {unknown or 'nothing'}; choose from {', '.join(METHODS)}.")
  drops = _floats(_DROP.value, "drop_percents")
  if "drop" in methods and (not drops or any(not 0 < p < 100 for p in drops)):
    raise ValueError(f"--drop_percents={_DROP.value} must be percentages in (0, 100).")
  seeds = [int(s) for s in _SEEDS.value]
  if not seeds:
    raise ValueError("--seeds is empty; give at least one seed.")
  epsilons = _floats(pick(_EPSILONS, preset.epsilons), "epsilons")
  if len(epsilons) != len(preset.owners):
    raise ValueError(f"--epsilons has {len(epsilons)} values; the {preset.name} preset has "
                     f"{len(preset.owners)} owners ({', '.join(preset.owner_names)}).")
  for e in epsilons:
    if not e > 0 or math.isnan(e):
      raise ValueError(f"--epsilons: ε={e} must be > 0 (inf = no privacy for that owner).")
  cfg = {
      "preset": _PRESET.value, "preset_name": preset.name, "methods": methods,
      "drop_percents": drops, "seeds": seeds, "epsilons": epsilons,
      "owner_names": list(preset.owner_names), "owners": preset.owners,
      "steps": pick(_STEPS, preset.steps),
      "expected_batch": pick(_BATCH, preset.expected_batch),
      "learning_rate": pick(_LR, preset.learning_rate),
      "clip_norm": pick(_CLIP, preset.clip_norm),
      "mechanism": pick(_MECHANISM, preset.mechanism), "delta": _DELTA.value,
      "ino_gamma_ratio": pick(_GAMMA, preset.ino_gamma_ratio),
      "ino_alpha": pick(_ALPHA, preset.ino_alpha), "ino_beta": pick(_BETA, preset.ino_beta),
      # The preset's sizes are its own data's; your --dataset is used whole.
      "train_examples": pick(_TRAIN, D["train_examples"] if _DATASET.value
                             else preset.train_examples),
      "test_examples": pick(_TEST, D["test_examples"] if _DATASET.value
                            else preset.test_examples),
      "eval_every": _EVAL_EVERY.value, "data_seed": _DATA_SEED.value,
      "progress": _PROGRESS.value,
      "insecure_reproducible_noise": privacy_flags.insecure(),
      "release_only": privacy_flags.release_only(),
  }
  if cfg["steps"] < 1:
    raise ValueError(f"--steps={cfg['steps']} must be >= 1.")
  if cfg["expected_batch"] is not None and not cfg["expected_batch"] > 0:
    raise ValueError(f"--expected_batch={cfg['expected_batch']} must be > 0.")
  for name in ("learning_rate", "clip_norm"):
    if not cfg[name] > 0 or math.isinf(cfg[name]):
      raise ValueError(f"--{name}={cfg[name]} must be a finite number > 0.")
  if not 0 < cfg["delta"] < 1:
    raise ValueError(f"--delta={cfg['delta']} must be in (0, 1), e.g. 1e-5.")
  if cfg["ino_gamma_ratio"] < 0 or math.isinf(cfg["ino_gamma_ratio"]):
    raise ValueError(f"--ino_gamma_ratio={cfg['ino_gamma_ratio']} must be >= 0 "
                     "(0 = IDP-SGD).")
  for name in ("ino_alpha", "ino_beta"):
    if not cfg[name] > 0 or math.isinf(cfg[name]):
      raise ValueError(f"--{name}={cfg[name]} must be a finite number > 0.")
  for name in ("train_examples", "test_examples", "eval_every"):
    if cfg[name] < 0:
      raise ValueError(f"--{name}={cfg[name]} must be >= 0.")
  return cfg


def _class_budgets(num_classes: int) -> Optional[dict]:
  """``{class: ε}`` of --class_budgets (None when not given); ValueError naming the flag."""
  if not _CLASS_BUDGETS.value:
    return None
  try:
    return preferences.parse_class_budgets(_CLASS_BUDGETS.value, num_classes)
  except ValueError as e:
    raise ValueError(f"--class_budgets: {e}") from None


def check() -> dict:
  """Every flag check that needs no data (``cli.launch`` runs them before TensorFlow)."""
  cfg = parse_config()
  _check_owner_flags(cfg)
  batch, most = cfg["expected_batch"], cfg["train_examples"]
  if batch is not None and most and batch > most:  # the silo has at most that many records
    raise ValueError(f"--expected_batch={batch:g} exceeds the silo's at most {most} records "
                     "(--train_examples): lower --expected_batch or raise --train_examples.")
  return cfg


def _check_owner_flags(cfg: dict) -> None:
  """The budget and data flags must fit together (ValueError saying what to drop)."""
  if _CLASS_BUDGETS.value and _RECORD_DISTRIBUTION.value:
    raise ValueError("give --class_budgets (owners by class) or --record_distribution "
                     "(budgets per record), not both.")
  if (_CLASS_BUDGETS.value or _RECORD_DISTRIBUTION.value) and flags.FLAGS["epsilons"].present:
    raise ValueError("--epsilons sets the preset owners' budgets; with --class_budgets or "
                     "--record_distribution the budgets come from those, so drop --epsilons.")
  if not _RECORD_DISTRIBUTION.value:
    cli.refuse_inapplicable(("budget_seed",), "it seeds --record_distribution's draw")
  if not _DATASET.value:
    cli.refuse_inapplicable(("model",), "it chooses the model for --dataset; the presets "
                            "fix theirs")
    if PRESETS[cfg["preset"]].dataset == "synthetic":
      cli.refuse_inapplicable(
          ("data_dir", "split_dir"),
          f"--preset={cfg['preset']} uses the embedded data, and only the mn/cm/cl presets "
          "and --dataset read source files or a built split")
    _class_budgets(10)  # every preset's data has ten classes


def _data_and_owners(preset: Preset, cfg: dict):
  """The silo (the preset's data or --dataset) and its owners (the preset's, or from flags)."""
  _check_owner_flags(cfg)
  if _DATASET.value:
    # TensorFlow loads here (the split's records), once the flags are valid.
    from datasets import resolution  # pylint: disable=g-import-not-at-top
    from tff_idp import runners  # pylint: disable=g-import-not-at-top
    split = resolution.resolve(_DATASET.value, data_dir=_DATA_DIR.value,
                               split_dir=_SPLIT_DIR.value, progress=False)
    data = runners.silo_from_split(split, model=_MODEL.value,
                                   train_examples=cfg["train_examples"],
                                   test_examples=cfg["test_examples"], seed=cfg["data_seed"])
    num_classes = int(split.info.num_classes)
  else:
    num_classes = 10  # every preset's data
    data = load_data(preset, cfg["train_examples"], cfg["test_examples"], cfg["data_seed"],
                     _DATA_DIR.value, _SPLIT_DIR.value)
  if _CLASS_BUDGETS.value:
    return data, ino_methods.owners_by_class(data.y, _class_budgets(num_classes))
  if _RECORD_DISTRIBUTION.value:
    drawn = preferences.assign_record_budgets(
        preferences.DISTRIBUTIONS[_RECORD_DISTRIBUTION.value](), [len(data.y)],
        _BUDGET_SEED.value)["0"]
    return data, ino_methods.owners_by_record(data.y, drawn, num_classes)
  names = tuple(preset.owner_names)
  return data, ino_methods.Owners(
      ino_methods.owner_of_labels(data.y, preset.owners), tuple(cfg["epsilons"]), names,
      {c: names[n] for n, classes in enumerate(preset.owners) for c in classes})


def _describe(data, owners: ino_methods.Owners, cfg: dict, batch_given: bool
              ) -> tuple[str, str]:
  """(the data and owners, the expected batch) of the line printed before training.

  Under ``--release_only`` without the records' statistics (issue 48): no record
  counts (of the silo or per owner), no owners where they are the budget levels
  the records hold (budgets per record), no b where the record count set it.
  """
  names, epsilons = cfg["owner_names"], cfg["epsilons"]
  if not cfg["release_only"]:
    owners_text = ", ".join(f"{g}: ε={e:g} ({int(np.sum(owners.of_record == n))} records)"
                            for n, (g, e) in enumerate(zip(names, epsilons)))
    return (f"{data.name}, {len(data.test_y)} test; owners {owners_text}",
            f"b={cfg['expected_batch']:g}")
  owners_text = (", ".join(f"{g}: ε={e:g}" for g, e in zip(names, epsilons))
                 if owners.by_class else "budgets per record")
  return (f"{ino_methods.release_data_name(data.name)}, {len(data.test_y)} test; owners "
          f"{owners_text}", f"b={cfg['expected_batch']:g}" if batch_given
          else "b from the record count (not shown)")


@cli.entry(rules={"eval_every": cli.Rule(
    "int", low=0, meaning="steps between evaluations (0 = at the end only)")})
def main(argv):
  del argv
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  try:
    cfg = parse_config()
    preset = PRESETS[cfg["preset"]]
    batch_given = cfg["expected_batch"] is not None  # else a tenth of the records
    data, owners = _data_and_owners(preset, cfg)
    cfg.update(epsilons=list(owners.epsilons), owner_names=list(owners.names),
               expected_batch=ino_defaults.expected_batch(cfg["expected_batch"], len(data.y)))
    if cfg["expected_batch"] > len(data.y):
      raise ValueError(f"--expected_batch={cfg['expected_batch']:g} exceeds the "
                       f"{len(data.y)} records; lower it.")
    # Fail before any training if the undropped plan is infeasible.
    owner_plan.plan_owners(cfg["epsilons"],
                           np.bincount(owners.of_record, minlength=len(cfg["epsilons"])),
                           cfg["delta"], cfg["steps"], cfg["expected_batch"], cfg["clip_norm"],
                           cfg["mechanism"])
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  privacy_flags.announce()
  out_dir = cli.prepare_output_dir(_OUTPUT_DIR.value)
  names = cfg["owner_names"]
  data_text, batch_text = _describe(data, owners, cfg, batch_given)
  # --dataset is the user's own data, not the preset's (issue 51: it was called Synthetic IID).
  opening = f"INO-SGD on --dataset={_DATASET.value}" if _DATASET.value else preset.name
  print(f"{opening}: {data_text}; "
        f"{cfg['mechanism'].upper()}, T={cfg['steps']}, {batch_text}, "
        f"C={cfg['clip_norm']:g}, η={cfg['learning_rate']:g}, δ={cfg['delta']:g}; INO "
        f"γ={cfg['ino_gamma_ratio']:g}·E[Σ q C], Beta({cfg['ino_alpha']:g}, "
        f"{cfg['ino_beta']:g}); seeds {cfg['seeds']}", flush=True)
  # TensorFlow loads here, once the flags and the plan are known to be valid.
  from tff_idp.ino_sgd import runs as ino_runs  # pylint: disable=g-import-not-at-top
  rows, runs = ino_runs.run_methods(
      data, owners.of_record, owners.class_groups, cfg,
      ino_methods.method_runs(cfg["methods"], cfg["drop_percents"]),
      cfg["seeds"], out_dir)
  notes = []
  if preset.paper and not (_DATASET.value or _CLASS_BUDGETS.value or _RECORD_DISTRIBUTION.value):
    paper = ", ".join(f"{k} {v}" for k, v in preset.paper.items() if not k.startswith("_"))
    notes.append(f"Paper ({preset.paper['_source']}), overall accuracy (%): {paper}")
  own = _DATASET.value or _CLASS_BUDGETS.value or _RECORD_DISTRIBUTION.value
  owner_classes = ({g: sorted(c for c, n in owners.class_groups.items() if n == g)
                    for g in names} if owners.by_class else None)
  body = ino_runs.write_summary(
      rows, runs, cfg, list(dict.fromkeys(owners.class_groups.values())), out_dir,
      title=preset.name if not own else "INO-SGD on your data", data_name=data.name,
      group_epsilons=cfg["epsilons"] if owners.by_class else None, notes=notes,
      details={"owners": owner_classes, "paper": preset.paper if not own else None},
      expected_batch_given=batch_given)
  print()
  print(body)
  print(f"\nsummary.md/json, per_group.png and per-run metrics.csv in {out_dir}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check=check)
