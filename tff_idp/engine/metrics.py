"""Per-round metrics to CSV and TensorBoard, split into release and diagnostics.

Two streams, never mixed (audit D3):

* **private release** (``metrics.csv``, ``tensorboard/release``): what the DP
  guarantee covers: noised aggregates (the adaptive clip and its noised
  unclipped fraction), the ε ledger, and evaluations of the released model
  on held-out data.
* **diagnostics** (``diagnostics.csv``, ``tensorboard/diagnostics``):
  un-noised values for the researcher only (cohort size, training loss,
  clipped fraction, timings, ...). They are *not* covered by the guarantee:
  the exact cohort size alone leaks about every client's participation.
  ``diagnostic_fields=None`` (the experiments' ``--release_only``) writes none.

Both files are truncated correctly on resume: the rows up to the resume
round are kept byte for byte. Values are written in a form that reads back
exactly (:func:`format_value`): integers as integers, floats with ``repr``
(which round-trips every float), None as an empty cell; :func:`read_metrics`
gives back ints, floats, None and strings accordingly.
"""
from __future__ import annotations

import csv
import hashlib
import json
import math
import numbers
import os
import re
import shutil
from typing import Any, Optional, Sequence

import tensorflow as tf

RELEASE_FILE = "metrics.csv"
DIAGNOSTICS_FILE = "diagnostics.csv"
PRIVACY_WARNING_FIELD = "privacy_warning"

_INT = re.compile(r"[+-]?\d+")


def format_value(value: Any) -> str:
  """One CSV cell: ints as ints, floats via ``repr`` (exact), None empty, else ``str``.

  numpy scalars are written like the Python numbers they hold (a float32 as
  the float64 it converts to exactly).
  """
  if value is None:
    return ""
  if isinstance(value, bool) or not isinstance(value, numbers.Number):
    return str(value)
  if isinstance(value, numbers.Integral):
    return str(int(value))
  if isinstance(value, numbers.Real):
    return repr(float(value))
  return str(value)


def parse_value(text: Optional[str]) -> Any:
  """Inverse of :func:`format_value`: int, float, None (empty) or the string."""
  if text is None or text == "":
    return None
  if _INT.fullmatch(text):
    return int(text)
  try:
    return float(text)
  except ValueError:
    return text


def _round_of(raw: dict) -> int:
  """The round of a raw CSV row ("3", or "3.0" in files written before ints were kept)."""
  return int(float(raw["round"]))


def _read_raw(path: str) -> list[dict]:
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def rows_digest(path: str, up_to_round: int) -> Optional[str]:
  """SHA-256 of a metric file's raw rows of rounds 1..``up_to_round`` (None if no file).

  What a checkpoint is sealed with (:mod:`tff_idp.engine.checkpoint`): a
  truncated, edited or deleted file no longer gives the same digest. Rows of
  later rounds (written after the checkpoint) are left out.
  """
  if not os.path.exists(path):
    return None
  try:
    rows = [r for r in _read_raw(path) if _round_of(r) <= up_to_round]
  except (KeyError, TypeError, ValueError):
    return "unreadable"
  text = json.dumps(rows, sort_keys=True, separators=(",", ":"))
  return hashlib.sha256(text.encode()).hexdigest()


class _CsvStream:
  """One CSV (and optionally one TensorBoard run) of selected row fields."""

  def __init__(self, path: str, fieldnames: Sequence[str], tb_dir: Optional[str],
               resume_after_round: Optional[int], warning: Optional[str]):
    self.path = path
    self.fieldnames = list(fieldnames) + ([PRIVACY_WARNING_FIELD] if warning else [])
    self._warning = warning
    kept: list[dict] = []
    if resume_after_round is not None and os.path.exists(path):
      # Raw cells, rewritten unchanged: the kept rows stay byte-identical.
      kept = [r for r in _read_raw(path) if _round_of(r) <= resume_after_round]
    with open(path, "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=self.fieldnames, extrasaction="ignore")
      writer.writeheader()
      writer.writerows(kept)
    self._tb = tf.summary.create_file_writer(tb_dir) if tb_dir else None
    if self._tb is not None and warning:
      with self._tb.as_default():
        tf.summary.text(PRIVACY_WARNING_FIELD, warning, step=0)

  def write(self, row: dict) -> None:
    row = dict(row, **({PRIVACY_WARNING_FIELD: self._warning} if self._warning else {}))
    cells = {k: format_value(row.get(k)) for k in self.fieldnames}
    with open(self.path, "a", newline="") as f:
      csv.DictWriter(f, fieldnames=self.fieldnames).writerow(cells)
    if self._tb is not None:
      with self._tb.as_default():
        for key in self.fieldnames:
          value = row.get(key)
          if key != "round" and isinstance(value, (int, float)) and math.isfinite(value):
            tf.summary.scalar(key, value, step=int(row["round"]))
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


class MetricsWriter:
  """Appends one row per round to the release stream and the diagnostics stream.

  Args:
    output_dir: where the files go.
    release_fields: columns of ``metrics.csv`` (must include ``round``).
    diagnostic_fields: columns of ``diagnostics.csv``; None writes no
      diagnostics at all (release-only mode).
    resume_after_round: keep the rows up to this round of existing files.
    tensorboard: also write TensorBoard scalars.
    privacy_warning: a label added to every row and to TensorBoard (e.g.
      ``NOT PRIVATE: noise derivable from seed``).
  """

  def __init__(self, output_dir: str, release_fields: Sequence[str],
               diagnostic_fields: Optional[Sequence[str]] = None,
               resume_after_round: Optional[int] = None, tensorboard: bool = True,
               privacy_warning: Optional[str] = None):
    os.makedirs(output_dir, exist_ok=True)
    tb_root = os.path.join(output_dir, "tensorboard") if tensorboard else None
    self.release = _CsvStream(
        os.path.join(output_dir, RELEASE_FILE), release_fields,
        tb_root and os.path.join(tb_root, "release"), resume_after_round, privacy_warning)
    self.diagnostics = None
    if diagnostic_fields is not None:
      self.diagnostics = _CsvStream(
          os.path.join(output_dir, DIAGNOSTICS_FILE), diagnostic_fields,
          tb_root and os.path.join(tb_root, "diagnostics"), resume_after_round,
          privacy_warning)
    else:  # release-only: leave no stale diagnostics from an earlier run behind
      if os.path.exists(os.path.join(output_dir, DIAGNOSTICS_FILE)):
        os.remove(os.path.join(output_dir, DIAGNOSTICS_FILE))
      if tb_root:
        shutil.rmtree(os.path.join(tb_root, "diagnostics"), ignore_errors=True)
    self.path = self.release.path

  def write(self, row: dict) -> None:
    self.release.write(row)
    if self.diagnostics is not None:
      self.diagnostics.write(row)

  def close(self) -> None:
    self.release.close()
    if self.diagnostics is not None:
      self.diagnostics.close()


def read_metrics(path: str) -> list[dict]:
  """Rows of a metrics CSV with typed cells (:func:`parse_value`).

  Integers written as integers (``round``, ``clients_sampled``, ...) come
  back as ``int``, floats as the exact ``float``, empty cells as None, text
  (e.g. ``privacy_warning``) as ``str``.
  """
  return [{k: parse_value(v) for k, v in raw.items()} for raw in _read_raw(str(path))]
