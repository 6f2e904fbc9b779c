"""The resume fingerprint: exactly what changes a run's result or its privacy.

A checkpoint stores the fingerprint of the run that wrote it, and
:class:`tff_idp.engine.driver.RoundDriver` refuses to resume it under
another one. Both mistakes are costly:

* **too little** in the fingerprint and a run resumes under other parameters
  (e.g. another learning rate). The resumed run continues the checkpointed
  secret randomness, so a round replayed under the new parameters is noised
  with the *same* noise as the one released before: the difference of the two
  releases is an exact, un-noised difference of statistics of the private
  data. The ledger and the metrics would also describe a run that never
  happened.
* **too much** and harmless changes (a trailing slash on ``--output_dir``,
  ``--eval_every``, the ``--seeds`` list) refuse a resume.

:func:`run_fingerprint` is the one place that says what goes in; every runner
(``experiments.common.run_all``, ``record_level.run_record_level``) builds its
fingerprint with it, and the driver adds the process's own hyperparameters
(:func:`process_identity`). It holds:

* ``calibration``: everything the privacy guarantee is computed from: σ, the
  sampling rates, δ, the accountant, the budgets, the number of rounds, the
  clip norm, and per-client / per-record rates and budgets as digests;
* ``training``: the training hyperparameters: learning rates, optimizers,
  local epochs or steps, batch size, local algorithm;
* ``data``: the identity of the training data (a digest of the records, or
  of the client ids and element structure);
* ``model``: the identity of the model (layer types and configs, weight
  shapes), where the runner can see it; the driver always adds the process
  state's shapes and hyperparameters;
* ``run_seed``: this run's seed (not the list of all seeds);
* ``insecure_reproducible_noise``: the NOT PRIVATE debug mode.

It holds nothing else: not the output directory, progress bars, evaluation or
checkpoint frequency, release-only mode, or the other runs and seeds of an
experiment.

This module imports no TensorFlow (the Keras and TFF helpers take the objects).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Iterable, Mapping, Optional

import numpy as np

from tff_idp.errors import ToolkitValueError

VERSION = 1
"""Bumped when the fingerprint's layout changes (older checkpoints are then refused)."""

# Arrays with more elements than this are stored as a digest (a checkpoint
# must not grow with the federation, and an error message must stay readable).
_MAX_INLINE_ELEMENTS = 16


def array_digest(*arrays: Any) -> str:
  """A short digest of numeric arrays: their shapes, dtypes and exact bytes."""
  h = hashlib.sha256()
  for a in arrays:
    a = np.ascontiguousarray(a)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    h.update(a.tobytes())
  return h.hexdigest()[:16]


def mapping_digest(arrays: Mapping[str, Any]) -> str:
  """A digest of ``{key: array}`` (e.g. per-client rates), in sorted key order."""
  h = hashlib.sha256()
  for key in sorted(arrays):
    h.update(str(key).encode() + b"\0")
    h.update(array_digest(arrays[key]).encode())
  return h.hexdigest()[:16]


def records_identity(x: Mapping[str, Any], y: Mapping[str, Any]) -> dict:
  """The identity of an in-memory federation ``x[cid]``, ``y[cid]`` (every byte)."""
  return {"clients": len(x), "records": int(sum(len(v) for v in y.values())),
          "x": mapping_digest(x), "y": mapping_digest(y)}


def client_data_identity(client_data: Any) -> dict:
  """The identity of a ``tff.simulation.datasets.ClientData``, without reading it.

  Its client ids and element structure (shapes, dtypes). Reading every
  client's examples would cost minutes on large federations, so two datasets
  with the same ids and element structure but other examples are not told
  apart; the experiment modules keep one dataset per output directory.
  """
  ids = [str(c) for c in client_data.client_ids]
  h = hashlib.sha256("\0".join(sorted(ids)).encode()).hexdigest()[:16]
  return {"clients": len(ids), "client_ids": h,
          "element_spec": str(client_data.element_type_structure)}


def _strip_names(value: Any) -> Any:
  if isinstance(value, Mapping):
    return {k: _strip_names(v) for k, v in value.items() if k != "name"}
  if isinstance(value, (list, tuple)):
    return [_strip_names(v) for v in value]
  return value


def keras_model_identity(model: Any) -> dict:
  """Layer types and configs (names left out: Keras numbers them per build) and weight shapes."""
  layers = []
  for layer in model.layers:
    try:
      config = canonical(_strip_names(layer.get_config()))
    except (NotImplementedError, ToolkitValueError):
      config = None  # no config, or one that is not stable text (e.g. holds a function)
    layers.append([type(layer).__name__, config])
  return {"layers": layers,
          "weights": [[list(w.shape), str(w.dtype.name)] for w in model.weights]}


