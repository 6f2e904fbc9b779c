"""Empirical privacy audit of IDP-FedAvg on the embedded federation (one-shot canaries).

Trains IDP-FedAvg with canary clients (Andrew et al., ICLR 2024;
``tff_idp.audit``) and prints, per run and privacy group, the ledger's ε next
to the empirical ε of the final model with its 95% bootstrap interval:

  python -m experiments.audit                  # the runs below, ~10 min on 2 cores
  python -m experiments.audit --controls=      # only the correct runs

Runs (all at ε 1-2-3 and the run's δ, same federation and model):

* ``100-0-0``: uniform DP, every client in the strict group (ε = 1);
* ``34-43-23``: IDP-FedAvg SAMPLE (Alg. 1), three groups;
* broken controls of ``34-43-23`` (``--controls``), each a deliberate leak
  with the ledger still reporting the calibrated ε (``tff_idp.audit.controls``):
  ``noise/4`` (noise multiplier ÷ 4), ``q×8`` (the strict group's clients and
  canaries sampled at 8 q) and ``no-noise`` (the estimator's saturation);
* ``34-43-23`` again without canaries (``--utility_baseline``): the canaries'
  effect on accuracy, paired by seed.

**Why this federation, not the main job's.** The one-shot estimate reads the
final model, so it has power only where the noise dominates the model delta
and each canary takes part several times: the main job (700 clients, c = 10,
q ≈ 0.002-0.03, a 610-parameter model) gives estimates indistinguishable
from 0 with intervals wider than the budgets (see
``tff_idp.audit.simulation`` and the README). Here: 100 clients, c = 20
(q ≈ 0.1-0.3, a canary joins 2-6 of 20 rounds) and a one-hidden-layer MLP
with 1,024 units (d ≈ 73k, so the real clients' drift is small against the
noise in any random direction). ``--clipped_count_stddev`` is raised to 6
because adaptive clipping needs σ < 2σ_b.
"""
from __future__ import annotations

import logging
import os
import sys

from absl import flags
from absl import logging as absl_logging

from datasets import synthetic
from experiments import privacy_flags
from experiments import worker_flags
from tff_idp import cli
from tff_idp.engine import summary as summary_lib
from tff_idp.idp_fedavg import config as config_lib
from tff_idp.execution import runtime
from tff_idp.audit import controls
from tff_idp.audit import report as audit_report


_CANARIES = flags.DEFINE_integer(
    "audit_canaries", 600, "Canary clients per run and seed (a multiple of 2 × groups; "
    "half inserted, half held out).", lower_bound=2)
_AUDIT_SEED = flags.DEFINE_integer("audit_seed", 0, "Seed of the canaries.")
_CONTROLS = flags.DEFINE_list("controls", ["noise4", "q8", "nonoise"],
                              "Broken controls: noise4 (σ ÷ 4), q8 (strict group's q × 8), "
                              "nonoise (σ = 0). Empty: none.")
_UTILITY = flags.DEFINE_bool("utility_baseline", True,
                             "Also train 34-43-23 without canaries (accuracy effect).")
_SEEDS = flags.DEFINE_list("seeds", ["0"], "Training seeds; canaries pool over them.")
_ROUNDS = flags.DEFINE_integer("rounds", 20, "Federated rounds.")
_CLIENTS_PER_ROUND = flags.DEFINE_float("clients_per_round", 20, "Expected real clients c.")
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 100, "Clients in the federation.")
_HIDDEN = flags.DEFINE_integer("hidden", 1024, "Hidden units of the MLP (sets d).")
_DELTA = flags.DEFINE_float("delta", 1e-4, "Target δ (the audit's δ too).")
_CLIPPED_COUNT_STDDEV = flags.DEFINE_float("clipped_count_stddev", 6.0,
                                           "σ_b of the adaptive clip's count bit.")
_LOCAL_EPOCHS = flags.DEFINE_integer("local_epochs", 2, "Local epochs per round.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/audit", "Where runs and the table go.")
_RESTART = flags.DEFINE_bool("restart", False, "Discard earlier checkpoints and metrics.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Progress bars.")
worker_flags.define()
worker_flags.define_client_execution()

privacy_flags.define(release_only=False)

BUDGETS = (1.0, 2.0, 3.0)
RATIOS = (0.34, 0.43, 0.23)


