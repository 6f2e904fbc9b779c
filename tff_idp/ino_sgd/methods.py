"""The INO-SGD comparison's methods and owners, without TensorFlow (checked before training).

INO-SGD paper §5 and Table 3: IDP-SGD, INO-SGD (Alg. 1) and "Drop x%", one
table row each; owner n holds the classes ``owners[n]``.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

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
    raise ValueError(f"classes {missing} have no owner in this preset.")
  return np.array([lookup[int(c)] for c in labels], np.int64)