def process_identity(process: Any, initial_state: Any) -> Optional[dict]:
  """The hyperparameters of a TFF ``LearningProcess`` (learning rates, ...), if it exposes them.

  ``get_hparams`` reads them from the state that ``initialize()`` returned
  (:func:`tff.learning.templates.compose_learning_process` supports it):
  client and server optimizer hyperparameters. None when the process has no
  ``get_hparams``; runners must then pass the hyperparameters themselves.
  """
  get_hparams = getattr(process, "get_hparams", None)
  if get_hparams is None:
    return None
  try:
    hparams = get_hparams(initial_state)
  except (NotImplementedError, TypeError, ValueError):
    return None
  return {"hparams": canonical(hparams)}


def _plain_float(value: float) -> Any:
  value = float(value)
  if math.isfinite(value):
    return value
  return repr(value)  # "nan", "inf", "-inf": JSON has no literal for them


def canonical(value: Any) -> Any:
  """``value`` as plain JSON data with a stable text form (see :func:`digest`).

  Mappings get string keys, sequences become lists, numpy scalars become
  Python numbers, arrays of more than a few elements become a digest, and
  dataclasses their fields. Objects whose text is not stable (their ``repr``
  shows a memory address, e.g. functions) are refused: pass a description
  of them (a name and parameters) instead.
  """
  if value is None or isinstance(value, (bool, str)):
    return value
  if isinstance(value, (int, np.integer)) and not isinstance(value, np.bool_):
    return int(value)
  if isinstance(value, np.bool_):
    return bool(value)
  if isinstance(value, (float, np.floating)):
    return _plain_float(value)
  if isinstance(value, np.ndarray) or hasattr(value, "numpy"):
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if array.ndim == 0:
      return canonical(array.item())
    if array.size <= _MAX_INLINE_ELEMENTS:
      return [canonical(v) for v in array.tolist()]
    return {"array_digest": array_digest(array)}
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return canonical({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
  if isinstance(value, Mapping):
    return {str(k): canonical(v) for k, v in value.items()}
  if hasattr(value, "_asdict"):  # namedtuples
    return canonical(value._asdict())
  if isinstance(value, (list, tuple, set, frozenset)):
    items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
    return [canonical(v) for v in items]
  text = repr(value)
  if " at 0x" in text:
    raise ToolkitValueError(
        f"cannot fingerprint {text}: its text changes from one process to the next, "
        "so no run could ever resume. Describe it by name and parameters instead "
        "(e.g. local_algorithm='ino_sgd(gamma=0.3)').")
  return text


def run_fingerprint(*, calibration: Mapping[str, Any], training: Mapping[str, Any],
                    data: Any, model: Any, run_seed: int,
                    insecure_reproducible_noise: bool) -> dict:
  """One run's fingerprint (see the module docstring for what goes in and why).

  Args:
    calibration: what the privacy guarantee is computed from (σ, rates, δ,
      accountant, budgets, rounds, clip norm, ...).
    training: the training hyperparameters (learning rates, optimizers, local
      epochs or steps, batch size, local algorithm, ...). Must not be empty.
    data: the training data's identity (:func:`records_identity`,
      :func:`client_data_identity`, or a name).
    model: the model's identity (:func:`keras_model_identity` or a name);
      None when only the driver's process identity is available.
    run_seed: this run's seed.
    insecure_reproducible_noise: the NOT PRIVATE debug mode.
  """
  if not training:
    raise ToolkitValueError(
        "the run fingerprint needs the training hyperparameters (learning rates, "
        "optimizers, local epochs or steps, batch size): a resume under other ones "
        "would otherwise go unnoticed. Pass them as training={...}.")
  return {"version": VERSION, "calibration": canonical(calibration),
          "training": canonical(training), "data": canonical(data),
          "model": canonical(model), "run_seed": int(run_seed),
          "insecure_reproducible_noise": bool(insecure_reproducible_noise)}


def digest(fingerprint: Any) -> str:
  """The short hash a checkpoint stores (of :func:`canonical` JSON, sorted keys)."""
  text = json.dumps(canonical(fingerprint), sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def differences(stored: Any, current: Any, prefix: str = "") -> list[str]:
  """Dotted paths where two canonical fingerprints differ, with both values (for errors)."""
  if isinstance(stored, dict) and isinstance(current, dict):
    out = []
    for key in sorted(set(stored) | set(current)):
      path = f"{prefix}.{key}" if prefix else str(key)
      if key not in stored:
        out.append(f"{path} (new: {_short(current[key])})")
      elif key not in current:
        out.append(f"{path} (only in the checkpoint: {_short(stored[key])})")
      else:
        out.extend(differences(stored[key], current[key], path))
    return out
  if stored != current:
    return [f"{prefix or 'fingerprint'} (checkpoint: {_short(stored)}, now: {_short(current)})"]
  return []


def _short(value: Any, limit: int = 80) -> str:
  text = json.dumps(value, sort_keys=True, default=str)
  return text if len(text) <= limit else text[:limit - 3] + "..."


def join(items: Iterable[str], limit: int = 8) -> str:
  """At most ``limit`` items of a list for an error message."""
  items = list(items)
  more = f", and {len(items) - limit} more" if len(items) > limit else ""
  return "; ".join(items[:limit]) + more
