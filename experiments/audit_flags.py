"""``--audit_canaries`` and ``--audit_seed``, shared by the IDP-FedAvg experiments.

``--audit_canaries=k`` adds k canary clients to every DP run and seed and
reports, per privacy group, the ledger's ε next to the empirical ε of the
one-shot canary audit (``tff_idp.audit``; README "Empirical privacy audit").
"""
from __future__ import annotations

from absl import flags

AUDIT_CANARIES = "audit_canaries"
AUDIT_SEED = "audit_seed"


def define() -> None:
  """Defines both flags (once per process)."""
  if AUDIT_CANARIES not in flags.FLAGS:
    flags.DEFINE_integer(
        AUDIT_CANARIES, 0,
        "Empirical privacy audit: canary clients per DP run and seed (0 = off), split "
        "equally over the privacy groups, half inserted (sampled with the group's q) "
        "and half held out. Needs a multiple of 2 × (non-empty groups). summary.md "
        "then has per group 'ε bound' and 'ε empirical (95% CI)'; audit.png plots them.",
        lower_bound=0)
  if AUDIT_SEED not in flags.FLAGS:
    flags.DEFINE_integer(AUDIT_SEED, 0, "Seed of the canaries (directions, groups, "
                         "inserted half, their sampling): the auditor's, not secret.")


def values() -> dict:
  """``{"audit_canaries": k, "audit_seed": s}`` for ``TrainingConfig``."""
  return {AUDIT_CANARIES: flags.FLAGS[AUDIT_CANARIES].value,
          AUDIT_SEED: flags.FLAGS[AUDIT_SEED].value}
