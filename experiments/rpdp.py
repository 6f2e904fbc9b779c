"""rPDP-FL: record-level personalized DP in federated learning (rPDP-FL paper §7.2, Fig. 8).

Every record draws its own budget ε_ij from a privacy preference distribution;
the methods ours (SCF rates, Alg. 3), Minimum, Dropout and PrivacyFree then
train through the same round driver, and a Fig. 8-style table compares them:

  python -m experiments.rpdp                                   # defaults below
  python -m experiments.rpdp --distribution=bounded_pareto --seeds=0,1,2
  python -m experiments.rpdp --dataset=fmnist --partition=iid --data_dir=~/.tff
  python -m experiments.rpdp --distribution=by_class --class_budgets=0-4:0.1,5-9:1 \
      --local_algorithm=ino_sgd
  python -m experiments.rpdp --audit_canaries=96 --methods=ours    # + empirical privacy audit

``--audit_canaries=k`` audits every private method empirically (Andrew et
al., "One-shot Empirical Privacy Estimation for Federated Learning", ICLR
2024, with record-level gradient canaries, :mod:`tff_idp.audit.record_canaries`):
one more run of the first seed with k canary records split over the budget
levels (``--audit_levels``; default the distinct budgets), after which a
second table gives per level the ledger's ε bound, the empirical ε with its
95% CI, whether the bound is violated, and the accuracy with and without
canaries.

Budgets that follow the data: ``--distribution=by_class`` gives every record
the budget of its label, from ``--class_budgets`` (``<class>:<ε>`` or
``<first>-<last>:<ε>`` items, every class of the dataset exactly once, e.g.
``0-4:0.1,5-9:1``). This is the data-dependent setting of INO-SGD, where
the more private groups pay in utility; ``--local_algorithm=ino_sgd`` (tail
``--ino_gamma``, Beta(``--ino_alpha``, ``--ino_beta``)) weights the clipped
gradients by loss order to narrow the gap. Classes with equal ε form one
group, named ``eps=<ε>``, and the evaluation then reports per group
(:mod:`tff_idp.engine.group_metrics`) in ``metrics.csv`` and TensorBoard:
``eval_acc/eps=<ε>``, ``eval_recall/eps=<ε>`` (macro recall),
``eval_worst_group_accuracy`` and ``eval_imbalance`` (the population std of
the per-group recalls, INO-SGD D.4.3); ``summary.json``/``summary.md`` and
the printed table add the per-group accuracy (mean over seeds), the worst
group's accuracy and the imbalance. These evaluate the released model on
held-out data, so they are release metrics. Other distributions draw budgets
independently of the data; test records carry no budget, so they get no
group metrics.

The default federation is embedded (no network): 10 silos, each pooling the
records of ``--users_per_silo`` users of the Synthetic federation
(:mod:`datasets.synthetic`), with multinomial logistic regression. With
``--dataset=fmnist|cifar10|svhn`` the 10-client split comes from the
``datasets`` builders when the source data is present (MNIST-shaped data uses
the paper's two-layer CNN, 32×32×3 data the IDP-FedAvg CNN).
"""
from __future__ import annotations

import collections
import logging
import math
import os
import sys
from typing import Optional, TYPE_CHECKING

from absl import flags
from absl import logging as absl_logging
import numpy as np
# TensorFlow before absl parses the flags (tf.keras breaks if first imported in app.run).

from experiments import privacy_flags
from experiments import worker_flags
from tff_idp import cli
from tff_idp import model_catalog
from tff_idp import preferences
from tff_idp.execution import runtime
from tff_idp.accounting.record import plan as record_plan
from tff_idp.accounting.record.rdp_two_stage import THREAT_MODELS
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.rpdp.defaults import DEFAULTS

if TYPE_CHECKING:
  from tff_idp.rpdp import runs as record_runs  # the annotations only

_DISTRIBUTION = flags.DEFINE_enum(
    "distribution", "three_levels", sorted([*preferences.DISTRIBUTIONS, preferences.BY_CLASS]),
    "Privacy preference distribution of the records (tff_idp.preferences). three_levels, "
    "bounded_mix_gauss, bounded_pareto: the paper's parameters (rPDP-FL §7.2). "
    "bounded_mix_gauss_code: the authors' code's variant (stds 0.05/0.1/0.5, values "
    "clipped onto [0.1, 10], about 35% of records at exactly ε=0.1); bounded_pareto_code: the "
    "code's numpy pareto(4) + 0.1 clipped to [0.1, 10]. user_study_*: IDP-FedAvg's "
    "splits over ε 1/2/3. by_class: each record takes the budget of its label, from "
    "--class_budgets.")
