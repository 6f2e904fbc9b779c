"""APES / S-APES: personalized local DP with shuffle amplification (APES paper Tables 3-4).

Every user holds a personal local budget ε_i (per coordinate, drawn from a
Table 2 distribution). Each round every user runs FedProx locally; its model
delta is clipped per coordinate to [−C, C] and perturbed at ε_i before it
leaves the client; the server averages and de-biases with the ε multiset. The
table compares the paper's frameworks (non-private, LDP-min, PLDP, UniS,
APES, S-APES, and S-APES with the paper's post-top-b selection, labelled)
and prints, per framework, the local budget ε^{ul}, the central
ε^c one shuffled round gives per coordinate, the user-level ε^{uc} for one
round and over all rounds, and the test accuracy:

  python -m experiments.apes                              # embedded default
  python -m experiments.apes --distribution=gauss2 --frameworks=apes,sapes
  python -m experiments.apes --preset=paper --data_dir=~/data   # MNIST-shaped data

ε^c comes from the ledger's ``--bound``: ``per_user`` (default, the bound
this toolkit stands behind: each user's own clone probabilities, exact
Poisson-binomial count), ``fmt22_max`` (UniS as published: FMT22 at max ε)
or ``eon_paper`` (EoN as published, labelled unverified). The table always
shows the published EoN value beside the default, so the paper's numbers can
be compared. ε^{uc} composes ε^c over the coordinates that carry a user's
data (d; b for S-APES, whose default keeps a secret random b-subset) by
optimal composition; the paper's advanced composition (Prop. 1 for S-APES)
is printed beside it for parity. The paper's post-top-b S-APES is only
d·ε-LDP (its kept set depends on every coordinate): its row charges that,
with no amplification, and shows the published b·ε and Prop. 1 as claims.

The embedded default (no network): Synthetic IID users with 12 records each
(10 train, 2 test; unit-norm features like the reference code's QMNIST),
softmax regression (d = 610), all users every round, FedProx (μ = 0.01,
10 local epochs, learning rate 1) and C = 0.1 — the paper's setting, with
fewer users and rounds so that it finishes in minutes on 2 cores (see
``--users``/``--rounds``). Fewer users means less amplification (ε^c grows
as n shrinks) and more noise in the mean.
"""
from __future__ import annotations

import logging

from absl import flags
from absl import logging as absl_logging
# TensorFlow before absl parses the flags (tf.keras breaks if first imported in app.run).

from datasets import shuffle_users
from experiments import privacy_flags
from experiments import worker_flags
from tff_idp import cli
from tff_idp.execution import runtime
from tff_idp.apes import defaults as apes_defaults
from tff_idp.apes import runs as apes_runs

D = apes_defaults.DEFAULTS  # shared with tff_idp.run_apes (one source, issue 34)
_DATA = apes_defaults.DATA_DEFAULTS
_PRESETS = apes_defaults.PRESETS

_PRESET = flags.DEFINE_enum(
    "preset", _DATA["preset"], list(_PRESETS),
    "embedded: Synthetic users (no network). paper: the paper's QMNIST-like setting "
    "(10,000 users × 12 MNIST-shaped images, or as many users as the data holds, "
    "d = 7850, 40 rounds); needs --data_dir.")
_DATA_DIR = flags.DEFINE_string(
    "data_dir", None, "--preset=paper: a directory holding mnist.npz (Keras layout) or a "
                      "prepared TFDS 'mnist'.")
_USERS = flags.DEFINE_integer("users", None, "Users n (default: the preset's).")
_ROUNDS = flags.DEFINE_integer("rounds", None, "Rounds T (default: the preset's).")
_SAMPLES = flags.DEFINE_integer("samples_per_user", _DATA["samples_per_user"],
                                "Records per user (2 held out).")
_LOCAL_EPOCHS = flags.DEFINE_integer("local_epochs", D["local_epochs"], "Local FedProx epochs.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", D["batch_size"], "Local batch size.")
_LR = flags.DEFINE_float("client_learning_rate", D["client_learning_rate"],
                         "Local learning rate.")
