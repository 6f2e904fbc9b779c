"""IDP-FedAvg on the embedded Synthetic(α, β) federation (the main job).

Runs the paper's Table I distributions (IDP-FedAvg paper, Sec. V-D) through
one round loop and prints final accuracies next to each distribution's σ and
per-group sampling rates:

  python -m experiments.idp_fedavg                       # defaults below
  python -m experiments.idp_fedavg --runs=idp,scale --ratios=0.34,0.43,0.23

The federation needs no network: 3,383 clients generated from --data_seed.
"""
from __future__ import annotations

import collections
import logging
import os
import sys

from absl import app
from absl import flags
from absl import logging as absl_logging
import numpy as np
import tensorflow as tf

from datasets import synthetic
from experiments import cli
from experiments import common
from experiments import privacy_flags
from tff_idp import models
from tff_idp import runtime
from tff_idp.accounting import exact

_BUDGETS = flags.DEFINE_list("budgets", ["1", "2", "3"], "Per-group ε (inf allowed).")
_RATIOS = flags.DEFINE_list("ratios", ["0.34", "0.43", "0.23"],
                            "Group ratios used by the 'idp' and 'scale' run specs.")
_RUNS = flags.DEFINE_list(
    "runs", ["nonprivate", "0-0-100", "34-43-23", "54-37-9", "100-0-0"],
    "Run specs: nonprivate | A-B-C (IDP-SAMPLE with A%/B%/C% of clients per "
    "budget; one non-empty group = uniform DP) | idp (uses --ratios) | "
    "scale[:A-B-C] (SCALE baseline).")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1"],
                           "Training seeds; accuracies are averaged over them.")
_ROUNDS = flags.DEFINE_integer("rounds", 60, "Federated rounds.")
_CLIENTS_PER_ROUND = flags.DEFINE_float("clients_per_round", 30,
                                        "Expected clients per round c.")
_LOCAL_EPOCHS = flags.DEFINE_integer("local_epochs", 1, "Local epochs per round.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "Client batch size.")
_CLIENT_LR = flags.DEFINE_float("client_learning_rate", 2.0, "Client learning rate.")
_CLIENT_OPT = flags.DEFINE_enum("client_optimizer", "sgd", ["sgd", "adam"],
                                "Client optimizer.")
_SERVER_LR = flags.DEFINE_float("server_learning_rate", 1.0, "Server SGD learning rate.")
_DELTA = flags.DEFINE_float("delta", 1e-4, "Target δ.")
_ACCOUNTANT = flags.DEFINE_enum("accountant", "rdp", list(exact.ACCOUNTANTS),
                                "Privacy accountant for calibration and the ledger.")
_IID = flags.DEFINE_bool(
    "iid", True, "i.i.d. Synthetic (default). --noiid gives Synthetic(α, β), whose "
    "per-client labelling functions leave little for one global model to learn.")
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 3383, "Clients in the federation.")
_ALPHA = flags.DEFINE_float("alpha", 0.5, "Synthetic(α, β): model heterogeneity.")
_BETA = flags.DEFINE_float("beta", 0.5, "Synthetic(α, β): feature heterogeneity.")
_DATA_SEED = flags.DEFINE_integer("data_seed", 0, "Seed of the generated federation.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/idp_fedavg",
                                  "Metrics, checkpoints and summaries go here.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 10, "Evaluate every k rounds.")
_CHECKPOINT_EVERY = flags.DEFINE_integer("checkpoint_every", 10,
                                         "Checkpoint every k rounds.")
_ALLOW_OVERRUN = flags.DEFINE_bool("allow_overrun", False,
                                   "Run past the calibrated rounds (reported).")
_MAX_RATE = flags.DEFINE_float("max_rate", 1.0, "Cap on any client's sampling rate.")
_MODEL = flags.DEFINE_enum("model", "logreg", ["logreg", "mlp"],
                           "Multinomial logistic regression or a 64-unit MLP.")
_DEVICE = flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "TFF worker device.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
_CLIPPED_COUNT_STDDEV = flags.DEFINE_float(
    "clipped_count_stddev", None,
    "σ_b, noise std of the adaptive clip's count bit (Andrew et al. 2021). Default: "
    "0.05·c (c = each run's expected clients per round). Needs σ_b > σ/2; the "
    "value noise z_Δ = (σ⁻² − (2σ_b)⁻²)^(-1/2) shrinks toward σ as σ_b grows, the "
    "clip's estimate gets noisier. Accounted either way: the ledger charges σ.")
privacy_flags.define()


@cli.entry
def main(argv):
  del argv
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  config = common.TrainingConfig(
      budgets=cli.float_list("budgets"),
      ratios=cli.float_list("ratios"),
      runs=_RUNS.value, seeds=cli.int_list("seeds"),
      rounds=_ROUNDS.value, clients_per_round=_CLIENTS_PER_ROUND.value,
      local_epochs=_LOCAL_EPOCHS.value, batch_size=_BATCH_SIZE.value,
      client_learning_rate=_CLIENT_LR.value, server_learning_rate=_SERVER_LR.value,
      client_optimizer=_CLIENT_OPT.value, delta=_DELTA.value,
      accountant=_ACCOUNTANT.value, output_dir=_OUTPUT_DIR.value,
      eval_every=_EVAL_EVERY.value, checkpoint_every=_CHECKPOINT_EVERY.value,
      allow_overrun=_ALLOW_OVERRUN.value, max_rate=_MAX_RATE.value,
      progress=_PROGRESS.value,
      insecure_reproducible_noise=privacy_flags.insecure(),
      release_only=privacy_flags.release_only(),
      clipped_count_stddev=_CLIPPED_COUNT_STDDEV.value)
  privacy_flags.announce()
  config.output_dir = cli.prepare_output_dir(config.output_dir)
  try:
    data_config = synthetic.SyntheticConfig(
        num_clients=_NUM_CLIENTS.value, alpha=_ALPHA.value, beta=_BETA.value,
        iid=_IID.value, seed=_DATA_SEED.value)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  train, _, central_test = synthetic.load_synthetic(data_config)
  test = next(iter(central_test.batch(10**7)))
  test_x, test_y = test["x"].numpy(), test["y"].numpy()
  nf, nc = data_config.num_features, data_config.num_classes
  if _MODEL.value == "mlp":
    keras_builder = lambda: models.build_mlp(nf, nc, hidden=64, seed=0)
  else:
    keras_builder = lambda: models.build_logistic_regression(nf, nc, seed=0)
  spec = collections.OrderedDict(x=tf.TensorSpec([None, nf], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(keras_builder, spec)
  name = ("Synthetic IID" if data_config.iid else
          f"Synthetic({data_config.alpha:g},{data_config.beta:g})")
  print(f"federation: {name}, {len(train.client_ids)} clients, "
        f"{len(test_y)} test examples; {config.rounds} rounds, "
        f"c={config.clients_per_round:g}, δ={config.delta:g}, {config.accountant}")
  try:
    common.validate(config, len(train.client_ids))
    with runtime.execution_context(device=_DEVICE.value):
      results = common.run_all(config, train, model_fn, keras_builder, test_x, test_y)
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print()
  print(common.format_table(config, results))
  print(f"\nmetrics, checkpoints, summary.md and accuracy.png in {config.output_dir}")
  return 0


if __name__ == "__main__":
  app.run(main)
