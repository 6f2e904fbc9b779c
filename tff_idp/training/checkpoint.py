"""Atomic checkpoints of everything a run needs to continue exactly.

A checkpoint at round r holds: the LearningProcess state (model, optimizer
states, clip norm, noise seed) flattened with ``tf.nest`` against the
process's ``initialize()`` template, the round number, the sampler's RNG
state, the privacy ledger, and a fingerprint of the privacy calibration so a
run cannot be resumed under different (σ, q).
"""
from __future__ import annotations

import glob
import json
import os
import re
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tff_idp.errors import TffIdpError

_NAME = "ckpt_{:06d}"
_PATTERN = re.compile(r"ckpt_(\d{6})\.json$")


class CheckpointMismatchError(TffIdpError, RuntimeError):
  """A checkpoint does not belong to the run that tries to resume from it."""


def _atomic_write(path: str, write_fn) -> None:
  tmp = path + ".tmp"
  write_fn(tmp)
  os.replace(tmp, path)


def save(directory: str, round_num: int, state: Any, meta: dict,
         keep: int = 2) -> str:
  """Writes ``ckpt_<round>.npz`` (state) then ``ckpt_<round>.json`` (meta).

  The JSON is written last, so a checkpoint is complete iff its JSON exists.
  """
  os.makedirs(directory, exist_ok=True)
  base = os.path.join(directory, _NAME.format(round_num))
  leaves = [np.asarray(x) for x in tf.nest.flatten(state)]

  def write_npz(tmp):
    with open(tmp, "wb") as f:
      np.savez(f, *leaves)

  _atomic_write(base + ".npz", write_npz)
  meta = dict(meta, round=int(round_num), num_leaves=len(leaves))

  def write_json(tmp):
    with open(tmp, "w") as f:
      json.dump(meta, f, indent=1)

  _atomic_write(base + ".json", write_json)
  for old in sorted(list_rounds(directory))[:-keep]:
    for ext in (".json", ".npz"):
      try:
        os.remove(os.path.join(directory, _NAME.format(old) + ext))
      except FileNotFoundError:
        pass
  return base


def list_rounds(directory: str) -> list[int]:
  rounds = []
  for path in glob.glob(os.path.join(directory, "ckpt_*.json")):
    m = _PATTERN.search(os.path.basename(path))
    if m:
      rounds.append(int(m.group(1)))
  return sorted(rounds)


def latest_round(directory: str) -> Optional[int]:
  rounds = list_rounds(directory)
  return rounds[-1] if rounds else None


def load(directory: str, round_num: int, template: Any) -> tuple[Any, dict]:
  """Returns (state shaped like ``template``, meta)."""
  base = os.path.join(directory, _NAME.format(round_num))
  try:
    with open(base + ".json") as f:
      meta = json.load(f)
    with np.load(base + ".npz") as npz:
      leaves = [npz[f"arr_{i}"] for i in range(meta["num_leaves"])]
  except (OSError, ValueError, KeyError) as e:
    raise CheckpointMismatchError(
        f"checkpoint {base} is unreadable or corrupt ({e}); delete it to restart "
        "from the previous one.") from e
  template_leaves = tf.nest.flatten(template)
  if len(template_leaves) != len(leaves):
    raise CheckpointMismatchError(
        f"checkpoint {base} has {len(leaves)} state tensors but this process has "
        f"{len(template_leaves)}; it was written by a different model or mode. Use "
        "a fresh --output_dir.")
  for i, (t, v) in enumerate(zip(template_leaves, leaves)):
    if np.shape(t) != v.shape:
      raise CheckpointMismatchError(
          f"checkpoint {base}: state tensor {i} has shape {v.shape}, expected "
          f"{np.shape(t)}. Use a fresh --output_dir.")
  restored = [np.asarray(v, dtype=np.asarray(t).dtype) for t, v in zip(template_leaves, leaves)]
  return tf.nest.pack_sequence_as(template, restored), meta
