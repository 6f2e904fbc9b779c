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

Both files are truncated correctly on resume.
"""
from __future__ import annotations

import csv
import math
import os
import shutil
from typing import Optional, Sequence

import tensorflow as tf

RELEASE_FILE = "metrics.csv"
DIAGNOSTICS_FILE = "diagnostics.csv"
PRIVACY_WARNING_FIELD = "privacy_warning"


class _CsvStream:
  """One CSV (and optionally one TensorBoard run) of selected row fields."""

  def __init__(self, path: str, fieldnames: Sequence[str], tb_dir: Optional[str],
               resume_after_round: Optional[int], warning: Optional[str]):
    self.path = path
    self.fieldnames = list(fieldnames) + ([PRIVACY_WARNING_FIELD] if warning else [])
    self._warning = warning
    kept: list[dict] = []
    if resume_after_round is not None and os.path.exists(path):
      kept = [r for r in read_metrics(path) if int(r["round"]) <= resume_after_round]
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
    with open(self.path, "a", newline="") as f:
      csv.DictWriter(f, fieldnames=self.fieldnames, extrasaction="ignore").writerow(row)
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
  """Rows of a metrics CSV, numbers parsed (empty cells become None)."""
  rows = []
  with open(path, newline="") as f:
    for raw in csv.DictReader(f):
      row = {}
      for k, v in raw.items():
        if v in ("", None):
          row[k] = None
        else:
          try:
            row[k] = float(v)
          except ValueError:
            row[k] = v
      rows.append(row)
  return rows