_CLASS_BUDGETS = flags.DEFINE_list(
    "class_budgets", None,
    "by_class: ε per class as <class>:<ε> or <first>-<last>:<ε> items covering every "
    "class once, e.g. 0-4:0.1,5-9:1. Classes with equal ε form one group (eps=<ε>) in "
    "the per-group metrics.")
_LEVELS = flags.DEFINE_list("levels", ["0.1", "1", "5"], "three_levels: the three ε.")
_LEVEL_RATIOS = flags.DEFINE_list("level_ratios", ["0.7", "0.2", "0.1"],
                                  "three_levels: the share of records at each ε.")
_METHODS = flags.DEFINE_list("methods", list(record_plan.METHODS),
                             f"Methods to compare: {', '.join(record_plan.METHODS)}. "
                             "--release_only: the default leaves privacy_free out, and "
                             "refuses it given (it trains without noise).")
_ESTIMATOR = flags.DEFINE_enum(
    "estimator", "scf", ["scf", "exact", "binary_search"],
    "How 'ours' turns ε_ij into q_ij: SCF (Alg. 2, re-checked and lowered where over "
    "budget), the exact inverse, or BinarySearch.")
_LOCAL_ALGORITHM = flags.DEFINE_enum(
    "local_algorithm", "dp_sgd", ["dp_sgd", "ino_sgd"],
    "Clients' local step: record-level DP-SGD, or INO-SGD (the same sampling, noise and "
    "accounting, with loss-ordered importance weights on the clipped gradients).")
_INO_GAMMA = flags.DEFINE_float(
    "ino_gamma", 10.0, "ino_sgd: tail length γ, in units of the clip norm (the paper "
    "publishes none; its guidance is γ <= half the expected Σ q·C per step, about 24 for "
    "the embedded silos).")
_INO_ALPHA = flags.DEFINE_float("ino_alpha", 1.0, "ino_sgd: Beta(α, β) tail function, α.")
_INO_BETA = flags.DEFINE_float("ino_beta", 1.0, "ino_sgd: Beta(α, β) tail function, β.")
_ROUNDS = flags.DEFINE_integer("rounds", DEFAULTS["rounds"],
                               "T: communication rounds.")
_LOCAL_STEPS = flags.DEFINE_integer("local_steps", DEFAULTS["local_steps"],
                                    "τ: local DP-SGD steps per round.")
_CLIENT_RATE = flags.DEFINE_float("client_rate", DEFAULTS["client_rate"],
                                  "λ: client sampling rate.")
_NOISE = flags.DEFINE_float("noise_multiplier", DEFAULTS["noise_multiplier"],
                            "σ: noise multiplier of each step.")
_CLIP = flags.DEFINE_float("clip_norm", DEFAULTS["clip_norm"],
                           "L: per-example clipping norm.")
_LR = flags.DEFINE_float("learning_rate", DEFAULTS["learning_rate"],
                         "Client SGD learning rate η.")
_DELTA = flags.DEFINE_float("delta", DEFAULTS["delta"], "Target δ.")
_THREAT = flags.DEFINE_enum("threat_model", DEFAULTS["threat_model"],
                            list(THREAT_MODELS),
                            "type2: third parties see global models (Thm 1 (1)); "
                            "type1: an honest-but-curious server (Thm 1 (2)).")
_PF_BATCH = flags.DEFINE_float("privacy_free_batch", DEFAULTS["privacy_free_batch"],
                               "PrivacyFree: expected records per local step.")
_DATASET = flags.DEFINE_string(
    "dataset", "synthetic",
    "Federation: 'synthetic' (embedded silos), fmnist | cifar10 | svhn (datasets/ builders, "
    "from local source files), tfds:<name> (a prepared TensorFlow Datasets image dataset), "
    "or the path of a split directory (datasets.from_arrays(...).save(dir) or "
    "python -m datasets.build).")
_MODEL = flags.DEFINE_enum(
    "model", "auto", list(model_catalog.MODELS),
    "Model for --dataset=tfds:<name> or a split path: logreg/mlp for feature vectors, cnn "
    "(the IDP-FedAvg CNN) for images; auto picks by the example shape. Built-in datasets "
    "use the paper's CNNs, synthetic uses logreg.")
