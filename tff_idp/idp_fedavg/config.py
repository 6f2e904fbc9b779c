"""IDP-FedAvg's run settings and the checks they need no data for (no TensorFlow).

:class:`TrainingConfig` is what one invocation of the run template
(:func:`tff_idp.idp_fedavg.runs.run_all`) trains; :func:`check_settings`
refuses bad settings in one line before TensorFlow is imported
(:func:`tff_idp.cli.launch`), and ``runs.validate`` adds the checks that need
the federation (each run spec's calibration, SAMPLE Alg. 1).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from tff_idp.engine import client_execution
from tff_idp.idp_fedavg import plan as privacy_plan

CLIENT_EXECUTIONS = client_execution.CLIENT_EXECUTIONS

# One set of defaults for ``experiments.idp_fedavg``'s flags and
# ``tff_idp.run_idp_fedavg``'s arguments of the same names (issue 34: the
# runner used to start adaptive clipping at 0.1 with one local epoch at
# learning rate 0.1, 7-12 points below the command line on the digits). The
# values are the main job's, tuned on the embedded federation
# (docs/idp_fedavg.md); a test checks both entry points read them.
TRAINING_DEFAULTS = dict(
    budgets=(1.0, 2.0, 3.0), ratios=(0.34, 0.43, 0.23), rounds=20, clients_per_round=10.0,
    local_epochs=5, batch_size=16, client_learning_rate=0.6, server_learning_rate=1.0,
    client_optimizer="sgd", delta=1e-4, accountant="rdp", initial_clip=2.5,
    clipped_count_stddev=None, max_rate=1.0, allow_overrun=False, eval_every=2,
    checkpoint_every=10, model="auto", head="softmax")
"""Where the clients train: TFF client computations, or this process."""


@dataclasses.dataclass
class TrainingConfig:
  budgets: Sequence[float]
  ratios: Sequence[float]
  runs: Sequence[str]
  seeds: Sequence[int]
  rounds: int
  clients_per_round: float
  local_epochs: int
  batch_size: int
  client_learning_rate: float
  server_learning_rate: float
  client_optimizer: str
  delta: float
  accountant: str
  output_dir: str
  eval_every: int
  checkpoint_every: int
  allow_overrun: bool = False
  max_rate: float = 1.0
  progress: bool = True
  # Derive noise and sampling from the seed: NOT PRIVATE, debugging only.
  insecure_reproducible_noise: bool = False
  # Write no diagnostics (un-noised statistics) at all.
  release_only: bool = False
  # σ_b, the noise std of the adaptive clip's count bit (Andrew et al. 2021,
  # IDP-FedAvg Alg. 2). None: 0.05·c (``aggregators.DEFAULT_CLIPPED_COUNT_STDDEV_FRACTION``
  # times each run's expected clients per round). The ledger charges σ, the
  # total multiplier; the value noise z_Δ is derived from σ and σ_b so the
  # pair composes to σ, so any σ_b > σ/2 is accounted.
  clipped_count_stddev: Optional[float] = None
  # C at round 0 of adaptive clipping. None: ``aggregators.DEFAULT_INITIAL_CLIP``
  # (0.1, Andrew et al.'s standard setup, from which C grows by at most
  # e^{η_C/2} ≈ 1.105 per round). Public (not charged): it is fixed before training.
  initial_clip: Optional[float] = None
  # Output head of the model: "softmax" or "sigmoid" (binary; ``tff_idp.models``).
  head: str = "softmax"
  # Discard existing checkpoints and metrics of every run directory first.
  restart: bool = False
  # Client-level empirical privacy audit (``tff_idp.audit``): canary clients
  # per DP run and seed (0 = off), and the seed of the canaries (directions,
  # groups, inserted half, their sampling): the auditor's randomness.
  audit_canaries: int = 0
  audit_seed: int = 0
  # Where the clients train (``build_idp_fedavg_driver_process(client_execution=)``):
  # "in_process" (this process, ``parallel_clients`` at once; the aggregator
  # and server update run in TFF), "vectorized" (this process, the whole cohort
  # at once; dense models) or "tff" (TFF client computations). "auto": tff when
  # auditing (canary clients are TFF client work), vectorized for dense models,
  # tff for other models under ``IN_PROCESS_MIN_PARAMETERS``, else in_process.
  client_execution: str = "auto"
  parallel_clients: Optional[int] = None


check_parallel_clients = client_execution.check_parallel_clients


def check_settings(config: TrainingConfig) -> None:
  """Raises ValueError (saying what to change) for settings that are wrong on any data.

  The run specs must parse against ``budgets``/``ratios`` (``--runs=10-20-30``
  names its percentages), the lists must not be empty, and the execution
  and audit settings must fit together.
  """
  if config.client_execution not in ("auto",) + CLIENT_EXECUTIONS:
    raise ValueError(f"client_execution={config.client_execution!r} must be auto, "
                     f"{' or '.join(CLIENT_EXECUTIONS)}.")
  if config.client_execution in ("in_process", "vectorized") and config.audit_canaries:
    raise ValueError("the audit's canary clients run as TFF client work: use "
                     "client_execution='tff' (or 'auto') with audit_canaries.")
  if config.parallel_clients is not None:
    check_parallel_clients(config.parallel_clients)
  if not config.runs:
    raise ValueError("--runs is empty; give at least one run spec.")
  if not config.seeds:
    raise ValueError("--seeds is empty; give at least one seed.")
  for key in ("clipped_count_stddev", "initial_clip"):
    value = getattr(config, key)
    if value is not None and not (math.isfinite(value) and value > 0):
      raise ValueError(f"--{key}={value} must be a finite number > 0 (or unset for "
                       "the default).")
  if not config.clients_per_round >= 1:  # also NaN (issue 50: 1e-9 trained on no client)
    raise ValueError(f"--clients_per_round={config.clients_per_round:g} expects fewer than one "
                     "client per round, so most rounds would train on none; give "
                     "--clients_per_round >= 1 (the default is "
                     f"{TRAINING_DEFAULTS['clients_per_round']:g}).")
  if config.audit_canaries < 0:
    raise ValueError(f"--audit_canaries={config.audit_canaries} must be >= 0 (0 = off).")
  specs = []
  for text in config.runs:
    try:
      specs.append(privacy_plan.parse_run_spec(text, config.ratios, len(config.budgets)))
    except ValueError as e:
      raise ValueError(f"--runs: {e}") from None
  if config.release_only and any(spec.mode == "nonprivate" for spec in specs):
    raise ValueError(
        "release_only=True with the nonprivate run spec: it trains without noise, so its model "
        "and accuracy are not a DP release; drop nonprivate from --runs (runs=...).")
  if config.audit_canaries and all(spec.mode == "nonprivate" for spec in specs):
    raise ValueError(
        f"--audit_canaries={config.audit_canaries} audits DP runs, but --runs has only "
        "non-private ones; add a DP run spec (e.g. --runs=nonprivate,34-43-23) or drop "
        "--audit_canaries.")
