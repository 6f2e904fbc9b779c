"""Calibration results as strict JSON: every non-finite float becomes null.

An ε = ∞ budget (a non-private group or owner) is a legitimate value in a
calibration, but ``json.dumps(..., allow_nan=False)`` refuses it and plain
``json.dumps`` writes ``Infinity``, which is not JSON. No TensorFlow here
(``tff_idp.accounting`` imports none).
"""
from __future__ import annotations

import math
from typing import Any


def finite_or_none(value: Any) -> Any:
  """``value`` with every non-finite float, at any depth of dicts, lists and tuples, as None.

  Tuples come back as lists (what JSON holds).
  """
  if isinstance(value, dict):
    return {k: finite_or_none(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [finite_or_none(v) for v in value]
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value
