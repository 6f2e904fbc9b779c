"""Per-group utility: accuracy and recall per privacy group, the worst group, the imbalance.

IDP makes the groups with smaller budgets pay in utility (INO-SGD Sec. 1 and
D.4.3). These numbers show by how much:

* ``accuracy[g]``: the fraction of group g's test examples that the model
  classifies correctly (for owners that own whole classes this is the
  recall of those classes pooled);
* ``recall[g]``: the macro recall of group g, the mean over the classes that
  occur in g's test examples of each class's recall within g (equal to
  ``accuracy[g]`` when g owns one class);
* ``worst_group``: the group with the lowest accuracy, and that accuracy;
* ``imbalance``: the population standard deviation of the per-group
  recalls, as the INO-SGD paper measures utility imbalance (D.4.3).

A test example's group is given per example (``example_groups``), or through
its label (``class_groups[label]``) when budgets follow the class
(data-dependent budgets). Groups without test examples are reported with NaN
and left out of the worst group and the imbalance. NumPy only: no TensorFlow.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Mapping, Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class GroupReport:
  """Utility per group; the groups are keyed by their names (see module doc)."""
  overall_accuracy: float
  accuracy: dict[str, float]
  recall: dict[str, float]
  support: dict[str, int]

  @property
  def worst_group(self) -> tuple[str, float]:
    """(name, accuracy) of the group with the lowest accuracy (ties: first name)."""
    scored = [(a, g) for g, a in self.accuracy.items() if not math.isnan(a)]
    if not scored:
      return ("", math.nan)
    acc, name = min(scored, key=lambda t: t[0])
    return name, acc

  @property
  def imbalance(self) -> float:
    """Population std of the per-group recalls (INO-SGD D.4.3); NaN with no groups."""
    values = [r for r in self.recall.values() if not math.isnan(r)]
    return float(np.std(values)) if values else math.nan

  def flat(self, prefix: str = "") -> dict[str, float]:
    """One flat dict for ``metrics.csv`` and TensorBoard (``<prefix>acc/<group>`` ...)."""
    out = {f"{prefix}accuracy": self.overall_accuracy}
    for g in self.accuracy:
      out[f"{prefix}acc/{g}"] = self.accuracy[g]
      out[f"{prefix}recall/{g}"] = self.recall[g]
    out[f"{prefix}worst_group_accuracy"] = self.worst_group[1]
    out[f"{prefix}imbalance"] = self.imbalance
    return out

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["worst_group"] = {"name": self.worst_group[0], "accuracy": self.worst_group[1]}
    d["imbalance"] = self.imbalance
    return d


def flat_field_names(group_names: Sequence[str], prefix: str = "") -> list[str]:
  """The keys of :meth:`GroupReport.flat` for these groups, in order."""
  names = [f"{prefix}accuracy"]
  for g in group_names:
    names += [f"{prefix}acc/{g}", f"{prefix}recall/{g}"]
  return names + [f"{prefix}worst_group_accuracy", f"{prefix}imbalance"]


def examples_groups_from_classes(labels: np.ndarray,
                                 class_groups: Mapping[int, str]) -> np.ndarray:
  """Each example's group through its label; every label must have a group."""
  labels = np.asarray(labels)
  missing = sorted(set(np.unique(labels).tolist()) - set(int(k) for k in class_groups))
  if missing:
    raise ValueError(f"labels {missing} have no group; give every class a group "
                     "(class_groups maps label -> group name).")
  lookup = {int(k): str(v) for k, v in class_groups.items()}
  return np.array([lookup[int(c)] for c in labels], dtype=object)


def group_report(labels: np.ndarray, predictions: np.ndarray,
                 example_groups: Optional[np.ndarray] = None,
                 class_groups: Optional[Mapping[int, str]] = None,
                 group_names: Optional[Sequence[str]] = None) -> GroupReport:
  """Per-group accuracy and recall of ``predictions`` against ``labels``.

  Give each example's group (``example_groups``) or each class's group
  (``class_groups``). ``group_names`` fixes the order and lets a group with
  no test example appear (NaN); by default the groups in order of first
  appearance in ``class_groups`` or sorted.
  """
  labels = np.asarray(labels).reshape(-1)
  predictions = np.asarray(predictions).reshape(-1)
  if labels.shape != predictions.shape:
    raise ValueError(f"labels {labels.shape} and predictions {predictions.shape} must "
                     "have one entry per test example.")
  if (example_groups is None) == (class_groups is None):
    raise ValueError("give exactly one of example_groups (per example) or class_groups "
                     "(per label).")
  if class_groups is not None:
    groups = examples_groups_from_classes(labels, class_groups)
    default_names = list(dict.fromkeys(str(v) for v in class_groups.values()))
  else:
    groups = np.asarray([str(g) for g in np.asarray(example_groups).reshape(-1)],
                        dtype=object)
    if groups.shape != labels.shape:
      raise ValueError(f"example_groups has {groups.size} entries for {labels.size} "
                       "examples; give one group per example.")
    default_names = sorted(set(groups.tolist()))
  names = [str(g) for g in (group_names if group_names is not None else default_names)]
  unknown = sorted(set(groups.tolist()) - set(names))
  if unknown:
    raise ValueError(f"groups {unknown} are not in group_names {names}.")
  correct = labels == predictions
  accuracy, recall, support = {}, {}, {}
  for g in names:
    in_g = groups == g
    support[g] = int(in_g.sum())
    if not in_g.any():
      accuracy[g] = recall[g] = math.nan
      continue
    accuracy[g] = float(correct[in_g].mean())
    recall[g] = float(np.mean([correct[in_g & (labels == c)].mean()
                               for c in np.unique(labels[in_g])]))
  overall = float(correct.mean()) if labels.size else math.nan
  return GroupReport(overall, accuracy, recall, support)