def _config(spec: str, output_dir: str, canaries: int) -> config_lib.TrainingConfig:
  return config_lib.TrainingConfig(
      budgets=list(BUDGETS), ratios=list(RATIOS), runs=[spec],
      seeds=cli.int_list("seeds"), rounds=_ROUNDS.value,
      clients_per_round=_CLIENTS_PER_ROUND.value, local_epochs=_LOCAL_EPOCHS.value,
      batch_size=16, client_learning_rate=0.3, server_learning_rate=1.0,
      client_optimizer="sgd", delta=_DELTA.value, accountant="rdp",
      output_dir=output_dir, eval_every=_ROUNDS.value, checkpoint_every=10,
      progress=_PROGRESS.value, clipped_count_stddev=_CLIPPED_COUNT_STDDEV.value,
      initial_clip=1.0, restart=_RESTART.value, audit_canaries=canaries,
      audit_seed=_AUDIT_SEED.value, insecure_reproducible_noise=privacy_flags.insecure())


def _run_dir(output_dir: str, label: str) -> str:
  """One run's directory: its label with spaces, slashes and commas made path-safe."""
  return os.path.join(output_dir, label.replace(" ", "_").replace("/", "÷").replace(",", ""))


def check() -> list[str]:
  """The flag checks that need no data (``cli.launch`` runs them before TensorFlow).

  Returns the broken controls asked for.
  """
  worker_flags.runtime_kwargs()
  worker_flags.training_kwargs(audit_canaries=1)  # canary clients are TFF client work
  names = [n for n in _CONTROLS.value if n]
  controls.check_control_names(names)
  for label, spec, canaries, _ in controls.plan_audit_runs(_CANARIES.value, names,
                                                            _UTILITY.value):
    config_lib.check_settings(_config(spec, _run_dir(_OUTPUT_DIR.value, label), canaries))
  return names


@cli.entry
def main(argv):
  del argv
  fleet_kwargs = worker_flags.runtime_kwargs()  # bad worker flags fail before any work
  names = check()
  # TensorFlow loads here, once the flags are known to be valid.
  from experiments import common  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  privacy_flags.announce()
  output_dir = cli.prepare_output_dir(_OUTPUT_DIR.value)
  data_config = synthetic.SyntheticConfig(num_clients=_NUM_CLIENTS.value, iid=True, seed=0)
  train, _, central_test = synthetic.load_synthetic(data_config)
  test = next(iter(central_test.batch(10**7)))
  test_x, test_y = test["x"].numpy(), test["y"].numpy()
  shape = (data_config.num_features,)
  keras_builder = lambda: models.build_mlp(  # noqa: E731
      data_config.num_features, data_config.num_classes, hidden=_HIDDEN.value)
  model_fn = models.tff_model_fn(keras_builder, models.input_spec_for(shape))
  runs = controls.plan_audit_runs(_CANARIES.value, names, _UTILITY.value)
  print(f"audit federation: Synthetic IID, {len(train.client_ids)} clients, MLP "
        f"{_HIDDEN.value} hidden (d = {keras_builder().count_params():,}); "
        f"{_ROUNDS.value} rounds, c = {_CLIENTS_PER_ROUND.value:g}, δ = {_DELTA.value:g}, "
        f"{len(runs)} runs")
  rows = []
  try:
    for label, spec, canaries, miscal in runs:
      common.validate(_config(spec, _run_dir(output_dir, label), canaries),
                      len(train.client_ids))
    with runtime.execution_context(**fleet_kwargs):
      for label, spec, canaries, miscal in runs:
        config = _config(spec, _run_dir(output_dir, label), canaries)
        print(f"\n{label}{' — ' + controls.BROKEN_LABEL if miscal else ''}")
        result = common.run_all(config, train, model_fn, keras_builder, test_x, test_y,
                                miscalibration=miscal)[0]
        rows.append(dict(result, run=label, canaries=canaries,
                         broken_control=miscal.to_dict() if miscal else None))
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  table = audit_report.format_audit_summary(rows, privacy_flags.insecure())
  if privacy_flags.insecure():
    from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL  # pylint: disable=g-import-not-at-top
    table = f"**{NOT_PRIVATE_LABEL}** (--insecure_reproducible_noise)\n\n{table}"
  print()
  print(table)
  with open(os.path.join(output_dir, "summary.md"), "w") as f:
    f.write(table + "\n")
  summary_lib.write_summary(
      output_dir, "audit",
      {"audit_canaries": _CANARIES.value, "seeds": _SEEDS.value, "rounds": _ROUNDS.value,
       "clients_per_round": _CLIENTS_PER_ROUND.value, "num_clients": _NUM_CLIENTS.value,
       "hidden": _HIDDEN.value, "delta": _DELTA.value},
      [dict({k: v for k, v in r.items() if k != "history"}, label=r["run"])
       for r in rows], privacy_warning=privacy_flags.warning())
  audit_report.plot_audit([r for r in rows if r.get("audit")],
                          os.path.join(output_dir, "audit.png"),
                          "IDP-FedAvg canary audit: empirical vs ledger ε")
  print(f"\nsummary.md, summary.json and audit.png in {output_dir}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check=check)
