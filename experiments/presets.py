"""The paper's experiment presets (IDP-FedAvg, Sec. V-C, V-D and Table I).

Shared by `experiments.fmnist`, `experiments.cifar10` and `experiments.svhn`:
each module holds one `PaperPreset`, calls `define_flags(PRESET)` and runs
`main(PRESET)`. Defaults are the paper's (Sec. V-C; the paper's code,
luckyos-code/flidp, `emnist.sh` / `cifar10.sh`):

* 420 rounds, c = 30 expected clients per round, server SGD lr 1.0, client
  Adam lr 0.0005, batch 128, 15 local epochs, adaptive clipping with the
  standard setup of Andrew et al. (the aggregator's defaults), the 14-layer
  CNN (`tff_idp.models.build_idp_fedavg_cnn`);
* ε 1-2-3 for FMNIST and 10-20-30 for SVHN and CIFAR-10;
* δ = 1e-5 for FMNIST and 1e-4 for SVHN and CIFAR-10: the paper does not
  state δ, and its code sets `DELTA = 1e-5` in `src/experiments/emnist.py`
  and `DELTA = 1e-4` in `svhn.py` and `cifar10.py`;
* distributions 0-0-0 (`nonprivate`), 0-0-100, 34-43-23, 54-37-9, 100-0-0;
* FMNIST `--comparison=aldaghri`: ε 0.6-∞-∞ at 95-0-5 (Sec. VI, against
  Aldaghri et al.'s SCALE result of 86.9%). Its 169 ε = ∞ clients would all
  be sampled every round at the default rate cap of 1 (more than c = 30, so
  SAMPLE has no solution); the preset caps every rate at `--max_rate=0.1`
  (≈ 17 of the 30 expected clients per round are opt-outs). The paper's code
  used ε = 1e20 for "∞" instead; pass `--budgets=0.6,1e20,1e20` to mimic it.

The split comes from `datasets.loader.prepare_split`: `--split_dir` if it
holds one (any split of this dataset; the partition flags are then only
checked if given), else it is built there (default
~/.tff_idp/splits/<name>) from the source files in `--data_dir`.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import os
import sys
from typing import Optional

from absl import flags
from absl import logging as absl_logging

from datasets import loader
from datasets import sources
from datasets import specs
from experiments import audit_flags
from experiments import worker_flags
from experiments import privacy_flags
from tff_idp import cli
from tff_idp.accounting import exact
from tff_idp.idp_fedavg import config as config_lib

PAPER_RUNS = ("nonprivate", "0-0-100", "34-43-23", "54-37-9", "100-0-0")
PAPER_RATIOS = ("0.34", "0.43", "0.23")

# Table I of the paper: accuracy (%), final model, per run spec.
_T1_ROWS = ("nonprivate", "0-0-100", "34-43-23", "54-37-9", "100-0-0")
TABLE_I = {
    ("fmnist", True): dict(zip(_T1_ROWS, (98.2, 96.5, 95.9, 95.4, 93.9))),
    ("fmnist", False): dict(zip(_T1_ROWS, (97.0, 95.1, 94.6, 93.5, 90.7))),
    ("svhn", True): dict(zip(_T1_ROWS, (86.6, 80.9, 79.3, 78.2, 76.5))),
    ("cifar10", True): dict(zip(_T1_ROWS, (61.0, 50.1, 44.6, 41.9, 38.4))),
    ("cifar10", False): dict(zip(_T1_ROWS, (44.2, 30.1, 26.5, 25.4, 16.8))),
}
# Sec. VI: FMNIST non-i.i.d., ε 0.6-∞-∞ at 95-0-5 (SAMPLE; SCALE in [15]: 86.9).
ALDAGHRI = {"budgets": ("0.6", "inf", "inf"), "runs": ("95-0-5",), "max_rate": 0.1,
            "paper_accuracy": 90.8, "scale_accuracy_in_15": 86.9}


@dataclasses.dataclass(frozen=True)
class PaperPreset:
  dataset: str
  budgets: tuple[str, ...]
  delta: float
  rounds: int = 420
  clients_per_round: float = 30
  local_epochs: int = 15
  batch_size: int = 128
  client_optimizer: str = "adam"
  client_learning_rate: float = 0.0005
  server_learning_rate: float = 1.0
  runs: tuple[str, ...] = PAPER_RUNS
  ratios: tuple[str, ...] = PAPER_RATIOS
  seeds: tuple[str, ...] = ("0",)
  comparisons: tuple[str, ...] = ()

  @property
  def info(self) -> specs.DatasetInfo:
    return specs.info(self.dataset)


PRESETS = {
    "fmnist": PaperPreset("fmnist", ("1", "2", "3"), 1e-5, comparisons=("aldaghri",)),
    "cifar10": PaperPreset("cifar10", ("10", "20", "30"), 1e-4),
    "svhn": PaperPreset("svhn", ("10", "20", "30"), 1e-4),
}


def define_flags(p: PaperPreset) -> None:
  """Defines this preset's absl flags (once per process) with its defaults."""
  d = p.info
  flags.DEFINE_list("budgets", list(p.budgets), "Per-group ε (inf allowed).")
  flags.DEFINE_list("ratios", list(p.ratios), "Group ratios for the 'idp'/'scale' specs.")
  flags.DEFINE_list("runs", list(p.runs),
                    "Run specs: nonprivate | A-B-C (IDP-SAMPLE; one non-empty group = "
                    "uniform DP) | idp | scale[:A-B-C]. Default: Table I's rows "
                    "(--release_only: without nonprivate, which it refuses given).")
  flags.DEFINE_list("seeds", list(p.seeds), "Training seeds (accuracy is averaged).")
  flags.DEFINE_integer("rounds", p.rounds, "Federated rounds.")
  flags.DEFINE_float("clients_per_round", p.clients_per_round, "Expected clients c.")
  flags.DEFINE_integer("local_epochs", p.local_epochs, "Local epochs per round.")
  flags.DEFINE_integer("batch_size", p.batch_size, "Client batch size.")
  flags.DEFINE_enum("client_optimizer", p.client_optimizer, ["sgd", "adam"],
                    "Client optimizer.")
  flags.DEFINE_float("client_learning_rate", p.client_learning_rate, "Client lr.")
  flags.DEFINE_float("server_learning_rate", p.server_learning_rate, "Server SGD lr.")
  flags.DEFINE_float("delta", p.delta, "Target δ (see experiments/presets.py).")
  flags.DEFINE_enum("accountant", "rdp", list(exact.ACCOUNTANTS), "Privacy accountant.")
  flags.DEFINE_enum("partition", d.partitions[0], list(d.partitions),
                    "How the training set is split over clients.")
  flags.DEFINE_bool("iid", False, "Shorthand for --partition=iid.")
  flags.DEFINE_integer("num_clients", None, f"Clients (default: the paper's; {d.num_clients}).")
  flags.DEFINE_integer("split_seed", 0, "Seed of the partition.")
  flags.DEFINE_string("data_dir", sources.DEFAULT_DATA_DIR,
                      "Source files (used only when the split must be built).")
  flags.DEFINE_string("split_dir", None, "Split directory: used if it holds a split, "
                      f"else built there (default {loader.DEFAULT_SPLITS_DIR}/<name>).")
  flags.DEFINE_bool("download", False, "Fetch missing source files while building.")
  flags.DEFINE_string(
      "dataset", None,
      f"Run this preset's recipe (Table I hyperparameters, the paper's CNN) on another "
      f"image split instead of {p.dataset}: the path of a split directory "
      "(datasets.from_arrays(...).save(dir) or python -m datasets.build) or "
      "tfds:<name> (a prepared TensorFlow Datasets dataset; --partition/--num_clients/"
      "--split_seed apply).")
  flags.DEFINE_string("output_dir", None, "Metrics, checkpoints, summaries "
                      f"(default runs/{p.dataset}-<partition>[-<comparison>]).")
  flags.DEFINE_integer("eval_every", 10, "Evaluate every k rounds.")
  flags.DEFINE_integer("eval_batch_size", 1024, "Test-set batch for evaluation.")
  flags.DEFINE_integer("checkpoint_every", 10, "Checkpoint every k rounds.")
  flags.DEFINE_bool("allow_overrun", False, "Run past the calibrated rounds (reported).")
  flags.DEFINE_float("max_rate", 1.0, "Cap on any client's sampling rate.")
  flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "TFF worker device.")
  flags.DEFINE_bool("progress", True, "Progress bars.")
  flags.DEFINE_bool("restart", False, "Discard the checkpoints and metrics in --output_dir "
                    "and start fresh (default: resume).")
  privacy_flags.define()
  audit_flags.define()
  worker_flags.define()
  worker_flags.define_client_execution()
  if p.comparisons:
    flags.DEFINE_enum("comparison", None, list(p.comparisons),
                      "aldaghri: ε 0.6-∞-∞ at 95-0-5 with --max_rate=0.1 (Sec. VI).")