_HEAD = flags.DEFINE_enum(
    "head", "softmax", list(model_catalog.HEADS),
    "Output head: softmax (K logits) or sigmoid (one logit; binary labels 0/1).")
_PARTITION = flags.DEFINE_string("partition", "iid", "datasets/ split partition.")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "Source data directory (datasets/).")
_SPLIT_DIR = flags.DEFINE_string("split_dir", None, "Built split directory (datasets/).")
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 10, "Clients (silos).")
_USERS_PER_SILO = flags.DEFINE_integer("users_per_silo", 40,
                                       "synthetic: Synthetic users pooled into one silo.")
_IID = flags.DEFINE_bool("iid", True, "synthetic: Synthetic IID (else Synthetic(0.5, 0.5)).")
_DATA_SEED = flags.DEFINE_integer("data_seed", 0, "Seed of the federation.")
_BUDGET_SEED = flags.DEFINE_integer("budget_seed", 0, "Seed of the budget assignment.")
_FRESH_BUDGETS = flags.DEFINE_bool(
    "fresh_budgets_per_seed", False,
    "Draw the records' budgets afresh for every training seed (from --budget_seed and the "
    "seed); each seed's plan goes to record_plan_seed<s>.csv. Not with --distribution=by_class.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1"], "Training seeds (results are averaged).")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/rpdp", "Where results go.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", DEFAULTS["eval_every"],
                                   "Evaluate every k rounds.")
_CHECKPOINT_EVERY = flags.DEFINE_integer("checkpoint_every", DEFAULTS["checkpoint_every"],
                                         "Checkpoint every k rounds.")
_DEVICE = flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "TFF worker device.")
worker_flags.define()
worker_flags.define_client_execution()
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
_RESTART = flags.DEFINE_bool(
    "restart", False, "Discard the checkpoints and metrics in --output_dir and start fresh "
    "(default: resume; a finished run is reported, not retrained).")
_AUDIT_CANARIES = flags.DEFINE_integer(
    "audit_canaries", 0,
    "Empirical privacy audit (Andrew et al., ICLR 2024): k record-level gradient canaries, "
    "split equally over the budget levels, half of each level held out, in one extra run "
    "(first seed) per private method; the summary gains per level the ledger's ε bound "
    "and the empirical ε (95% CI), and the accuracy with/without canaries. 0 = no audit.")
_AUDIT_SEED = flags.DEFINE_integer("audit_seed", 0, "The auditor's seed (canary directions, "
                                   "held-out split, placement).")
_AUDIT_LEVELS = flags.DEFINE_list(
    "audit_levels", None, "Budget levels ε of the canaries (default: the plan's distinct "
    "budgets; needed for continuous preference distributions).")
privacy_flags.define()


def synthetic_federation(num_clients: int, users_per_silo: int, iid: bool,
                         seed: int) -> "record_runs.Federation":
  """Silos pooling Synthetic users' train records; the users' test records are the test set."""
  from datasets import synthetic  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import record_level  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import runs as record_runs  # pylint: disable=g-import-not-at-top
  config = synthetic.SyntheticConfig(num_clients=num_clients * users_per_silo, iid=iid,
                                     alpha=0.5, beta=0.5, seed=seed)
  arrays = synthetic.generate_arrays(config)
  silo = arrays["client"] // users_per_silo
  train = ~arrays["is_test"]
  x, y = {}, {}
  for k in range(num_clients):
    rows = train & (silo == k)
    cid = f"silo_{k:02d}"
    x[cid], y[cid] = arrays["x"][rows], arrays["y"][rows]
  nf, nc = config.num_features, config.num_classes
  name = f"Synthetic{' IID' if iid else '(0.5,0.5)'}, {num_clients} silos × {users_per_silo} users"
  return record_runs.Federation(record_level.RecordFederation(x, y), arrays["x"][arrays["is_test"]],
                    arrays["y"][arrays["is_test"]],
                    lambda: models.build_logistic_regression(nf, nc, seed=0), name, nc)


