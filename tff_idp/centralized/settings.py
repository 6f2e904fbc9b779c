"""The centralized comparison's settings, checked before any data or TensorFlow (rPDP-FL §7.1).

:func:`checked` turns the values of ``experiments.centralized``'s flags into the
settings :func:`tff_idp.centralized.runs.run_experiment` runs (Table 2's
comparison of SCF, BinarySearch and Filter; Table 3's calibration runtimes),
and refuses a bad value in one line that names the flag to change.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from tff_idp import preferences
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.centralized.methods import METHODS

MODES = ("compare", "table3", "both")
RATE_METHODS = frozenset({"scf", "binary_search", "exact"})
"""The DP-SGD rate methods Table 3 compares."""


def _floats(values, name: str) -> tuple:
  try:
    return tuple(float(v) for v in values)
  except ValueError as e:
    raise ValueError(f"--{name} must be numbers: {e}") from None


def _check_ranges(v: Mapping[str, Any]) -> None:
  """Counts, learning rates, the clip and Filter's σ and order (one line per bad value)."""
  for name in ("steps", "table3_steps", "table3_trials", "table3_examples"):
    if v[name] < 1:
      raise ValueError(f"--{name}={v[name]} must be >= 1.")
  for name in ("train_examples", "test_examples", "filter_steps", "eval_every"):
    if v[name] < 0:
      raise ValueError(f"--{name}={v[name]} must be >= 0.")
  if not v["clip_norm"] > 0 or math.isinf(v["clip_norm"]):
    raise ValueError(f"--clip_norm={v['clip_norm']} must be a finite number > 0.")
  for name in ("learning_rate", "filter_learning_rate", "table3_learning_rate"):
    if not v[name] > 0 or math.isinf(v[name]):
      raise ValueError(f"--{name}={v[name]} must be a finite number > 0.")
  noise = v["filter_noise_multiplier"]
  if noise < 0 or math.isinf(noise):
    raise ValueError(f"--filter_noise_multiplier={noise} must be > 0 "
                     "(or 0 to choose it from the budgets).")
  if v["filter_alpha"] != 0 and not v["filter_alpha"] > 1:
    raise ValueError(f"--filter_alpha={v['filter_alpha']} must be > 1 (or 0 for "
                     "per-record orders).")


def checked(v: Mapping[str, Any]) -> dict:
  """The settings of flag values ``v`` (name → value), checked; raises ValueError with advice."""
  methods = list(v["methods"])
  unknown = sorted(set(methods) - set(METHODS))
  if unknown or not methods:
    raise ValueError(f"--methods has {unknown or 'nothing'}; choose from {', '.join(METHODS)}.")
  seeds = [int(s) for s in v["seeds"]]
  if not seeds:
    raise ValueError("--seeds is empty; give at least one seed.")
  _check_ranges(v)
  if v["mode"] != "compare" and 0 < v["train_examples"] < v["table3_examples"]:
    # The silo holds at most --train_examples records (issue 50: refused after TF loaded).
    raise ValueError(f"--table3_examples={v['table3_examples']} exceeds the silo's at most "
                     f"{v['train_examples']} records (--train_examples): lower "
                     "--table3_examples or raise --train_examples.")
  levels = _floats(v["levels"], "levels")
  ratios = _floats(v["level_ratios"], "level_ratios")
  try:
    distribution = preferences.ThreeLevels(levels, ratios)  # checks ε > 0, ratios sum to 1
  except ValueError as e:
    raise ValueError(f"--levels/--level_ratios: {e}") from None
  # TwoStageParams checks σ, δ and the steps with advice.
  TwoStageParams(v["noise_multiplier"], v["steps"], 1, 1.0, v["delta"])
  TwoStageParams(v["table3_noise_multiplier"], v["table3_steps"], 1, 1.0, v["delta"])
  keys = ("mode", "noise_multiplier", "steps", "clip_norm", "learning_rate", "delta",
          "filter_noise_multiplier", "filter_learning_rate", "filter_check", "eval_every",
          "data_seed", "budget_seed", "table3_examples", "table3_trials",
          "table3_noise_multiplier", "table3_steps", "table3_learning_rate",
          "insecure_reproducible_noise")
  return dict({k: v[k] for k in keys}, methods=methods, seeds=seeds, distribution=distribution,
              filter_steps=v["filter_steps"] or v["steps"],
              filter_alpha=v["filter_alpha"] or None)


def check_silo(cfg: Mapping[str, Any], records: int) -> None:
  """The checks that need the silo's size: Table 3's subset and its methods."""
  if cfg["mode"] != "compare" and cfg["table3_examples"] > records:
    raise ValueError(f"--table3_examples={cfg['table3_examples']} exceeds the silo's "
                     f"{records} records (raise --train_examples).")
  if cfg["mode"] != "compare" and not RATE_METHODS & set(cfg["methods"]):
    raise ValueError("--mode=table3 compares DP-SGD rate methods; put scf and/or "
                     "binary_search in --methods.")