def _present(name: str) -> bool:
  return flags.FLAGS[name].present > 0


def resolved_flags(p: PaperPreset) -> dict:
  """Flag values with the comparison preset applied where flags were not given."""
  F = flags.FLAGS
  v = {name: F[name].value for name in F if name in _FLAG_NAMES}
  if p.comparisons and F["comparison"].value == "aldaghri":
    for key in ("budgets", "runs"):
      if not _present(key):
        v[key] = list(ALDAGHRI[key])
    if not _present("max_rate"):
      v["max_rate"] = ALDAGHRI["max_rate"]
    if not _present("partition") and not F["iid"].value:
      v["partition"] = p.info.partitions[0]
  # No release holds a run without noise (issue 48): --release_only drops or refuses it.
  v["runs"] = privacy_flags.without_non_private("runs", v["runs"], ("nonprivate",))
  if v["iid"]:
    if _present("partition") and v["partition"] != "iid":
      raise ValueError(f"--iid contradicts --partition={v['partition']}.")
    v["partition"] = "iid"
  return v


_FLAG_NAMES = frozenset([
    "budgets", "ratios", "runs", "seeds", "rounds", "clients_per_round", "local_epochs",
    "batch_size", "client_optimizer", "client_learning_rate", "server_learning_rate",
    "delta", "accountant", "partition", "iid", "num_clients", "split_seed", "data_dir",
    "split_dir", "download", "dataset", "output_dir", "eval_every", "eval_batch_size",
    "checkpoint_every", "allow_overrun", "max_rate", "device", "progress", "comparison",
    "restart", audit_flags.AUDIT_CANARIES, audit_flags.AUDIT_SEED, *worker_flags._NAMES,  # pylint: disable=protected-access
    *worker_flags.EXECUTION_NAMES,
    privacy_flags.INSECURE, privacy_flags.RELEASE_ONLY])