def split_federation(dataset: str, partition: str, num_clients: Optional[int], seed: int,
                     data_dir, split_dir, model: str = "auto",
                     head: str = "softmax") -> "record_runs.Federation":
  """A split (datasets/ builders, ``tfds:<name>`` or a split directory) as in-memory records.

  Built-in datasets use the paper's models (MNIST-shaped data the rPDP-FL CNN
  on [0, 1] inputs, 32×32×3 data the IDP-FedAvg CNN); other splits use
  ``model`` (:func:`tff_idp.models.builder_for`). When the split has more
  clients than ``num_clients`` (FMNIST: one per writer), client i's records
  go to silo i mod ``num_clients``; ``num_clients=None`` keeps the split's
  own clients (e.g. your hospitals).
  """
  import datasets as datasets_lib  # pylint: disable=g-import-not-at-top
  from datasets import specs  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import record_level  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import runs as record_runs  # pylint: disable=g-import-not-at-top
  builtin = dataset in specs.DATASETS
  if builtin:
    # FMNIST's clients are its writers (3,383); their records are pooled into silos below.
    split = datasets_lib.resolve(
        dataset, partition=partition,
        num_clients=None if dataset == "fmnist" else num_clients, seed=seed,
        data_dir=data_dir, split_dir=split_dir)
  else:
    split = datasets_lib.resolve(dataset, seed=None if os.path.isdir(
        os.path.expanduser(dataset)) else seed, data_dir=data_dir, split_dir=split_dir,
        **({"partition": partition} if dataset.startswith("tfds:") else {}))
  info = split.info
  shape = tuple(info.input_shape)
  # The IDP-FedAvg CNN rescales inside the model; the rPDP-FL CNN expects [0, 1] inputs.
  mnist_shaped = builtin and shape[-1] == 1
  by_client = split.train_arrays()
  ids = list(by_client)
  silos = len(ids) if num_clients is None else num_clients
  if len(ids) < silos:
    raise ValueError(f"the split {dataset} has {len(ids)} clients, fewer than "
                     f"--num_clients={silos}.")
  parts = collections.defaultdict(list)
  for index, cid in enumerate(ids):  # client i goes to silo i mod silos
    arrays = by_client.pop(cid)
    if mnist_shaped:
      arrays = (arrays[0] * info.rescale, arrays[1])
    parts[f"silo_{index % silos:02d}" if builtin or silos != len(ids) else cid].append(arrays)
  x = {k: np.concatenate([a for a, _ in v]) for k, v in parts.items()}
  y = {k: np.concatenate([b for _, b in v]) for k, v in parts.items()}
  test_x, test_y = split.evaluation_arrays()
  if mnist_shaped:
    test_x = test_x * info.rescale
    builder = lambda: models.build_rpdp_mnist_cnn(shape, info.num_classes, seed=0)
  elif builtin:
    builder = lambda: models.build_idp_fedavg_cnn(shape, info.num_classes, seed=0,
                                                  rescale=info.rescale)
  else:
    builder = models.builder_for(shape, info.num_classes, model, head, info.rescale)
  name = (f"{dataset} ({partition})" if builtin else dataset if dataset.startswith("tfds:")
          else f"split {os.path.normpath(dataset)}")
  return record_runs.Federation(record_level.RecordFederation(x, y), test_x, test_y, builder,
                    f"{name}, {len(x)} clients", info.num_classes,
                    head if not builtin else "softmax")


def make_distribution():
  """The --distribution's sampler; None for by_class (budgets follow the labels)."""
  if _DISTRIBUTION.value == preferences.BY_CLASS:
    return None
  if _DISTRIBUTION.value == "three_levels":
    try:
      return preferences.ThreeLevels(tuple(float(v) for v in _LEVELS.value),
                                     tuple(float(v) for v in _LEVEL_RATIOS.value))
    except ValueError as e:  # issue 50: the message named no flag
      raise ValueError(f"--levels/--level_ratios: {e}") from None
  return preferences.make_distribution(_DISTRIBUTION.value)


