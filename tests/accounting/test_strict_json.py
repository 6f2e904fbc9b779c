"""Calibrations as strict JSON (tff_idp.accounting.strict_json)."""
import json
import math

from tff_idp.accounting import strict_json


def test_every_non_finite_float_at_any_depth_becomes_null():
  """ε = ∞ (a non-private group) and NaN become None inside dicts, lists and tuples, so
  ``json.dumps(..., allow_nan=False)`` accepts the result; finite values, ints, strings and
  None are kept. Bugs caught: a level not recursed into (tuples, dicts), -∞ or NaN kept."""
  value = {"eps": (0.5, math.inf), "nested": [{"x": -math.inf, "y": math.nan}], "n": 3,
           "name": "g0", "none": None, "z": 1.25}
  out = strict_json.finite_or_none(value)
  assert out == {"eps": [0.5, None], "nested": [{"x": None, "y": None}], "n": 3,
                 "name": "g0", "none": None, "z": 1.25}
  json.dumps(out, allow_nan=False)
  assert strict_json.finite_or_none(math.inf) is None
