"""The two output-privacy flags every training experiment shares.

* ``--insecure_reproducible_noise``: derive noise and sampling from ``--seeds``
  (``tff_idp.engine.privacy_randomness``). NOT PRIVATE: for debugging and tests; a
  banner is printed and every output is labelled.
* ``--release_only``: write only the private release (model, noised
  aggregates, ε ledger), no diagnostics (``tff_idp.engine.metrics``). A
  release holds only what a ledger accounts for (issue 48), so a method or
  run spec that trains without noise is left out of its default list and
  refused when given (:func:`without_non_private`).
"""
from __future__ import annotations

import sys
from typing import Sequence

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


def without_non_private(flag: str, values: Sequence[str],
                        non_private: Sequence[str]) -> list[str]:
  """``values`` of ``--<flag>`` (the methods or run specs) fit for ``--release_only``.

  A non-private entry (``non_private``: rPDP-FL's PrivacyFree, IDP-FedAvg's
  ``nonprivate``) trains without noise: no ledger accounts for its model or
  its accuracy, so a release must not hold them (issue 48). Outside
  ``--release_only`` (or where a command has no such flag) ``values`` as
  given; under it the flag's default drops them, and an explicit ``--<flag>``
  holding one is refused (ValueError saying to drop it).
  """
  if RELEASE_ONLY not in flags.FLAGS or not release_only():
    return list(values)
  found = [v for v in values if v in non_private]
  if found and flags.FLAGS[flag].present:
    raise ValueError(f"--release_only: --{flag} has {', '.join(found)}, which trains without "
                     f"noise (no ledger accounts for its model); drop it from --{flag}.")
  return [v for v in values if v not in non_private]


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