def check() -> dict:
  """The flag checks that need no data and no TensorFlow (``cli.launch`` runs them first).

  Returns the checked values main uses: the methods (under ``--release_only``
  the default has no PrivacyFree), seeds, the two-stage parameters, whether
  budgets follow the classes, the audit's levels and the distribution.
  """
  worker_flags.runtime_kwargs()
  # The canary runs of --audit_canaries always use TFF client work (not refused here).
  execution = worker_flags.training_kwargs(audit_canaries=0)
  unknown = set(_METHODS.value) - set(record_plan.METHODS)
  if unknown or not _METHODS.value:
    raise ValueError(f"--methods has {sorted(unknown) or 'nothing'}; choose from "
                     f"{', '.join(record_plan.METHODS)}.")
  # PrivacyFree trains without noise: no release holds it (issue 48).
  methods = privacy_flags.without_non_private("methods", _METHODS.value, ("privacy_free",))
  seeds = cli.int_list("seeds")
  if not seeds:
    raise ValueError("--seeds is empty; give at least one seed.")
  params = TwoStageParams(_NOISE.value, _LOCAL_STEPS.value, _ROUNDS.value,
                          _CLIENT_RATE.value, _DELTA.value, _THREAT.value)
  if not _CLIP.value > 0 or math.isinf(_CLIP.value):
    raise ValueError(f"--clip_norm={_CLIP.value} must be a finite number > 0.")
  by_class = _DISTRIBUTION.value == preferences.BY_CLASS
  if by_class and not _CLASS_BUDGETS.value:
    raise ValueError("--distribution=by_class needs --class_budgets, one ε per class, "
                     "e.g. --class_budgets=0-4:0.1,5-9:1.")
  if by_class:  # the syntax and every ε now; the classes once the data is loaded
    try:
      preferences.parse_class_budgets(_CLASS_BUDGETS.value, num_classes=None)
    except ValueError as e:
      raise ValueError(f"--class_budgets: {e}") from None
  if _CLASS_BUDGETS.value and not by_class:
    raise ValueError(f"--class_budgets is only used with --distribution=by_class (not "
                     f"{_DISTRIBUTION.value}); drop it or set --distribution=by_class.")
  if _FRESH_BUDGETS.value and by_class:
    raise ValueError("--fresh_budgets_per_seed draws budgets from a distribution; under "
                     "--distribution=by_class every record's budget is its class's, so "
                     "there is nothing to draw again: drop one of them.")
  if _AUDIT_CANARIES.value < 0:
    raise ValueError(f"--audit_canaries={_AUDIT_CANARIES.value} must be >= 0.")
  if _AUDIT_CANARIES.value and privacy_flags.release_only():
    # The audit trains each private method again on the same records: a second
    # release of them that no record's ledger charges (issue 48).
    raise ValueError(f"--audit_canaries={_AUDIT_CANARIES.value} trains again on the same "
                     "records, which no ledger accounts for: run the audit without "
                     "--release_only.")
  audit_levels = None
  if _AUDIT_LEVELS.value:
    try:
      audit_levels = [float(v) for v in _AUDIT_LEVELS.value]
    except ValueError:
      raise ValueError(f"--audit_levels={','.join(_AUDIT_LEVELS.value)} must be numbers "
                       "(budget levels ε).") from None
    if not _AUDIT_CANARIES.value:
      raise ValueError("--audit_levels is only used with --audit_canaries=k.")
  if _DATASET.value == "synthetic":
    cli.refuse_inapplicable(
        ("data_dir", "split_dir", "partition", "model"),
        "--dataset=synthetic is the embedded federation (it reads no files, has no "
        "partition and always trains logistic regression)")
  else:
    cli.refuse_inapplicable(
        ("users_per_silo", "iid"),
        f"they shape the embedded federation, and --dataset={_DATASET.value} is not it")
  return {"methods": methods, "seeds": seeds, "params": params, "by_class": by_class,
          "audit_levels": audit_levels, "distribution": make_distribution(),
          "execution": execution}