_MU = flags.DEFINE_float("proximal_strength", D["proximal_strength"], "FedProx μ.")
_CLIP = flags.DEFINE_float("clip", D["clip"], "Per-coordinate clip C of the model delta.")
_KEEP = flags.DEFINE_float("keep_fraction", D["keep_fraction"],
                           "S-APES: b/d, the share of coordinates kept.")
_DISTRIBUTION = flags.DEFINE_enum(
    "distribution", D["distribution"], list(apes_runs.DISTRIBUTIONS),
    "ε distribution (Table 2): uniform1 U(0.05,0.5), uniform2 U(0.05,1), gauss1/2, mixgauss1/2.")
_EPS_SEED = flags.DEFINE_integer("epsilon_seed", D["epsilon_seed"], "Seed of the users' ε draw.")
_DATA_SEED = flags.DEFINE_integer("data_seed", _DATA["data_seed"],
                                  "Seed of the embedded federation.")
_FRAMEWORKS = flags.DEFINE_list("frameworks", list(D["frameworks"]),
                                f"Frameworks: {', '.join(apes_runs.FRAMEWORKS)}.")
_BOUND = flags.DEFINE_enum("bound", D["bound"], list(apes_runs.BOUNDS),
                           "Shuffle bound of the ledger for APES/S-APES (see above).")
_SHUFFLE_DELTA = flags.DEFINE_float(
    "shuffle_delta", D["shuffle_delta"],
    "δ_s of one shuffled coordinate (the paper: 1e-8). Default: δ/(10·d·T), so that the "
    "user-level δ after T rounds, δ' + d·T·δ_s, stays within --delta.")
_DELTA = flags.DEFINE_float("delta", D["delta"],
                            "User-level δ^{uc} (one round and cumulative).")
_SEED = flags.DEFINE_integer("seed", D["seed"], "Names the run (checkpoints are bound to it).")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/apes", "Where results go.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", D["eval_every"], "Evaluate every k rounds.")
_CHECKPOINT_EVERY = flags.DEFINE_integer("checkpoint_every", D["checkpoint_every"],
                                         "Checkpoint every k rounds.")
_DEVICE = flags.DEFINE_enum("device", D["device"], ["cpu", "gpu"], "TFF worker device.")
worker_flags.define()
worker_flags.define_client_execution()
_PROGRESS = flags.DEFINE_bool("progress", D["progress"], "Show progress bars.")
_RESTART = flags.DEFINE_bool("restart", D["restart"],
                             "Discard this output directory's checkpoints and start over.")
privacy_flags.define(release_only=False)


def client_execution() -> str:
  """``--client_execution`` for APES: auto, vectorized or tff (no per-user in_process)."""
  execution = worker_flags.training_kwargs()["client_execution"]
  if execution == "in_process" or flags.FLAGS["parallel_clients"].value is not None:
    raise ValueError("APES has no per-user in-process execution: use --client_execution="
                     "auto (vectorized for its logistic regression), vectorized or tff, "
                     "without --parallel_clients.")
  return execution


def check() -> tuple[int, int, apes_runs.ApesTraining]:
  """The flag checks that need no data (``cli.launch`` runs them before TensorFlow).

  Returns (users, rounds, the training settings).
  """
  worker_flags.runtime_kwargs()
  client_execution()
  unknown = set(_FRAMEWORKS.value) - set(apes_runs.FRAMEWORKS)
  if unknown or not _FRAMEWORKS.value:
    raise ValueError(f"--frameworks has {sorted(unknown) or 'nothing'}; choose from "
                     f"{', '.join(apes_runs.FRAMEWORKS)}.")
  preset = _PRESETS[_PRESET.value]
  rounds = _ROUNDS.value or preset["rounds"]
  training = apes_runs.ApesTraining(
      rounds=rounds, local_epochs=_LOCAL_EPOCHS.value, batch_size=_BATCH_SIZE.value,
      client_learning_rate=_LR.value, proximal_strength=_MU.value, clip=_CLIP.value,
      keep_fraction=_KEEP.value)
  if _SHUFFLE_DELTA.value is not None:
    apes_runs.ApesAccounting(shuffle_delta=_SHUFFLE_DELTA.value, delta=_DELTA.value,
                             bound=_BOUND.value)
  if _PRESET.value == "paper":  # issue 33: a flag the preset ignores was accepted silently
    cli.refuse_inapplicable(("data_seed",), "it seeds the embedded users, and "
                            "--preset=paper reads MNIST from --data_dir")
  else:
    cli.refuse_inapplicable(("data_dir",), f"--preset={_PRESET.value} generates its users; "
                            "only --preset=paper reads --data_dir")
  return _USERS.value or preset["users"], rounds, training


