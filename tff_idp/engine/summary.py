"""One summary schema for every family's ``summary.json`` (docs/api.md).

Every experiment writes, next to its ``summary.md`` table::

  {"schema": 1,                 # SCHEMA_VERSION
   "family": "idp_fedavg",      # idp_fedavg, rpdp, ino_sgd, apes, centralized, audit
   "privacy_warning": null,     # or the NOT PRIVATE label of --insecure_reproducible_noise
   "config": {...},             # the flags / settings of the run
   "results": [{"label": ..., "mean_accuracy": ..., "std_accuracy": ..., ...}, ...],
   "details": {...}}            # family-specific extras (curves, owners, ...)

* every row has ``label`` (its name in the printed table), ``final_accuracies``
  (one per seed, in seed order), ``mean_accuracy`` and ``std_accuracy``
  (:data:`ROW_KEYS`; :func:`tff_idp.engine.run_template.run_grid` adds the
  last three), then the family's own entries;
* ``std_accuracy`` (and every other sd) is the sample sd over seeds, ddof = 1
  (0 for one seed): :func:`sample_sd`;
* infinite and NaN values (e.g. ε = ∞ budgets) are written as ``null``: the
  file is strict JSON (:func:`json_safe`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

SCHEMA_VERSION = 1
TOP_LEVEL_KEYS = ("schema", "family", "privacy_warning", "config", "results", "details")
FAMILIES = ("idp_fedavg", "rpdp", "ino_sgd", "apes", "centralized", "audit")
ROW_KEYS = ("label", "final_accuracies", "mean_accuracy", "std_accuracy")


def sample_sd(values: Sequence[float]) -> float:
  """The sample standard deviation (ddof = 1) of finite values; 0.0 for fewer than two."""
  v = np.asarray([x for x in values if x is not None], float)
  v = v[np.isfinite(v)]
  return float(np.std(v, ddof=1)) if v.size > 1 else 0.0


def json_safe(value: Any) -> Any:
  """``value`` with infinities and NaN as None, NumPy values as Python ones."""
  if isinstance(value, Mapping):
    return {str(k): json_safe(v) for k, v in value.items()}
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return json_safe(dataclasses.asdict(value))
  if isinstance(value, (list, tuple)):
    return [json_safe(v) for v in value]
  if isinstance(value, np.ndarray):
    return json_safe(value.tolist())
  if isinstance(value, (bool, np.bool_)):
    return bool(value)
  if isinstance(value, (int, np.integer)):
    return int(value)
  if isinstance(value, (float, np.floating)):
    return float(value) if math.isfinite(value) else None
  if value is None or isinstance(value, str):
    return value
  return str(value)


def write_summary(output_dir: str, family: str, config: Mapping[str, Any],
                  results: Sequence[Mapping[str, Any]], *,
                  privacy_warning: Optional[str] = None,
                  details: Optional[Mapping[str, Any]] = None) -> str:
  """Writes ``summary.json`` in the one schema; returns its path.

  Raises ValueError for an unknown family or a row without one of :data:`ROW_KEYS`.
  """
  if family not in FAMILIES:
    raise ValueError(f"family={family!r} must be one of {FAMILIES}.")
  _check_rows(results)
  doc = {"schema": SCHEMA_VERSION, "family": family, "privacy_warning": privacy_warning,
         "config": json_safe(dict(config)), "results": json_safe(list(results)),
         "details": json_safe(dict(details or {}))}
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, "summary.json")
  with open(path, "w") as f:
    json.dump(doc, f, indent=1, allow_nan=False, ensure_ascii=False)
  return path


def check_summary(doc: Mapping[str, Any]) -> None:
  """Raises ValueError unless ``doc`` follows the schema (used by the tests)."""
  if tuple(doc) != TOP_LEVEL_KEYS:
    raise ValueError(f"top-level keys {tuple(doc)} != {TOP_LEVEL_KEYS}")
  if doc["schema"] != SCHEMA_VERSION or doc["family"] not in FAMILIES:
    raise ValueError(f"schema {doc['schema']} / family {doc['family']!r}")
  _check_rows(doc["results"])
  json.dumps(doc, allow_nan=False)  # strict JSON: no Infinity / NaN


def _check_rows(results: Sequence[Mapping[str, Any]]) -> None:
  for i, row in enumerate(results):
    missing = [k for k in ROW_KEYS if k not in row]
    if missing:
      raise ValueError(f"results[{i}] lacks {', '.join(missing)} (every row has "
                       f"{', '.join(ROW_KEYS)}; label is its name in the table).")
