"""rPDP-FL: record-level personalized DP in federated learning (rPDP-FL paper §7.2, Fig. 8).

Every record draws its own budget ε_ij; ours (SCF rates, Alg. 3), Minimum, Dropout and
PrivacyFree train through the same round driver into a Fig. 8-style table (docs/rpdp.md):

  python -m experiments.rpdp                                   # the embedded silos
  python -m experiments.rpdp --distribution=bounded_pareto --seeds=0,1,2
  python -m experiments.rpdp --dataset=fmnist --partition=iid --data_dir=~/.tff
  python -m experiments.rpdp --distribution=by_class --class_budgets=0-4:0.1,5-9:1 \
      --local_algorithm=ino_sgd
  python -m experiments.rpdp --audit_canaries=96 --methods=ours    # + empirical privacy audit
"""
import logging
import sys

from absl import flags
from absl import logging as absl_logging
# TensorFlow before absl parses the flags (tf.keras breaks if first imported in app.run).

from experiments import privacy_flags
from experiments import silos
from experiments import worker_flags
from tff_idp import cli
from tff_idp import model_catalog
from tff_idp import preferences
from tff_idp.execution import runtime
from tff_idp.accounting.record import plan as record_plan
from tff_idp.accounting.record.rdp_two_stage import THREAT_MODELS
from tff_idp.rpdp import config as rpdp_config
from tff_idp.rpdp.defaults import DEFAULTS as D  # shared with tff_idp.run_rpdp

_DISTRIBUTION = flags.DEFINE_enum(
    "distribution", "three_levels", sorted([*preferences.DISTRIBUTIONS, preferences.BY_CLASS]),
    "Privacy preference distribution of the records (tff_idp.preferences). three_levels, "
    "bounded_mix_gauss, bounded_pareto: the paper's parameters (rPDP-FL §7.2). "
    "bounded_mix_gauss_code: the authors' code's variant (stds 0.05/0.1/0.5, values clipped onto "
    "[0.1, 10], about 35% of records at exactly ε=0.1); bounded_pareto_code: the code's numpy "
    "pareto(4) + 0.1 clipped to [0.1, 10]. user_study_*: IDP-FedAvg's splits over ε 1/2/3. "
    "by_class: each record takes the budget of its label, from --class_budgets.")
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
_ROUNDS = flags.DEFINE_integer("rounds", D["rounds"], "T: communication rounds.")
_LOCAL_STEPS = flags.DEFINE_integer("local_steps", D["local_steps"],
                                    "τ: local DP-SGD steps per round.")
_CLIENT_RATE = flags.DEFINE_float("client_rate", D["client_rate"], "λ: client sampling rate.")
_NOISE = flags.DEFINE_float("noise_multiplier", D["noise_multiplier"],
                            "σ: noise multiplier of each step.")
_CLIP = flags.DEFINE_float("clip_norm", D["clip_norm"], "L: per-example clipping norm.")
_LR = flags.DEFINE_float("learning_rate", D["learning_rate"], "Client SGD learning rate η.")
_DELTA = flags.DEFINE_float("delta", D["delta"], "Target δ.")
_THREAT = flags.DEFINE_enum("threat_model", D["threat_model"], list(THREAT_MODELS),
                            "type2: third parties see global models (Thm 1 (1)); "
                            "type1: an honest-but-curious server (Thm 1 (2)).")
_PF_BATCH = flags.DEFINE_float("privacy_free_batch", D["privacy_free_batch"],
                               "PrivacyFree: expected records per local step.")
_DATASET = flags.DEFINE_string(
    "dataset", "synthetic",
    "Federation: 'synthetic' (embedded silos), fmnist | cifar10 | svhn (datasets/ builders, from "
    "local source files), tfds:<name> (a prepared TensorFlow Datasets image dataset), or the path "
    "of a split directory (datasets.from_arrays(...).save(dir) or python -m datasets.build).")
_MODEL = flags.DEFINE_enum(
    "model", "auto", list(model_catalog.MODELS),
    "Model for --dataset=tfds:<name> or a split path: logreg/mlp for feature vectors, cnn (the "
    "IDP-FedAvg CNN) for images; auto picks by the example shape. Built-in datasets use the "
    "paper's CNNs, synthetic uses logreg.")
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
_EVAL_EVERY = flags.DEFINE_integer("eval_every", D["eval_every"], "Evaluate every k rounds.")
_CHECKPOINT_EVERY = flags.DEFINE_integer("checkpoint_every", D["checkpoint_every"],
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
    "Empirical privacy audit (Andrew et al., ICLR 2024): k record-level gradient canaries, split "
    "equally over the budget levels, half of each level held out, in one extra run (first seed) "
    "per private method; the summary gains per level the ledger's ε bound and the empirical ε "
    "(95% CI), and the accuracy with/without canaries. 0 = no audit.")
