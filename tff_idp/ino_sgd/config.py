"""The settings of an INO-SGD comparison and the checks they need (no TensorFlow).

``experiments.ino_sgd`` resolves its flags against a preset
(:data:`tff_idp.ino_sgd.defaults.PRESETS`) with :func:`resolve`, which
refuses bad values in one line before TensorFlow is imported
(:func:`tff_idp.cli.launch`); once the silo and its owners are known,
:func:`fit_to_data` sets b and refuses an infeasible plan (IDP-SGD's SAMPLE
or SCALE, :mod:`tff_idp.accounting.owner.plan`) before any training, with
:func:`check_plan`, and :func:`run_line` is the line printed before it.
:func:`tff_idp.runners.run_ino_sgd` runs the same plan check and draws
per-record budgets with the same :func:`owners_by_drawn_budgets`. The
messages name the command line's flags (``--steps``), as the runner's
arguments of the same names.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tff_idp import preferences
from tff_idp.accounting.owner import plan as owner_plan
from tff_idp.ino_sgd import defaults
from tff_idp.ino_sgd import methods

SETTINGS = ("methods", "drop_percents", "seeds", "epsilons", "steps", "expected_batch",
            "learning_rate", "clip_norm", "mechanism", "delta", "ino_gamma_ratio", "ino_alpha",
            "ino_beta", "train_examples", "test_examples", "eval_every", "data_seed",
            "progress", "insecure_reproducible_noise", "release_only")
"""The names :func:`resolve` reads from ``given`` (the command line's flags of those names)."""


def _floats(values, name: str) -> list[float]:
  try:
    return [float(v) for v in values]
  except ValueError as e:
    raise ValueError(f"--{name} must be numbers: {e}") from None


def resolve(preset_name: str, given: Mapping[str, Any], own_data: bool) -> dict:
  """The preset's values overridden by those ``given`` (not None), all checked.

  ``given`` holds every name of :data:`SETTINGS`; ``own_data`` (``--dataset``)
  uses your split whole unless ``train_examples``/``test_examples`` are given
  (the preset's sizes are its own data's). Raises ValueError with advice.
  """
  preset = defaults.PRESETS[preset_name]

  def pick(name: str, default):
    return default if given[name] is None else given[name]

  chosen = list(given["methods"])
  unknown = sorted(set(chosen) - set(methods.METHODS))
  if unknown or not chosen:
    raise ValueError(f"--methods has {unknown or 'nothing'}; choose from "
                     f"{', '.join(methods.METHODS)}.")
  drops = _floats(given["drop_percents"], "drop_percents")
  if "drop" in chosen and (not drops or any(not 0 < p < 100 for p in drops)):
    raise ValueError(f"--drop_percents={given['drop_percents']} must be percentages in "
                     "(0, 100).")
  seeds = [int(s) for s in given["seeds"]]
  if not seeds:
    raise ValueError("--seeds is empty; give at least one seed.")
  epsilons = _floats(pick("epsilons", preset.epsilons), "epsilons")
  if len(epsilons) != len(preset.owners):
    raise ValueError(f"--epsilons has {len(epsilons)} values; the {preset.name} preset has "
                     f"{len(preset.owners)} owners ({', '.join(preset.owner_names)}).")
  for e in epsilons:
    if not e > 0 or math.isnan(e):
      raise ValueError(f"--epsilons: ε={e} must be > 0 (inf = no privacy for that owner).")
  cfg = {
      "preset": preset_name, "preset_name": preset.name, "methods": chosen,
      "drop_percents": drops, "seeds": seeds, "epsilons": epsilons,
      "owner_names": list(preset.owner_names), "owners": preset.owners,
      "steps": pick("steps", preset.steps),
      "expected_batch": pick("expected_batch", preset.expected_batch),
      "learning_rate": pick("learning_rate", preset.learning_rate),
      "clip_norm": pick("clip_norm", preset.clip_norm),
      "mechanism": pick("mechanism", preset.mechanism), "delta": given["delta"],
      "ino_gamma_ratio": pick("ino_gamma_ratio", preset.ino_gamma_ratio),
      "ino_alpha": pick("ino_alpha", preset.ino_alpha),
      "ino_beta": pick("ino_beta", preset.ino_beta),
      # The preset's sizes are its own data's; your --dataset is used whole.
      "train_examples": pick("train_examples", defaults.DEFAULTS["train_examples"]
                             if own_data else preset.train_examples),
      "test_examples": pick("test_examples", defaults.DEFAULTS["test_examples"]
                            if own_data else preset.test_examples),
      "eval_every": given["eval_every"], "data_seed": given["data_seed"],
      "progress": given["progress"],
      "insecure_reproducible_noise": given["insecure_reproducible_noise"],
      "release_only": given["release_only"],
  }
  if cfg["steps"] < 1:
    raise ValueError(f"--steps={cfg['steps']} must be >= 1.")
  if cfg["expected_batch"] is not None and not cfg["expected_batch"] > 0:
    raise ValueError(f"--expected_batch={cfg['expected_batch']} must be > 0.")
  for name in ("learning_rate", "clip_norm"):
    if not cfg[name] > 0 or math.isinf(cfg[name]):
      raise ValueError(f"--{name}={cfg[name]} must be a finite number > 0.")
  if not 0 < cfg["delta"] < 1:
    raise ValueError(f"--delta={cfg['delta']} must be in (0, 1), e.g. 1e-5.")
  if cfg["ino_gamma_ratio"] < 0 or math.isinf(cfg["ino_gamma_ratio"]):
    raise ValueError(f"--ino_gamma_ratio={cfg['ino_gamma_ratio']} must be >= 0 "
                     "(0 = IDP-SGD).")
  for name in ("ino_alpha", "ino_beta"):
    if not cfg[name] > 0 or math.isinf(cfg[name]):
      raise ValueError(f"--{name}={cfg[name]} must be a finite number > 0.")
  for name in ("train_examples", "test_examples", "eval_every"):
    if cfg[name] < 0:
      raise ValueError(f"--{name}={cfg[name]} must be >= 0.")
  return cfg


def check_owner_settings(class_budgets: Optional[Sequence[str]],
                         record_distribution: Optional[str], epsilons_given: bool) -> None:
  """Owners by class or budgets per record, not both, and neither with the preset's ε."""
  if class_budgets and record_distribution:
    raise ValueError("give --class_budgets (owners by class) or --record_distribution "
                     "(budgets per record), not both.")
  if (class_budgets or record_distribution) and epsilons_given:
    raise ValueError("--epsilons sets the preset owners' budgets; with --class_budgets or "
                     "--record_distribution the budgets come from those, so drop --epsilons.")


def class_budgets(spec: Optional[Sequence[str]], num_classes: Optional[int]) -> Optional[dict]:
  """``{class: ε}`` of ``--class_budgets`` (None when not given); ValueError naming the flag."""
  if not spec:
    return None
  try:
    return preferences.parse_class_budgets(spec, num_classes)
  except ValueError as e:
    raise ValueError(f"--class_budgets: {e}") from None


def owners_by_drawn_budgets(labels: np.ndarray, distribution: str, budget_seed: int,
                            num_classes: int) -> methods.Owners:
  """Owners as records of equal ε, one ε per record drawn from ``distribution``.

  ``distribution``: a name of :data:`tff_idp.preferences.DISTRIBUTIONS`, drawn
  with ``budget_seed`` (``--record_distribution``, ``run_ino_sgd(budgets=<name>)``).
  """
  drawn = preferences.assign_record_budgets(preferences.DISTRIBUTIONS[distribution](),
                                            [len(labels)], budget_seed)["0"]
  return methods.owners_by_record(labels, drawn, num_classes)


def check_batch(cfg: Mapping[str, Any]) -> None:
  """b must fit in the silo when its size is known before the data (``train_examples``)."""
  batch, most = cfg["expected_batch"], cfg["train_examples"]
  if batch is not None and most and batch > most:  # the silo has at most that many records
    raise ValueError(f"--expected_batch={batch:g} exceeds the silo's at most {most} records "
                     "(--train_examples): lower --expected_batch or raise --train_examples.")


def fit_to_data(cfg: dict, owners: methods.Owners, records: int) -> None:
  """Sets ``cfg``'s owners and b from the silo's ``records``; refuses a b or plan that fails.

  b defaults to a tenth of the records (:func:`tff_idp.ino_sgd.defaults.expected_batch`)
  and may not exceed them; the undropped plan must be feasible (:func:`check_plan`).
  """
  cfg.update(epsilons=list(owners.epsilons), owner_names=list(owners.names),
             expected_batch=defaults.expected_batch(cfg["expected_batch"], records))
  if cfg["expected_batch"] > records:
    raise ValueError(f"--expected_batch={cfg['expected_batch']:g} exceeds the "
                     f"{records} records; lower it.")
  check_plan(cfg, owners)


def check_plan(cfg: Mapping[str, Any], owners: methods.Owners) -> None:
  """Fails before any training, in one line, if the undropped plan is infeasible.

  The plan of every owner's (ε_n, δ) at ``cfg``'s T, b and C with SAMPLE or
  SCALE (INO-SGD Thm 3.3; :func:`tff_idp.accounting.owner.plan.plan_owners`).
  """
  owner_plan.plan_owners(cfg["epsilons"],
                         np.bincount(owners.of_record, minlength=len(cfg["epsilons"])),
                         cfg["delta"], cfg["steps"], cfg["expected_batch"], cfg["clip_norm"],
                         cfg["mechanism"])


def paper_notes(paper: Optional[Mapping[str, Any]]) -> list[str]:
  """The summary's note of the paper's overall accuracies (a preset's Table 3 row), if any."""
  if not paper:
    return []
  row = ", ".join(f"{k} {v}" for k, v in paper.items() if not k.startswith("_"))
  return [f"Paper ({paper['_source']}), overall accuracy (%): {row}"]


def run_line(opening: str, data_name: str, test_records: int, owners: methods.Owners,
             cfg: Mapping[str, Any], batch_given: bool) -> str:
  """The line printed before training: the data and owners, the mechanism and settings.

  Under ``--release_only`` without the records' statistics (issue 48): no record
  counts (of the silo or per owner), no owners where they are the budget levels
  the records hold (budgets per record), no b where the record count set it.
  """
  names, epsilons = cfg["owner_names"], cfg["epsilons"]
  if not cfg["release_only"]:
    owners_text = ", ".join(f"{g}: ε={e:g} ({int(np.sum(owners.of_record == n))} records)"
                            for n, (g, e) in enumerate(zip(names, epsilons)))
    data_text = f"{data_name}, {test_records} test; owners {owners_text}"
    batch_text = f"b={cfg['expected_batch']:g}"
  else:
    owners_text = (", ".join(f"{g}: ε={e:g}" for g, e in zip(names, epsilons))
                   if owners.by_class else "budgets per record")
    data_text = (f"{methods.release_data_name(data_name)}, {test_records} test; owners "
                 f"{owners_text}")
    batch_text = (f"b={cfg['expected_batch']:g}" if batch_given
                  else "b from the record count (not shown)")
  return (f"{opening}: {data_text}; "
          f"{cfg['mechanism'].upper()}, T={cfg['steps']}, {batch_text}, "
          f"C={cfg['clip_norm']:g}, η={cfg['learning_rate']:g}, δ={cfg['delta']:g}; INO "
          f"γ={cfg['ino_gamma_ratio']:g}·E[Σ q C], Beta({cfg['ino_alpha']:g}, "
          f"{cfg['ino_beta']:g}); seeds {cfg['seeds']}")