def _config(p: PaperPreset, v: dict):
  """The `TrainingConfig` of these flag values (no TensorFlow)."""
  budgets = [cli.parse_item("budgets", b, cli.LIST_RULES["budgets"]) for b in v["budgets"]]
  ratios = [cli.parse_item("ratios", r, cli.LIST_RULES["ratios"]) for r in v["ratios"]]
  seeds = [cli.parse_item("seeds", s, cli.LIST_RULES["seeds"]) for s in v["seeds"]]
  suffix = f"-{v['comparison']}" if v.get("comparison") else ""
  out = v["output_dir"] or os.path.join("runs", f"{p.dataset}-{v['partition']}{suffix}")
  return config_lib.TrainingConfig(
      budgets=budgets, ratios=ratios, runs=list(v["runs"]), seeds=seeds,
      rounds=v["rounds"], clients_per_round=v["clients_per_round"],
      local_epochs=v["local_epochs"], batch_size=v["batch_size"],
      client_learning_rate=v["client_learning_rate"],
      server_learning_rate=v["server_learning_rate"],
      client_optimizer=v["client_optimizer"], delta=v["delta"],
      accountant=v["accountant"], output_dir=out, eval_every=v["eval_every"],
      checkpoint_every=v["checkpoint_every"], allow_overrun=v["allow_overrun"],
      max_rate=v["max_rate"], progress=v["progress"],
      insecure_reproducible_noise=v[privacy_flags.INSECURE],
      release_only=v[privacy_flags.RELEASE_ONLY], restart=v["restart"],
      audit_canaries=v[audit_flags.AUDIT_CANARIES], audit_seed=v[audit_flags.AUDIT_SEED],
      **worker_flags.training_kwargs(v, v[audit_flags.AUDIT_CANARIES]))


def paper_table(p: PaperPreset, partition: str, results: list[dict],
                comparison: Optional[str] = None) -> str:
  """Measured accuracy next to the paper's (Table I, or Sec. VI's comparison)."""
  iid = partition == "iid"
  ref = dict(TABLE_I.get((p.dataset, iid), {}))
  if comparison == "aldaghri":
    ref = {"95-0-5": ALDAGHRI["paper_accuracy"]}
  lines = [f"| run | measured here (%) | paper (%), {p.dataset} "
           f"{'i.i.d.' if iid else 'non-i.i.d.'} |", "|---|---|---|"]
  for r in results:
    paper = ref.get(r["run"])
    lines.append(f"| {r['run']} | {100 * r['mean_accuracy']:.1f} | "
                 f"{'—' if paper is None else f'{paper:.1f}'} |")
  return "\n".join(lines)


