"""The settings of an rPDP-FL comparison, their checks and the records' budgets (no TensorFlow).

``experiments.rpdp`` checks its flags with :func:`check_methods` and
:func:`check_settings` before TensorFlow is imported (:func:`tff_idp.cli.launch`),
builds the budget distribution with :func:`sampler`, and, once the
federation is loaded, gives every record its ε_ij with :func:`assign_budgets`
(rPDP-FL §7.2: drawn from a privacy preference distribution, or, under
``by_class``, the budget of the record's label). :func:`drawn_budgets` is the
draw :func:`tff_idp.runners.run_rpdp` makes too. The messages name the
command line's flags (``--class_budgets``).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from tff_idp import preferences
from tff_idp.accounting.record import plan as record_plan
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams


def check_methods(methods: Sequence[str]) -> None:
  """The methods must be among ours, minimum, dropout, privacy_free (rPDP-FL §7.2)."""
  unknown = set(methods) - set(record_plan.METHODS)
  if unknown or not methods:
    raise ValueError(f"--methods has {sorted(unknown) or 'nothing'}; choose from "
                     f"{', '.join(record_plan.METHODS)}.")


SETTINGS = ("noise_multiplier", "local_steps", "rounds", "client_rate", "delta",
            "threat_model", "clip_norm", "distribution", "class_budgets",
            "fresh_budgets_per_seed", "audit_canaries", "audit_levels", "release_only")
"""What :func:`check_settings` takes besides the seeds (``experiments.rpdp``'s flags)."""

BUDGET_SETTINGS = ("distribution", "class_budgets", "fresh_budgets_per_seed", "budget_seed")
"""What :func:`assign_budgets` takes besides the records and the sampler."""

RUN_SETTINGS = ("clip_norm", "learning_rate", "privacy_free_batch", "eval_every",
                "checkpoint_every", "progress", "estimator", "insecure_reproducible_noise",
                "release_only", "restart")
"""The settings :func:`tff_idp.rpdp.runs.run` takes under the flags' names."""


def check_settings(seeds: Sequence[int], *, noise_multiplier: float, local_steps: int,
                   rounds: int, client_rate: float, delta: float, threat_model: str,
                   clip_norm: float, distribution: str, class_budgets: Optional[Sequence[str]],
                   fresh_budgets_per_seed: bool, audit_canaries: int,
                   audit_levels: Optional[Sequence[str]], release_only: bool
                   ) -> tuple[TwoStageParams, bool, Optional[list[float]]]:
  """Every check of the settings that needs no data; ValueError saying what to change.

  ``distribution`` is the preference distribution's name. Returns the
  two-stage parameters (Alg. 3, Thm 1), whether the budgets follow the
  classes (``by_class``) and the audit's budget levels (None: the plan's).
  """
  if not seeds:
    raise ValueError("--seeds is empty; give at least one seed.")
  params = TwoStageParams(noise_multiplier, local_steps, rounds, client_rate, delta,
                          threat_model)
  if not clip_norm > 0 or math.isinf(clip_norm):
    raise ValueError(f"--clip_norm={clip_norm} must be a finite number > 0.")
  by_class = distribution == preferences.BY_CLASS
  if by_class and not class_budgets:
    raise ValueError("--distribution=by_class needs --class_budgets, one ε per class, "
                     "e.g. --class_budgets=0-4:0.1,5-9:1.")
  if by_class:  # the syntax and every ε now; the classes once the data is loaded
    try:
      preferences.parse_class_budgets(class_budgets, num_classes=None)
    except ValueError as e:
      raise ValueError(f"--class_budgets: {e}") from None
  if class_budgets and not by_class:
    raise ValueError(f"--class_budgets is only used with --distribution=by_class (not "
                     f"{distribution}); drop it or set --distribution=by_class.")
  if fresh_budgets_per_seed and by_class:
    raise ValueError("--fresh_budgets_per_seed draws budgets from a distribution; under "
                     "--distribution=by_class every record's budget is its class's, so "
                     "there is nothing to draw again: drop one of them.")
  if audit_canaries < 0:
    raise ValueError(f"--audit_canaries={audit_canaries} must be >= 0.")
  if audit_canaries and release_only:
    # The audit trains each private method again on the same records: a second
    # release of them that no record's ledger charges (issue 48).
    raise ValueError(f"--audit_canaries={audit_canaries} trains again on the same "
                     "records, which no ledger accounts for: run the audit without "
                     "--release_only.")
  levels = None
  if audit_levels:
    try:
      levels = [float(v) for v in audit_levels]
    except ValueError:
      raise ValueError(f"--audit_levels={','.join(audit_levels)} must be numbers "
                       "(budget levels ε).") from None
    if not audit_canaries:
      raise ValueError("--audit_levels is only used with --audit_canaries=k.")
  return params, by_class, levels


def sampler(distribution: str, levels: Sequence[str], level_ratios: Sequence[str]):
  """The sampler of the ``distribution`` named; None for by_class (budgets follow the labels).

  ``three_levels`` takes its ε and shares from ``levels``/``level_ratios``
  (``--levels``/``--level_ratios``); the others are the paper's parameters
  (:func:`tff_idp.preferences.make_distribution`).
  """
  if distribution == preferences.BY_CLASS:
    return None
  if distribution == "three_levels":
    try:
      return preferences.ThreeLevels(tuple(float(v) for v in levels),
                                     tuple(float(v) for v in level_ratios))
    except ValueError as e:  # issue 50: the message named no flag
      raise ValueError(f"--levels/--level_ratios: {e}") from None
  return preferences.make_distribution(distribution)


def drawn_budgets(sampler_: Any, sizes: Mapping[str, int], budget_seed: int,
                  fresh_budgets_per_seed: bool) -> Union[dict, Callable[[int], dict]]:
  """Every record's ε_ij drawn from ``sampler_``: ``{client: array}``, one draw.

  With ``fresh_budgets_per_seed`` a function of the run seed instead, each
  seed drawing with :func:`tff_idp.preferences.per_seed_budget_seed`.
  """
  if fresh_budgets_per_seed:
    return lambda seed: preferences.assign_record_budgets(  # noqa: E731
        sampler_, sizes, preferences.per_seed_budget_seed(budget_seed, seed))
  return preferences.assign_record_budgets(sampler_, sizes, budget_seed)


@dataclasses.dataclass(frozen=True)
class Budgets:
  """The records' budgets of one comparison, and what the runs and the printed line need.

  ``budgets``: ``{client: ε array}`` or a function of the seed returning one;
  ``dropout_cutoff``: Dropout's ε_mod, from the specification (not the data);
  ``class_groups``: ``{label: "eps=<ε>"}`` under by_class, else None;
  ``described``: the budgets in the line printed before training.
  """
  budgets: Union[dict, Callable[[int], dict]]
  dropout_cutoff: float
  class_groups: Optional[dict]
  described: str


def assign_budgets(federation: Any, sampler_: Any, *, distribution: str,
                   class_budgets: Optional[Sequence[str]], fresh_budgets_per_seed: bool,
                   budget_seed: int) -> Budgets:
  """Every record's ε_ij: its label's (by_class, ``class_budgets``), else drawn from ``sampler_``.

  ``federation``: a :class:`tff_idp.rpdp.runs.Federation` (its records' sizes
  and labels, its classes). Under by_class the classes must be the data's (ValueError naming
  ``--class_budgets``) and ε_mod is the mean of the class budgets
  (:func:`tff_idp.preferences.class_budget_cutoff`); otherwise it is the
  distribution's mean (:func:`tff_idp.preferences.expected_budget`).
  """
  if distribution == preferences.BY_CLASS:
    try:
      by_class = preferences.parse_class_budgets(class_budgets, federation.num_classes)
      class_groups = preferences.class_groups(by_class)
    except ValueError as e:
      raise ValueError(f"--class_budgets: {e}") from None
    return Budgets(preferences.class_record_budgets(federation.records.y, by_class),
                   preferences.class_budget_cutoff(by_class), class_groups,
                   f"by_class ({','.join(class_budgets)})")
  return Budgets(drawn_budgets(sampler_, federation.records.sizes, budget_seed,
                               fresh_budgets_per_seed),
                 preferences.expected_budget(sampler_), None, distribution)