@cli.entry
def main(argv):
  del argv
  fleet_kwargs = worker_flags.runtime_kwargs()  # bad worker flags fail before any work
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  try:
    checked = check()
    seeds, params, by_class = checked["seeds"], checked["params"], checked["by_class"]
    audit_levels, distribution = checked["audit_levels"], checked["distribution"]
    cli.prepare_output_dir(_OUTPUT_DIR.value)
    # TensorFlow loads here, once the flags are known to be valid.
    from tff_idp.audit import record_canaries  # pylint: disable=g-import-not-at-top
    from tff_idp.audit import report as audit_report  # pylint: disable=g-import-not-at-top
    from tff_idp.ino_sgd import importance  # pylint: disable=g-import-not-at-top
    from tff_idp.rpdp import runs as record_runs  # pylint: disable=g-import-not-at-top
    local_weight_fn, local_algorithm = None, _LOCAL_ALGORITHM.value
    if local_algorithm == "ino_sgd":
      try:
        tif = importance.beta_antiderivative(_INO_ALPHA.value, _INO_BETA.value,
                                             _INO_GAMMA.value)
      except ValueError as e:
        raise ValueError(f"--ino_gamma/--ino_alpha/--ino_beta: {e}") from None
      local_weight_fn = importance.ino_example_weight_fn(antiderivative=tif)
      local_algorithm = f"ino_sgd(γ={_INO_GAMMA.value:g}, {tif.name})"
    if _DATASET.value == "synthetic":
      federation = synthetic_federation(_NUM_CLIENTS.value, _USERS_PER_SILO.value,
                                        _IID.value, _DATA_SEED.value)
    else:
      own_split = _DATASET.value not in ("fmnist", "cifar10", "svhn")
      # Your own split keeps its clients unless --num_clients is given.
      num_clients = (None if own_split and not flags.FLAGS["num_clients"].present
                     else _NUM_CLIENTS.value)
      federation = split_federation(_DATASET.value, _PARTITION.value, num_clients,
                                    _DATA_SEED.value, _DATA_DIR.value, _SPLIT_DIR.value,
                                    _MODEL.value, _HEAD.value)
    class_groups, described = None, _DISTRIBUTION.value
    if by_class:
      try:
        class_budgets = preferences.parse_class_budgets(_CLASS_BUDGETS.value,
                                                        federation.num_classes)
        class_groups = preferences.class_groups(class_budgets)
      except ValueError as e:
        raise ValueError(f"--class_budgets: {e}") from None
      described = f"by_class ({','.join(_CLASS_BUDGETS.value)})"
      budgets = preferences.class_record_budgets(federation.records.y, class_budgets)
      dropout_cutoff = preferences.class_budget_cutoff(class_budgets)
    elif _FRESH_BUDGETS.value:
      sizes = federation.records.sizes
      budgets = lambda seed: preferences.assign_record_budgets(  # noqa: E731
          distribution, sizes, preferences.per_seed_budget_seed(_BUDGET_SEED.value, seed))
      dropout_cutoff = preferences.expected_budget(distribution)
    else:
      budgets = preferences.assign_record_budgets(distribution, federation.records.sizes,
                                                  _BUDGET_SEED.value)
      dropout_cutoff = preferences.expected_budget(distribution)
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  # The exact record count is a statistic of the private records: a release prints none.
  n = sum(federation.records.sizes.values())
  records = "" if privacy_flags.release_only() else f"{n} records, "
  print(f"federation: {federation.name}: {records}{len(federation.test_y)} test; "
        f"{described}; T={params.rounds}, τ={params.local_steps}, "
        f"λ={params.client_rate:g}, σ={params.noise_multiplier:g}, L={_CLIP.value:g}, "
        f"δ={params.delta:g}, {params.threat_model}, local: {local_algorithm}")
  with runtime.execution_context(device=_DEVICE.value, **fleet_kwargs):
    try:
      results = record_runs.run(federation, budgets, params, checked["methods"], seeds,
                    _OUTPUT_DIR.value, _CLIP.value, _LR.value, _PF_BATCH.value, _EVAL_EVERY.value,
                    _CHECKPOINT_EVERY.value, _PROGRESS.value, _ESTIMATOR.value,
                    privacy_flags.insecure(), privacy_flags.release_only(),
                    local_weight_fn, local_algorithm, class_groups, _RESTART.value,
                    audit=(record_canaries.RecordCanaryAudit(
                        _AUDIT_CANARIES.value, _AUDIT_SEED.value, audit_levels)
                           if _AUDIT_CANARIES.value else None),
                    dropout_cutoff=dropout_cutoff, **checked["execution"])
    except record_runs.AuditConfigError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
  config = {h.name: h.value for h in globals().values() if isinstance(h, flags.FlagHolder)}
  config["methods"] = checked["methods"]  # --release_only's default has no PrivacyFree
  table = record_runs.write_summary(
      results, len(seeds), _OUTPUT_DIR.value, config, privacy_warning=privacy_flags.warning(),
      sections=[("Empirical privacy audit (record-level canaries, first seed)",
                 audit_report.format_record_audit_table(results))])
  print()
  print(table)
  print(f"\nmetrics, checkpoints, summary.md/json and accuracy.png in {_OUTPUT_DIR.value}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check=check)
