"""Atomic checkpoints of everything a run needs to continue exactly.

A checkpoint at round r holds: the LearningProcess state (model, optimizer
states, clip norm, noise seed) flattened with ``tf.nest`` against the
process's ``initialize()`` template, the round number, the sampler's RNG
state, the privacy ledger, and a fingerprint of the run
(:mod:`tff_idp.engine.fingerprint`) so a run cannot be resumed under other
parameters.

A checkpoint holds the run's privacy secret (the noise and sampling keys),
so its files are created with mode 0600 and the checkpoint directory with
0700, whatever the umask (docs/privacy.md).

Each file is written to a temporary name unique to the writing process,
flushed to disk (``fsync``) and renamed into place; the JSON is written
last, so a checkpoint is complete iff its JSON exists. A checkpoint that
cannot be read anyway (a truncated or empty file after a disk failure, a bad
copy) raises :class:`CorruptCheckpointError` naming the file.

**Sealed** (issue 33). Every checkpoint's JSON carries a ``seal``: the
SHA-256 of its ``.npz`` (model, optimizer, clip, noise seed), the digests of
the run's outputs it must be resumed with (the metric rows written up to its
round, given by the driver), and the SHA-256 of the JSON itself (sampler,
ledger, secret, fingerprint) without that last field. :func:`load` checks
the JSON's and the ``.npz``'s digests and refuses, naming the file, a
checkpoint whose files were edited, swapped (an older round's ``.npz`` copied
over) or damaged, and one with no seal (written before checkpoints were
sealed, or with its seal removed): it cannot be verified. The seal detects
damage and edits; it is not a signature against someone who recomputes it.
"""
from __future__ import annotations

import glob
import hashlib
import io
import json
import os
import re
from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf

from tff_idp.errors import OutputDirError
from tff_idp.errors import TffIdpError

_NAME = "ckpt_{:06d}"
SECRET_FILE_MODE = 0o600   # checkpoint files: owner read/write only
SECRET_DIR_MODE = 0o700    # the checkpoint directory: owner only
_PATTERN = re.compile(r"ckpt_(\d{6})\.json$")
EXTENSIONS = (".json", ".npz")


class CheckpointError(TffIdpError, RuntimeError):
  """A checkpoint that cannot be resumed (base of the errors below).

  Attributes:
    paths: the files at fault (empty where none is).
  """

  def __init__(self, message: str, paths: tuple[str, ...] = ()):
    super().__init__(message)
    self.paths = tuple(paths)


class CheckpointMismatchError(CheckpointError):
  """A checkpoint does not belong to the run that tries to resume from it."""


class CorruptCheckpointError(CheckpointError):
  """A checkpoint file that cannot be read (truncated, empty, not a checkpoint) or that does
  not match its seal; ``paths`` names it."""


class DamagedOutputsError(CheckpointError):
  """The run's metric files no longer match what its checkpoint was sealed with; ``paths``
  names them."""


def paths(directory: str, round_num: int) -> list[str]:
  """The files of the checkpoint at ``round_num`` (JSON first)."""
  base = os.path.join(directory, _NAME.format(round_num))
  return [base + ext for ext in EXTENSIONS]