_AUDIT_SEED = flags.DEFINE_integer("audit_seed", 0, "The auditor's seed (canary directions, "
                                   "held-out split, placement).")
_AUDIT_LEVELS = flags.DEFINE_list(
    "audit_levels", None, "Budget levels ε of the canaries (default: the plan's distinct "
    "budgets; needed for continuous preference distributions).")
privacy_flags.define()


def check() -> dict:
  """The flag checks that need no data and no TensorFlow (``cli.launch`` runs them first)."""
  worker_flags.runtime_kwargs()
  # The canary runs of --audit_canaries always use TFF client work (not refused here).
  execution = worker_flags.training_kwargs(audit_canaries=0)
  rpdp_config.check_methods(_METHODS.value)
  # PrivacyFree trains without noise: no release holds it (issue 48).
  methods = privacy_flags.without_non_private("methods", _METHODS.value, ("privacy_free",))
  seeds = cli.int_list("seeds")
  params, _, audit_levels = rpdp_config.check_settings(seeds, **cli.values(rpdp_config.SETTINGS))
  if _DATASET.value == "synthetic":
    cli.refuse_inapplicable(("data_dir", "split_dir", "partition", "model"), "--dataset=synthetic "
                            "is the embedded federation (it reads no files, has no partition and "
                            "always trains logistic regression)")
  else:
    cli.refuse_inapplicable(("users_per_silo", "iid"), "they shape the embedded federation, and "
                            f"--dataset={_DATASET.value} is not it")
  sampler = rpdp_config.sampler(**cli.values(("distribution", "levels", "level_ratios")))
  return {"methods": methods, "seeds": seeds, "params": params, "audit_levels": audit_levels,
          "sampler": sampler, "execution": execution}


@cli.entry
def main(argv):
  del argv
  fleet_kwargs = worker_flags.runtime_kwargs()  # bad worker flags fail before any work
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  try:
    checked = check()
    cli.prepare_output_dir(_OUTPUT_DIR.value)
    # TensorFlow loads here, once the flags are known to be valid.
    from tff_idp import runners  # pylint: disable=g-import-not-at-top
    from tff_idp.ino_sgd import importance  # pylint: disable=g-import-not-at-top
    from tff_idp.rpdp import runs as record_runs  # pylint: disable=g-import-not-at-top
    local_weight_fn, local_algorithm = importance.local_step_weights(
        _LOCAL_ALGORITHM.value, _INO_GAMMA.value, _INO_ALPHA.value, _INO_BETA.value)
    federation = silos.rpdp_federation(num_clients_given=flags.FLAGS["num_clients"].present,
                                       **cli.values(silos.RPDP_FEDERATION_FLAGS))
    budgets = rpdp_config.assign_budgets(federation, checked["sampler"],
                                         **cli.values(rpdp_config.BUDGET_SETTINGS))
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(record_runs.federation_line(federation, budgets.described, checked["params"],
                                    _CLIP.value, local_algorithm, privacy_flags.release_only()))
  config = {h.name: h.value for h in globals().values() if isinstance(h, flags.FlagHolder)}
  config["methods"] = checked["methods"]  # --release_only's default has no PrivacyFree
  with runtime.execution_context(device=_DEVICE.value, **fleet_kwargs):
    try:
      table = runners.run_rpdp_federation(
          federation, budgets.budgets, checked["params"], checked["methods"], checked["seeds"],
          _OUTPUT_DIR.value, config=config, audit_canaries=_AUDIT_CANARIES.value,
          audit_seed=_AUDIT_SEED.value, audit_levels=checked["audit_levels"],
          privacy_warning=privacy_flags.warning(), local_weight_fn=local_weight_fn,
          local_algorithm=local_algorithm, class_groups=budgets.class_groups,
          dropout_cutoff=budgets.dropout_cutoff, **cli.values(rpdp_config.RUN_SETTINGS),
          **checked["execution"]).table
    except record_runs.AuditConfigError as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
  print()
  print(table)
  print(f"\nmetrics, checkpoints, summary.md/json and accuracy.png in {_OUTPUT_DIR.value}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check=check)
