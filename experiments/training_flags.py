"""IDP-FedAvg's training flags, shared by the main job and the paper presets (issue 52).

Each flag is one field of :class:`tff_idp.idp_fedavg.config.TrainingConfig`
(the runner ``tff_idp.run_idp_fedavg`` takes the same names): ``define``
declares them with one module's defaults (``experiments.idp_fedavg``: the
family's ``TRAINING_DEFAULTS``; ``experiments.presets``: the paper's, Sec. V-C)
and ``training_config`` turns their values into the config, so that both
command lines read a flag the same way.
"""
from __future__ import annotations

from typing import Any, Mapping

from absl import flags

from experiments import audit_flags
from experiments import privacy_flags
from experiments import worker_flags
from tff_idp import cli
from tff_idp.accounting import exact
from tff_idp.idp_fedavg import config as config_lib

# Fields whose flag carries the value as is: name → (type, help).
_FIELDS = {
    "rounds": (int, "Federated rounds."),
    "clients_per_round": (float, "Expected clients per round c. The noise on the mean update is "
                          "z_Δ·C/c per coordinate; with the default σ_b = 0.05·c it must exceed "
                          "20σ."),
    "local_epochs": (int, "Local epochs per round."),
    "batch_size": (int, "Client batch size."),
    "client_learning_rate": (float, "Client learning rate."),
    "server_learning_rate": (float, "Server SGD learning rate."),
    "delta": (float, "Target δ."),
    "eval_every": (int, "Evaluate every k rounds (the accuracy plot's points)."),
    "checkpoint_every": (int, "Checkpoint every k rounds."),
    "allow_overrun": (bool, "Run past the calibrated rounds (reported)."),
    "max_rate": (float, "Cap on any client's sampling rate."),
    "progress": (bool, "Show progress bars (plain lines when stderr is not a terminal)."),
    "restart": (bool, "Discard the checkpoints and metrics in --output_dir and start fresh "
                "(default: resume; a finished run is reported, not retrained)."),
}
# Fields with a fixed set of values: name → (choices, help).
_CHOICES = {"client_optimizer": (["sgd", "adam"], "Client optimizer."),
            "accountant": (list(exact.ACCOUNTANTS),
                           "Privacy accountant for calibration and the ledger.")}
_DEFINERS = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer, float: flags.DEFINE_float}


def define(defaults: Mapping[str, Any], runs: list[str], seeds: list[str],
           runs_help: str, seeds_help: str) -> None:
  """Declares the training flags (once per process) with ``defaults`` (field → value).

  ``defaults`` holds every field of :data:`_FIELDS` and :data:`_CHOICES` except
  ``progress`` (default on) and ``restart`` (default off), and ``budgets`` and
  ``ratios``.
  """
  defaults = dict(dict(progress=True, restart=False), **defaults)
  flags.DEFINE_list("budgets", [f"{float(b):g}" for b in defaults["budgets"]],
                    "Per-group ε (inf allowed).")
  flags.DEFINE_list("ratios", [f"{float(r):g}" for r in defaults["ratios"]],
                    "Group ratios used by the 'idp' and 'scale' run specs.")
  flags.DEFINE_list("runs", runs, runs_help)
  flags.DEFINE_list("seeds", seeds, seeds_help)
  for name, (kind, help_text) in _FIELDS.items():
    _DEFINERS[kind](name, kind(defaults[name]), help_text)
  for name, (choices, help_text) in _CHOICES.items():
    flags.DEFINE_enum(name, defaults[name], choices, help_text)
  flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "TFF worker device.")
  privacy_flags.define()
  audit_flags.define()
  worker_flags.define()
  worker_flags.define_client_execution()


NAMES = frozenset(["budgets", "ratios", "runs", "seeds", "device", *_FIELDS, *_CHOICES,
                   audit_flags.AUDIT_CANARIES, audit_flags.AUDIT_SEED, *worker_flags._NAMES,  # pylint: disable=protected-access
                   *worker_flags.EXECUTION_NAMES, privacy_flags.INSECURE,
                   privacy_flags.RELEASE_ONLY])
"""Every flag :func:`define` declares."""


def values() -> dict:
  """The current value of every training flag (name → value)."""
  return {name: flags.FLAGS[name].value for name in NAMES}


def training_config(v: Mapping[str, Any], output_dir: str,
                    **fields: Any) -> config_lib.TrainingConfig:
  """The :class:`TrainingConfig` of flag values ``v`` (no TensorFlow; one line per bad value).

  ``fields`` adds the config fields a module sets itself (initial clip, head, ...).
  """
  def parsed(name: str, kind: str) -> list:
    rule = cli.LIST_RULES.get(name, cli.Rule(kind))
    return [cli.parse_item(name, str(t), rule) for t in (v[name] or [])]
  audit = {key: v[key] for key in (audit_flags.AUDIT_CANARIES, audit_flags.AUDIT_SEED)}
  return config_lib.TrainingConfig(
      budgets=parsed("budgets", "float"), ratios=parsed("ratios", "float"),
      # No release holds a run without noise (issue 48): --release_only drops or refuses it.
      runs=privacy_flags.without_non_private("runs", list(v["runs"]), ("nonprivate",)),
      seeds=parsed("seeds", "int"), output_dir=output_dir,
      **{name: v[name] for name in (*_FIELDS, *_CHOICES)},
      insecure_reproducible_noise=v[privacy_flags.INSECURE],
      release_only=v[privacy_flags.RELEASE_ONLY], **audit, **fields,
      **worker_flags.training_kwargs(v, v[audit_flags.AUDIT_CANARIES]))
