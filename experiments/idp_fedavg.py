"""IDP-FedAvg on the embedded Synthetic IID federation (the main job).

Runs the paper's Table I distributions (IDP-FedAvg paper, Sec. V-D: non-private,
0-0-100, 34-43-23, 54-37-9, 100-0-0 at ε 1-2-3) and the SCALE baseline
(Sec. VI) through one round loop, and prints per run: σ (the overall noise
multiplier of Alg. 1, which the ledger charges), z_Δ (the multiplier left for
the clipped-update sum once adaptive clipping has spent its share on the
count bit, σ_b), the per-group sampling rates, the final accuracy over the
seeds, and a paired t-test against the row it should beat (the row above;
SCALE against SAMPLE on the same distribution):

  python -m experiments.idp_fedavg                       # defaults below
  python -m experiments.idp_fedavg --runs=idp,scale --ratios=0.34,0.43,0.23

The federation needs no network: 700 clients generated from --data_seed.

Why these defaults (a regime where the noise, not clipping, decides within 20
rounds on two CPU cores: 700 clients, c = 10, --initial_clip=2.5, 5 local
epochs at learning rate 0.6, 8 seeds, σ_b = c/20) and what they measure:
docs/idp_fedavg.md, "python -m experiments.idp_fedavg".
"""
from __future__ import annotations

import logging
import sys

from absl import flags
from absl import logging as absl_logging
from datasets import synthetic
from datasets import training_data
from experiments import privacy_flags
from experiments import training_flags
from experiments import worker_flags
from tff_idp import cli
from tff_idp import model_catalog
from tff_idp.execution import runtime
from tff_idp.accounting import validation
from tff_idp.idp_fedavg import config as config_lib

D = config_lib.TRAINING_DEFAULTS  # shared with tff_idp.run_idp_fedavg
training_flags.define(
    D, runs=["nonprivate", "0-0-100", "34-43-23", "54-37-9", "100-0-0", "scale"],
    seeds=[str(s) for s in range(8)],
    runs_help="Run specs: nonprivate | A-B-C (IDP-SAMPLE with A%/B%/C% of clients per "
    "budget; one non-empty group = uniform DP) | idp (uses --ratios) | "
    "scale[:A-B-C] (SCALE baseline). --release_only: the default leaves nonprivate out, "
    "and refuses it given (it trains without noise).",
    seeds_help="Training seeds (model init, data order, group assignment); accuracies are "
    "averaged over them and runs are paired by seed for the table's t-tests.")
flags.adopt_module_key_flags(training_flags)  # --help lists them as this command's
_IID = flags.DEFINE_bool(
    "iid", True, "i.i.d. Synthetic (default). --noiid gives Synthetic(α, β), whose "
    "per-client labelling functions leave little for one global model to learn.")
_NUM_CLIENTS = flags.DEFINE_integer(
    "num_clients", 700, "Clients in the federation (the paper's FMNIST has 3,383).")
_ALPHA = flags.DEFINE_float("alpha", 0.5, "Synthetic(α, β): model heterogeneity.")
_BETA = flags.DEFINE_float("beta", 0.5, "Synthetic(α, β): feature heterogeneity.")
_DATA_SEED = flags.DEFINE_integer("data_seed", 0, "Seed of the generated federation.")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 60, "Synthetic feature dimension d.")
_NUM_CLASSES = flags.DEFINE_integer("num_classes", 10, "Synthetic classes.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/idp_fedavg",
                                  "Metrics, checkpoints and summaries go here.")
_MODEL = flags.DEFINE_enum(
    "model", D["model"], list(model_catalog.MODELS),
    "logreg (multinomial logistic regression) or mlp (64 hidden units) for feature "
    "vectors, cnn (the paper's 14-layer CNN) for images; auto: logreg for vectors, cnn "
    "for images.")
_HEAD = flags.DEFINE_enum(
    "head", D["head"], list(model_catalog.HEADS),
    "Output head: softmax (K logits) or sigmoid (one logit; binary labels 0/1).")
_DATASET = flags.DEFINE_string(
    "dataset", "synthetic",
    "Federation: 'synthetic' (embedded, the flags below), the path of a split directory "
    "(datasets.from_arrays(...).save(dir) or python -m datasets.build), tfds:<name> (a "
    "prepared TensorFlow Datasets image dataset; --partition, --num_clients, --data_seed, "
    "--data_dir apply), or fmnist | cifar10 | svhn (datasets/ builders).")
_PARTITION = flags.DEFINE_string("partition", None,
                                 "tfds:<name> / built-in datasets: the partition.")
_DATA_DIR = flags.DEFINE_string("data_dir", None,
                                "tfds:<name>: the TFDS data_dir; built-in: source files.")
_INITIAL_CLIP = flags.DEFINE_float(
    "initial_clip", D["initial_clip"],
    "Adaptive clipping's C at round 0, near its steady state here. Andrew et al. "
    "2021 start at 0.1, from which C grows at most ×1.105 per round.")