def _atomic_write(path: str, write_fn: Callable[[Any], None], mode: str) -> None:
  """Writes via ``<path>.<pid>.tmp`` (mode 0600) + fsync + rename (unique per process)."""
  tmp = f"{path}.{os.getpid()}.tmp"
  try:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, SECRET_FILE_MODE)
    os.fchmod(fd, SECRET_FILE_MODE)  # also when a stale tmp file existed
    with os.fdopen(fd, mode) as f:
      write_fn(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    try:
      os.remove(tmp)
    except OSError:
      pass
    raise


def _npz_bytes(leaves: list) -> bytes:
  """``np.savez``'s file of ``leaves``, built in memory.

  A signal that lands inside ``np.savez`` leaves its zip writer unclosed
  (numpy closes it only on success). On a real file, the writer's clean-up at
  exit then fails on the closed file and prints "Exception ignored … seek of
  closed file" after the run's one line (issue 50). In memory the buffer
  outlives the writer, and the file gets whole bytes or nothing.
  """
  buffer = io.BytesIO()
  np.savez(buffer, *leaves)
  return buffer.getvalue()


def _fsync_dir(directory: str) -> None:
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  except OSError:
    pass
  finally:
    os.close(fd)


def save(directory: str, round_num: int, state: Any, meta: dict,
         keep: int = 2) -> str:
  """Writes ``ckpt_<round>.npz`` (state) then ``ckpt_<round>.json`` (meta).

  The JSON is written last, so a checkpoint is complete iff its JSON exists.
  Keeps the newest ``keep`` checkpoints. Raises :class:`OutputDirError` when
  the directory cannot be written.
  """
  base = os.path.join(directory, _NAME.format(round_num))
  leaves = [np.asarray(x) for x in tf.nest.flatten(state)]
  meta = dict(meta, round=int(round_num), num_leaves=len(leaves))
  outputs = meta.pop(OUTPUTS_KEY, None)
  try:
    os.makedirs(directory, mode=SECRET_DIR_MODE, exist_ok=True)
    os.chmod(directory, SECRET_DIR_MODE)
    _atomic_write(base + ".npz", lambda f: f.write(_npz_bytes(leaves)), "wb")
    meta[SEAL_KEY] = {"npz_sha256": file_sha256(base + ".npz"), "outputs": outputs}
    meta[SEAL_KEY]["json_sha256"] = _meta_digest(meta)
    _atomic_write(base + ".json", lambda f: json.dump(meta, f, indent=1), "w")
  except OSError as e:
    raise OutputDirError(
        f"cannot write checkpoint {base}.npz/.json: {e.strerror or e}. Make {directory} "
        "writable (and check free disk space), or choose another --output_dir.") from e
  _fsync_dir(directory)
  for old in sorted(list_rounds(directory))[:-keep]:
    remove(directory, old)
  return base


SEAL_KEY = "seal"
# ``meta[OUTPUTS_KEY]`` passed to :func:`save`: digests of the run's outputs
# (e.g. the metric rows) that the seal records and a resume must match.
OUTPUTS_KEY = "outputs"


def file_sha256(path: str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def _meta_digest(meta: dict) -> str:
  """SHA-256 of the JSON's canonical form, without the seal's own ``json_sha256``."""
  seal = dict(meta.get(SEAL_KEY) or {})
  seal.pop("json_sha256", None)
  canonical = json.dumps(dict(meta, **{SEAL_KEY: seal}), sort_keys=True,
                         separators=(",", ":"))
  return hashlib.sha256(canonical.encode()).hexdigest()


def sealed_outputs(meta: dict) -> Optional[dict]:
  """The output digests a checkpoint was sealed with (see :func:`save`)."""
  return (meta.get(SEAL_KEY) or {}).get("outputs")


def _check_seal(meta: dict, json_path: str, npz_path: str) -> None:
  """Refuses a checkpoint whose JSON or ``.npz`` does not match its seal (module doc)."""
  seal = meta.get(SEAL_KEY)
  if not isinstance(seal, dict) or "json_sha256" not in seal or "npz_sha256" not in seal:
    raise CorruptCheckpointError(
        f"checkpoint file {json_path} has no seal (written before checkpoints were sealed, "
        "or its seal was removed), so it cannot be verified.", (json_path,))
  if _meta_digest(meta) != seal["json_sha256"]:
    raise CorruptCheckpointError(
        f"checkpoint file {json_path} does not match its seal: it was edited or damaged "
        "after it was written (its sampler, ledger, secret or round cannot be trusted).",
        (json_path,))
  try:
    actual = file_sha256(npz_path)
  except OSError as e:
    raise CorruptCheckpointError(
        f"checkpoint file {npz_path} is unreadable ({e.strerror or e}).", (npz_path,)) from e
  if actual != seal["npz_sha256"]:
    raise CorruptCheckpointError(
        f"checkpoint file {npz_path} does not match its seal: it was replaced (e.g. by "
        "another round's copy), edited or damaged after it was written.", (npz_path,))


def remove(directory: str, round_num: int) -> None:
  """Deletes the checkpoint at ``round_num`` (JSON first, so it is never half there)."""
  for path in paths(directory, round_num):
    try:
      os.remove(path)
    except FileNotFoundError:
      pass


def remove_all(directory: str) -> None:
  """Deletes every checkpoint file (and left-over temporary file) in ``directory``."""
  for path in glob.glob(os.path.join(directory, "ckpt_*")):
    try:
      os.remove(path)
    except FileNotFoundError:
      pass


def list_rounds(directory: str) -> list[int]:
  """Rounds of the complete checkpoints (those whose JSON exists), ascending."""
  rounds = []
  for path in glob.glob(os.path.join(directory, "ckpt_*.json")):
    m = _PATTERN.search(os.path.basename(path))
    if m:
      rounds.append(int(m.group(1)))
  return sorted(rounds)


def latest_round(directory: str) -> Optional[int]:
  rounds = list_rounds(directory)
  return rounds[-1] if rounds else None


def read_meta(directory: str, round_num: int) -> dict:
  """The JSON of one checkpoint; :class:`CorruptCheckpointError` if unreadable."""
  path = paths(directory, round_num)[0]
  try:
    with open(path) as f:
      meta = json.load(f)
    if not isinstance(meta, dict) or int(meta["num_leaves"]) < 0:
      raise ValueError("not a checkpoint's metadata")
  except Exception as e:  # any failure to parse the file means it is unusable
    raise CorruptCheckpointError(
        f"checkpoint file {path} is unreadable or corrupt ({type(e).__name__}: {e}).",
        (path,)) from e
  return meta


def load(directory: str, round_num: int, template: Any) -> tuple[Any, dict]:
  """Returns (state shaped like ``template``, meta).

  Raises:
    CorruptCheckpointError: a file of the checkpoint cannot be read, or does
      not match the checkpoint's seal (or there is no seal); its ``paths``
      name it.
    CheckpointMismatchError: the state does not fit ``template`` (another
      model or mode).
  """
  meta = read_meta(directory, round_num)
  json_path, npz_path = paths(directory, round_num)
  _check_seal(meta, json_path, npz_path)
  try:
    with np.load(npz_path, allow_pickle=False) as npz:
      leaves = [np.array(npz[f"arr_{i}"]) for i in range(int(meta["num_leaves"]))]
  except Exception as e:  # BadZipFile, EOFError, OSError, KeyError, ValueError, ...
    raise CorruptCheckpointError(
        f"checkpoint file {npz_path} is unreadable or corrupt ({type(e).__name__}: {e}).",
        (npz_path,)) from e
  base = os.path.join(directory, _NAME.format(round_num))
  template_leaves = tf.nest.flatten(template)
  if len(template_leaves) != len(leaves):
    raise CheckpointMismatchError(
        f"checkpoint {base} has {len(leaves)} state tensors but this process has "
        f"{len(template_leaves)}; it was written by a different model or mode. Use "
        "another --output_dir, or --restart to discard it and start fresh.")
  for i, (t, v) in enumerate(zip(template_leaves, leaves)):
    if np.shape(t) != v.shape:
      raise CheckpointMismatchError(
          f"checkpoint {base}: state tensor {i} has shape {v.shape}, expected "
          f"{np.shape(t)}. Use another --output_dir, or --restart to discard it and "
          "start fresh.")
  restored = [np.asarray(v, dtype=np.asarray(t).dtype) for t, v in zip(template_leaves, leaves)]
  return tf.nest.pack_sequence_as(template, restored), meta