@cli.entry(rules={
    "keep_fraction": cli.Rule("float", low=0, low_open=True, high=1,
                              meaning="b/d, the share of coordinates S-APES keeps"),
    "clip": cli.Rule("float", low=0, low_open=True, meaning="per-coordinate clip C"),
    "shuffle_delta": cli.Rule("float", low=0, low_open=True, high=1, high_open=True,
                              meaning="δ_s of one shuffled coordinate"),
    "users": cli.Rule("int", low=2, meaning="users (the shuffle needs at least 2)"),
    "samples_per_user": cli.Rule("int", low=3, meaning="records per user (2 are held out)"),
})
def main(argv):
  del argv
  fleet_kwargs = worker_flags.runtime_kwargs()  # bad worker flags fail before any work
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  users, rounds, training = check()
  cli.prepare_output_dir(_OUTPUT_DIR.value)
  if _PRESET.value == "paper":
    federation = shuffle_users.mnist_users(users, _SAMPLES.value, _DATA_DIR.value)
  else:
    federation = shuffle_users.synthetic_users(users, _SAMPLES.value, seed=_DATA_SEED.value)
  epsilons = apes_runs.draw_epsilons(_DISTRIBUTION.value, federation.num_users,
                                     _EPS_SEED.value)
  shuffle_delta = _SHUFFLE_DELTA.value or apes_runs.default_shuffle_delta(
      _DELTA.value, federation.num_params, training.rounds)
  accounting = apes_runs.ApesAccounting(shuffle_delta=shuffle_delta,
                                        delta=_DELTA.value, bound=_BOUND.value)
  privacy_flags.announce()
  print(apes_runs.federation_line(federation, _SAMPLES.value, _DISTRIBUTION.value, epsilons,
                                  training, accounting), flush=True)
  # TensorFlow loads here (the runner's models), once the flags are known to be valid.
  from tff_idp import runners  # pylint: disable=g-import-not-at-top
  config = {h.name: h.value for h in globals().values() if isinstance(h, flags.FlagHolder)}
  with runtime.execution_context(device=_DEVICE.value, **fleet_kwargs):
    table = runners.run_apes(
        federation, output_dir=_OUTPUT_DIR.value, frameworks=_FRAMEWORKS.value,
        distribution=_DISTRIBUTION.value, epsilon_seed=_EPS_SEED.value,
        rounds=training.rounds, local_epochs=training.local_epochs,
        batch_size=training.batch_size, client_learning_rate=training.client_learning_rate,
        proximal_strength=training.proximal_strength, clip=training.clip,
        keep_fraction=training.keep_fraction, bound=accounting.bound,
        shuffle_delta=accounting.shuffle_delta, delta=accounting.delta, seed=_SEED.value,
        eval_every=_EVAL_EVERY.value, checkpoint_every=_CHECKPOINT_EVERY.value,
        device=_DEVICE.value, progress=_PROGRESS.value, restart=_RESTART.value,
        insecure_reproducible_noise=privacy_flags.insecure(), own_runtime=False,
        client_execution=client_execution(), details=config).table
  print()
  print(table)
  print(f"\nmetrics, checkpoints, TensorBoard logs, summary.md/json and accuracy.png in "
        f"{_OUTPUT_DIR.value}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check=check)