_CLIPPED_COUNT_STDDEV = flags.DEFINE_float(
    "clipped_count_stddev", D["clipped_count_stddev"],
    "σ_b, noise std of the adaptive clip's count bit (Andrew et al. 2021). Default: "
    "0.05·c (c = each run's expected clients per round), or σ where 0.05·c <= σ/2 "
    "would be infeasible (then z_Δ ≈ 1.155σ). Needs σ_b > σ/2; the "
    "value noise z_Δ = (σ⁻² − (2σ_b)⁻²)^(-1/2) shrinks toward σ as σ_b grows, the "
    "clip's estimate gets noisier. Accounted either way: the ledger charges σ.")


def training_config() -> config_lib.TrainingConfig:
  """The flags as a TrainingConfig (no TensorFlow); bad worker/execution flags raise here."""
  return training_flags.training_config(
      training_flags.values(), _OUTPUT_DIR.value, head=_HEAD.value,
      clipped_count_stddev=_CLIPPED_COUNT_STDDEV.value, initial_clip=_INITIAL_CLIP.value)


def check() -> None:
  """Every check the flags need no data for (run by ``cli.launch`` before TensorFlow)."""
  worker_flags.runtime_kwargs()
  config_lib.check_settings(training_config())
  if _DATASET.value == "synthetic":  # the embedded federation's size is known before any data
    validation.check_cohort(flags.FLAGS.clients_per_round, _NUM_CLIENTS.value)
    synthetic_config()
  _refuse_flags_of_another_dataset()


def synthetic_config() -> synthetic.SyntheticConfig:
  """The embedded federation's flags as its config; a bad value names its flag (issue 50)."""
  try:
    return synthetic.SyntheticConfig(
        num_clients=_NUM_CLIENTS.value, alpha=_ALPHA.value, beta=_BETA.value,
        iid=_IID.value, seed=_DATA_SEED.value, num_features=_NUM_FEATURES.value,
        num_classes=_NUM_CLASSES.value)
  except ValueError as e:  # "num_features must be ..." -> "--num_features must be ..."
    message = str(e)
    raise ValueError("--" + ("data_" + message if message.startswith("seed ") else message)
                     ) from None


# Flags that shape the embedded federation only, and those that choose or build a split.
SYNTHETIC_ONLY = ("iid", "alpha", "beta", "num_features", "num_classes")
SPLIT_ONLY = ("partition", "data_dir")


def _refuse_flags_of_another_dataset() -> None:
  """A flag the chosen --dataset ignores is refused (issue 33: it was accepted silently)."""
  dataset = _DATASET.value
  if dataset == "synthetic":
    cli.refuse_inapplicable(SPLIT_ONLY, "they choose or build a split, and --dataset=synthetic "
                            "is the embedded federation (its flags: --num_clients, --iid, "
                            "--alpha, --beta, --data_seed, --num_features, --num_classes)")
    return
  cli.refuse_inapplicable(SYNTHETIC_ONLY, "they shape the embedded federation, and "
                          f"--dataset={dataset} is not it")
  if dataset not in cli.NAMED_DATASETS and not dataset.startswith("tfds:"):
    cli.refuse_inapplicable(("data_dir",), f"--dataset={dataset} is a split directory, "
                            "already built from its source files")


@cli.entry
def main(argv):
  del argv
  fleet_kwargs = worker_flags.runtime_kwargs()  # bad worker flags fail before any work
  config = training_config()
  config_lib.check_settings(config)
  # TensorFlow loads here, once the flags are known to be valid.
  from experiments import common  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  privacy_flags.announce()
  config.output_dir = cli.prepare_output_dir(config.output_dir)
  if _DATASET.value == "synthetic":
    data = training_data.embedded(synthetic_config())
  else:
    import datasets as datasets_lib  # pylint: disable=g-import-not-at-top
    given = lambda flag: flags.FLAGS[flag].present > 0  # noqa: E731
    split = datasets_lib.resolve(
        _DATASET.value, partition=_PARTITION.value,
        num_clients=_NUM_CLIENTS.value if given("num_clients") else None,
        seed=_DATA_SEED.value if given("data_seed") else None, data_dir=_DATA_DIR.value)
    data = training_data.of_split(split, f"{_DATASET.value} ({getattr(split, 'directory', '')})")
  train, test_x, test_y, name = data.train, data.test_x, data.test_y, data.name
  keras_builder = models.builder_for(data.input_shape, data.num_classes, _MODEL.value,
                                     _HEAD.value, data.rescale)
  model_fn = models.tff_model_fn(keras_builder, models.input_spec_for(data.input_shape),
                                 head=_HEAD.value)
  print(f"federation: {name}, {len(train.client_ids)} clients, "
        f"{len(test_y)} test examples; {config.rounds} rounds, "
        f"c={config.clients_per_round:g}, δ={config.delta:g}, {config.accountant}")
  try:
    common.validate(config, len(train.client_ids))
    with runtime.execution_context(device=flags.FLAGS.device, **fleet_kwargs):
      results = common.run_all(config, train, model_fn, keras_builder, test_x, test_y)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print()
  print(common.format_table(config, results))
  print(f"\nmetrics, checkpoints, summary.md and accuracy.png in {config.output_dir}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check=check)