def _find_split(p: PaperPreset, v: dict):
  """(opened split, None) if one exists, else (None, (spec, split_dir, clients)).

  When the split must be built, its source files are located now, so that
  missing data fails in a second, before any calibration runs.
  """
  if v.get("dataset"):
    import datasets as datasets_lib  # pylint: disable=g-import-not-at-top
    other = v["dataset"]
    if other.startswith("tfds:"):
      split = datasets_lib.resolve(other, partition=v["partition"] if _present("partition")
                                   else None, num_clients=v["num_clients"],
                                   seed=v["split_seed"], data_dir=None,
                                   split_dir=v["split_dir"], download=v["download"],
                                   progress=v["progress"])
    else:
      split = datasets_lib.resolve(other)
    return split, None
  spec = specs.FederationSpec(p.dataset, v["partition"], v["num_clients"],
                              v["split_seed"]).resolved()
  split_dir = os.path.expanduser(v["split_dir"] or loader.default_split_dir(spec))
  explicit = any(_present(k) for k in ("partition", "iid", "num_clients", "split_seed"))
  if loader.has_split(split_dir):
    split = loader.open_split(split_dir, expected=spec if explicit else None,
                              dataset=p.dataset)
    if split.dataset != p.dataset:
      raise ValueError(f"{split_dir} holds a {split.dataset} split, not {p.dataset}.")
    return split, None
  from datasets import builder  # pylint: disable=g-import-not-at-top
  location = builder.locate(spec, os.path.expanduser(v["data_dir"]), v["download"])
  k = spec.num_clients
  if k is None:                                 # FMNIST: one client per writer
    k = sources.count_emnist_writers(location)
  return None, (spec, split_dir, k)


def run(p: PaperPreset) -> int:
  """Flags → split → calibration → training → tables. Exit code 0, or 2 on errors."""
  absl_logging.set_verbosity(absl_logging.WARNING)
  try:
    # Flag and data errors first: these need no TensorFlow and fail in a second.
    v = resolved_flags(p)
    fleet_kwargs = worker_flags.runtime_kwargs(v)
    worker_flags.training_kwargs(v, v[audit_flags.AUDIT_CANARIES])  # fails before any work
    config_lib.check_settings(_config(p, v))
    split, pending = _find_split(p, v)
  except (ValueError, FileNotFoundError, sources.SourceNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from experiments import common  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  try:
    config = _config(p, v)
    privacy_flags.announce()
    config.output_dir = cli.prepare_output_dir(config.output_dir)
    expected_k = split.num_clients if split is not None else pending[2]
    common.validate(config, expected_k)
    if split is None:
      split = loader.prepare_split(pending[0], os.path.expanduser(v["data_dir"]),
                                   pending[1], v["download"], v["progress"])
    train = split.train_client_data()
    num_clients = len(train.client_ids)
    if num_clients != expected_k:
      common.validate(config, num_clients)
  except (ValueError, FileNotFoundError, sources.SourceNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  partition = split.manifest["partition"] if split.manifest else v["partition"]
  test_x, test_y = split.evaluation_arrays()
  info = split.info
  try:
    keras_builder = models.builder_for(info.input_shape, info.num_classes, "cnn",
                                       rescale=info.rescale)
  except ValueError as e:
    print(f"error: --dataset: {e}", file=sys.stderr)
    return 2
  input_spec = collections.OrderedDict(
      x=tf.TensorSpec((None,) + info.input_shape, tf.float32),
      y=tf.TensorSpec((None,), tf.int32))
  model_fn = models.tff_model_fn(keras_builder, input_spec)
  print(f"federation: {v.get('dataset') or p.dataset} ({partition}) from "
        f"{getattr(split, 'directory', '?')}: {num_clients} "
        f"clients, {len(test_y)} test examples; {config.rounds} rounds, "
        f"c={config.clients_per_round:g}, ε {'-'.join(v['budgets'])}, δ={config.delta:g}, "
        f"{config.accountant}", flush=True)
  try:
    with runtime.execution_context(device=v["device"], **fleet_kwargs):
      results = common.run_all(config, train, model_fn, keras_builder, test_x, test_y,
                               eval_batch_size=v["eval_batch_size"])
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print()
  print(common.format_table(config, results))
  print()
  if not v.get("dataset"):  # the paper's numbers are for its own dataset
    print(paper_table(p, partition, results, v.get("comparison")))
  print(f"\nmetrics, checkpoints, summary.md and accuracy.png in {config.output_dir}")
  return 0


def check(p: PaperPreset) -> None:
  """The flag checks that need no data (``cli.launch`` runs them before TensorFlow)."""
  v = resolved_flags(p)
  worker_flags.runtime_kwargs(v)
  config_lib.check_settings(_config(p, v))
  other = v.get("dataset")
  if other:  # issue 33: these flags were ignored silently with --dataset
    cli.refuse_inapplicable(("data_dir",), f"it holds {p.dataset}'s source files, and "
                            f"--dataset={other} replaces {p.dataset}")
    if not other.startswith("tfds:"):
      cli.refuse_inapplicable(
          ("partition", "iid", "num_clients", "split_seed", "split_dir", "download"),
          f"--dataset={other} is a split directory, already partitioned and built")


def main(p: PaperPreset) -> None:
  """Entry point of a preset module: bad flags fail before TensorFlow (:func:`tff_idp.cli.launch`)."""
  cli.launch(cli.entry(lambda argv: run(p)), check=lambda: check(p))
