"""The two output-privacy flags every training experiment shares.

* ``--insecure_reproducible_noise``: derive noise and sampling from ``--seeds``
  (``tff_idp.engine.privacy_randomness``). NOT PRIVATE: for debugging and tests; a
  banner is printed and every output is labelled.
* ``--release_only``: write only the private release (model, noised
  aggregates, ε ledger), no diagnostics (``tff_idp.engine.metrics``).
"""
from __future__ import annotations

import sys

from absl import flags

from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL

INSECURE = "insecure_reproducible_noise"
RELEASE_ONLY = "release_only"


def define(release_only: bool = True) -> None:
  """Defines both flags (once per process); ``release_only=False`` only the first."""
  if INSECURE not in flags.FLAGS:
    flags.DEFINE_bool(
        INSECURE, False,
        "DEBUG ONLY, NOT PRIVATE: derive DP noise and client/record sampling from "
        "--seeds, so runs repeat bit for bit and anyone who knows the seed can remove "
        "the noise. Every output is labelled. Default: secret OS entropy per run.")
  if release_only and RELEASE_ONLY not in flags.FLAGS:
    flags.DEFINE_bool(
        RELEASE_ONLY, False,
        "Write only what the DP guarantee covers (metrics.csv: noised aggregates, "
        "ε ledger, evaluation); no diagnostics.csv of un-noised statistics.")


def insecure() -> bool:
  return bool(flags.FLAGS[INSECURE].value)


def release_only() -> bool:
  return bool(flags.FLAGS[RELEASE_ONLY].value)


def warning() -> "str | None":
  """The summary's ``privacy_warning``: the NOT PRIVATE label in the insecure mode."""
  return NOT_PRIVATE_LABEL if insecure() else None


def announce() -> None:
  """A banner on stderr when the insecure debug mode is on."""
  if insecure():
    bar = "!" * 78
    print(f"{bar}\n!! {NOT_PRIVATE_LABEL}\n!! --{INSECURE} is on: privacy noise and "
          f"sampling are derived\n!! from --seeds. Use it for debugging only; every "
          f"output is labelled.\n{bar}", file=sys.stderr, flush=True)
