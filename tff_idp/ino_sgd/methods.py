"""The INO-SGD comparison's methods and owners, without TensorFlow (checked before training).

INO-SGD paper §5 and Table 3: IDP-SGD, INO-SGD (Alg. 1) and "Drop x%", one
table row each; owner n holds the classes ``owners[n]``.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Optional, Sequence

import numpy as np

METHODS = ("idp_sgd", "drop", "ino_sgd")


@dataclasses.dataclass(frozen=True)
class MethodRun:
  """One row of the table: its label, the method and (Drop) the fraction removed."""
  label: str
  kind: str
  drop: float = 0.0

  @property
  def slug(self) -> str:
    return self.label.lower().replace(" ", "_").replace("%", "pct")


def method_runs(methods: Sequence[str], drop_percents: Sequence[float]) -> list[MethodRun]:
  """The runs of ``methods``: Drop expands to one run per percentage."""
  runs = []
  for m in methods:
    if m == "idp_sgd":
      runs.append(MethodRun("IDP-SGD", m))
    elif m == "ino_sgd":
      runs.append(MethodRun("INO-SGD", m))
    elif m == "drop":
      runs += [MethodRun(f"Drop {p:g}%", m, p / 100) for p in drop_percents]
    else:
      raise ValueError(f"method {m!r}; choose from {', '.join(METHODS)}.")
  return runs


def owner_of_labels(labels: np.ndarray, owners: Sequence[Sequence[int]]) -> np.ndarray:
  """Each record's owner index through its class; every class present must be owned."""
  lookup = {c: n for n, classes in enumerate(owners) for c in classes}
  missing = sorted(set(np.unique(labels).tolist()) - set(lookup))
  if missing:
    raise ValueError(f"classes {missing} have no owner; give every class present a budget.")
  return np.array([lookup[int(c)] for c in labels], np.int64)


@dataclasses.dataclass(frozen=True)
class Owners:
  """The data owners of one silo (INO-SGD §3): owner n holds budget ``epsilons[n]``.

  ``of_record[i]`` is record i's owner; ``class_groups`` maps each class to
  the group its test records are reported under (an owner's name when owners
  are classes, the class itself when budgets are per record).
  """
  of_record: np.ndarray
  epsilons: tuple
  names: tuple
  class_groups: dict

  @property
  def by_class(self) -> bool:
    """Whether the evaluation groups are the owners (budgets follow the classes)."""
    return set(self.class_groups.values()) == set(self.names)

  def classes_of_owners(self) -> Optional[dict]:
    """``{owner: its sorted classes}`` where owners are classes (:attr:`by_class`), else None."""
    if not self.by_class:
      return None
    return {g: sorted(c for c, n in self.class_groups.items() if n == g) for g in self.names}


def owners_of_classes(labels: np.ndarray, owners: Sequence[Sequence[int]],
                      epsilons: Sequence[float]) -> Owners:
  """Owner n holds the classes ``owners[n]`` at ``epsilons[n]`` (a preset's owners, INO-SGD §5).

  Each owner is named by its classes (:func:`classes_name`), the group its
  test records are reported under.
  """
  names = tuple(classes_name(c) for c in owners)
  return Owners(owner_of_labels(labels, owners), tuple(epsilons), names,
                {c: names[n] for n, classes in enumerate(owners) for c in classes})


def owners_by_class(labels: np.ndarray, class_budgets: Mapping[int, float]) -> Owners:
  """Owners as classes of equal budget (``{class: ε}``, every class present needs one).

  Each owner is named by its classes (:func:`classes_name`, e.g. "0-4"), the
  group its test records are reported under (INO-SGD §5: an owner holds classes).
  """
  order = sorted(class_budgets.items(), key=lambda t: (float(t[1]), int(t[0])))
  levels = list(dict.fromkeys(float(e) for _, e in order))
  owners = tuple(tuple(sorted(int(c) for c, e in order if float(e) == level))
                 for level in levels)
  names = tuple(classes_name(classes) for classes in owners)
  of_record = owner_of_labels(labels, owners)
  groups = {c: names[n] for n, classes in enumerate(owners) for c in classes}
  return Owners(of_record, tuple(levels), names, groups)


def owners_by_record(labels: np.ndarray, budgets: np.ndarray, num_classes: int) -> Owners:
  """Owners as the records of equal budget (one ε per record); test groups are the classes."""
  budgets = np.asarray(budgets, float)
  if budgets.shape != np.shape(labels):
    raise ValueError(f"{budgets.size} record budgets for {np.size(labels)} records; give one "
                     "ε per record, in the split's client order.")
  if np.any(~(budgets > 0)):
    raise ValueError("every record budget must be > 0 (inf: no privacy for that record).")
  levels, of_record = np.unique(budgets, return_inverse=True)
  return Owners(of_record.astype(np.int64), tuple(float(e) for e in levels),
                tuple(budget_name(e) for e in levels),
                {c: f"class {c}" for c in range(num_classes)})


def classes_name(classes: Sequence[int]) -> str:
  """An owner's name from its classes: "class 3", "0-4", "0-2,5,7-9" (runs of consecutive classes)."""
  ordered = sorted(int(c) for c in classes)
  if not ordered:
    raise ValueError("an owner needs at least one class.")
  if len(ordered) == 1:
    return f"class {ordered[0]}"
  runs: list[list[int]] = []
  for c in ordered:
    if runs and c == runs[-1][-1] + 1:
      runs[-1].append(c)
    else:
      runs.append([c])
  return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def budget_name(epsilon: float) -> str:
  """An owner's name from its budget: "eps=0.1"."""
  return f"eps={float(epsilon):g}"


def release_data_name(name: str) -> str:
  """``name`` without its record count ("Synthetic IID (pooled, 600 records)" → "Synthetic
  IID (pooled)"): the exact count of the private records is no part of a release
  (issue 48; :mod:`tff_idp.ino_sgd.runs`, release mode)."""
  return re.sub(r"(, )?\b\d+ records\b", "", name).replace(" ()", "")
