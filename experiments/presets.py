"""The IDP-FedAvg paper's presets as command lines (Sec. V-C, V-D and Table I).

Shared by `experiments.fmnist`, `experiments.cifar10` and `experiments.svhn`:
each module holds one preset of :mod:`tff_idp.idp_fedavg.paper_presets` (the
paper's defaults and Table I, explained there), calls `define_flags(PRESET)`
and runs `main(PRESET)`. The split comes from `datasets.loader.prepare_split`:
`--split_dir` if it holds one (any split of this dataset; the partition flags
are then only checked if given), else it is built there (default
~/.tff_idp/splits/<name>) from the source files in `--data_dir`.
"""
from __future__ import annotations

import logging
import os
import sys

from absl import flags
from absl import logging as absl_logging

from datasets import loader
from datasets import sources
from datasets import specs
from datasets import training_data
from experiments import audit_flags
from experiments import privacy_flags
from experiments import training_flags
from experiments import worker_flags
from tff_idp import cli
from tff_idp.idp_fedavg import config as config_lib
from tff_idp.idp_fedavg import paper_presets

PaperPreset = paper_presets.PaperPreset
PRESETS = paper_presets.PRESETS


def define_flags(p: PaperPreset) -> None:
  """Defines this preset's absl flags (once per process) with its defaults."""
  d = specs.info(p.dataset)
  training_flags.define(
      p.training_defaults(), runs=list(p.runs), seeds=list(p.seeds),
      runs_help="Run specs: nonprivate | A-B-C (IDP-SAMPLE; one non-empty group = uniform "
      "DP) | idp | scale[:A-B-C]. Default: Table I's rows (--release_only: without "
      "nonprivate, which it refuses given).", seeds_help="Training seeds (accuracy is averaged).")
  flags.adopt_module_key_flags(training_flags)
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
  flags.DEFINE_integer("eval_batch_size", 1024, "Test-set batch for evaluation.")
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
    aldaghri = paper_presets.ALDAGHRI
    for key in ("budgets", "runs"):
      if not _present(key):
        v[key] = list(aldaghri[key])
    if not _present("max_rate"):
      v["max_rate"] = aldaghri["max_rate"]
    if not _present("partition") and not F["iid"].value:
      v["partition"] = specs.info(p.dataset).partitions[0]
  # No release holds a run without noise (issue 48): --release_only drops or refuses it.
  v["runs"] = privacy_flags.without_non_private("runs", v["runs"], ("nonprivate",))
  if v["iid"]:
    if _present("partition") and v["partition"] != "iid":
      raise ValueError(f"--iid contradicts --partition={v['partition']}.")
    v["partition"] = "iid"
  return v


_FLAG_NAMES = training_flags.NAMES | frozenset([
    "partition", "iid", "num_clients", "split_seed", "data_dir", "split_dir", "download",
    "dataset", "output_dir", "eval_batch_size", "comparison"])


def _config(p: PaperPreset, v: dict) -> config_lib.TrainingConfig:
  """The `TrainingConfig` of these flag values (no TensorFlow)."""
  suffix = f"-{v['comparison']}" if v.get("comparison") else ""
  out = v["output_dir"] or os.path.join("runs", f"{p.dataset}-{v['partition']}{suffix}")
  return training_flags.training_config(v, out)


def _find_split(p: PaperPreset, v: dict):
  """(opened split, None) if one exists, else (None, (spec, split_dir, clients))."""
  return training_data.find_preset_split(
      p.dataset, other=v.get("dataset"), partition=v["partition"],
      partition_given=_present("partition"), num_clients=v["num_clients"],
      seed=v["split_seed"], split_dir=v["split_dir"], data_dir=v["data_dir"],
      download=v["download"], progress=v["progress"],
      explicit=any(_present(k) for k in ("partition", "iid", "num_clients", "split_seed")))


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
  model_fn = models.tff_model_fn(keras_builder, models.input_spec_for(info.input_shape))
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
    print(paper_presets.paper_table(p, partition, results, v.get("comparison")))
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
