"""Dtype and value checks for user arrays, before any calibration or training.

Also :func:`to_arrays`, a split's client dataset as NumPy arrays (shared by
the runners and :mod:`datasets`).

Training code expects float32 features and int32 labels. Arrays from pandas,
scikit-learn or NumPy defaults are often float64 / int64: they are converted
here when the conversion loses nothing (integer-valued labels in int32
range), and rejected otherwise with a message that names the field and says
what to change. No TensorFlow import.
"""
from __future__ import annotations

import numpy as np

from tff_idp.errors import ToolkitValueError


def as_features(x, field: str = "x") -> np.ndarray:
  """``x`` as float32; rejects non-numeric, empty-shaped, NaN and infinite values."""
  arr = np.asarray(x)
  if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number)
                                 or arr.dtype == np.bool_):
    raise ToolkitValueError(f"{field}: features must be numeric (got dtype {arr.dtype}); "
                            "encode categorical columns as numbers first.")
  if arr.ndim < 2:
    raise ToolkitValueError(f"{field}: features need shape [examples, ...] (got shape "
                            f"{arr.shape}); reshape a single feature to [-1, 1].")
  with np.errstate(over="ignore", invalid="ignore"):  # caught just below
    out = arr.astype(np.float32)
  bad = ~np.isfinite(out)
  if bad.any():
    row = int(np.argwhere(bad)[0][0])
    raise ToolkitValueError(f"{field}: example {row} has a NaN or infinite feature (or one "
                            "beyond float32 range); impute or drop such rows.")
  return out


def as_labels(y, field: str = "y", num_classes: int | None = None) -> np.ndarray:
  """``y`` as int32 class ids in ``[0, num_classes)``; rejects fractional or negative labels."""
  arr = np.asarray(y)
  if arr.ndim == 2 and arr.shape[1] == 1:
    arr = arr[:, 0]
  if arr.ndim != 1:
    raise ToolkitValueError(f"{field}: labels need shape [examples] (got {arr.shape}); give "
                            "integer class ids, not one-hot rows.")
  if arr.dtype == np.bool_:
    arr = arr.astype(np.int32)
  if not np.issubdtype(arr.dtype, np.number):
    raise ToolkitValueError(f"{field}: labels must be integer class ids (got dtype "
                            f"{arr.dtype}); map them to 0..K-1 first.")
  if np.issubdtype(arr.dtype, np.floating):
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
      raise ToolkitValueError(f"{field}: labels must be whole numbers (got fractional or "
                              "NaN values); give class ids 0..K-1.")
  if arr.size and (arr.min() < 0 or arr.max() > np.iinfo(np.int32).max):
    raise ToolkitValueError(f"{field}: labels must be class ids >= 0 (found "
                            f"{arr.min():g}..{arr.max():g}).")
  out = arr.astype(np.int32)
  if num_classes is not None and out.size and out.max() >= num_classes:
    raise ToolkitValueError(f"{field}: label {int(out.max())} is out of range for "
                            f"{num_classes} classes (expected 0..{num_classes - 1}).")
  return out


def to_arrays(dataset) -> tuple:
  """A dataset of single examples (``x``, ``y``) as (x float32, y int32) numpy arrays.

  Reads in chunks of 4,096, so memory stays at the size of the result.
  """
  xs, ys = [], []
  for batch in dataset.batch(4096):
    xs.append(batch["x"].numpy().astype(np.float32))
    ys.append(batch["y"].numpy().astype(np.int32).reshape(-1))
  if not xs:
    raise ValueError("the split has a client or test set without examples.")
  return np.concatenate(xs), np.concatenate(ys)
