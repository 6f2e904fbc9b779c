"""Per-round metrics to CSV and TensorBoard, truncated correctly on resume."""
from __future__ import annotations

import csv
import math
import os
from typing import Optional, Sequence

import tensorflow as tf


class MetricsWriter:
  """Appends one row per round to ``metrics.csv`` and TensorBoard scalars."""

  def __init__(self, output_dir: str, fieldnames: Sequence[str],
               resume_after_round: Optional[int] = None, tensorboard: bool = True):
    os.makedirs(output_dir, exist_ok=True)
    self.path = os.path.join(output_dir, "metrics.csv")
    self.fieldnames = list(fieldnames)
    kept: list[dict] = []
    if resume_after_round is not None and os.path.exists(self.path):
      kept = [r for r in read_metrics(self.path) if int(r["round"]) <= resume_after_round]
    with open(self.path, "w", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=self.fieldnames, extrasaction="ignore")
      writer.writeheader()
      writer.writerows(kept)
    self._tb = (tf.summary.create_file_writer(os.path.join(output_dir, "tensorboard"))
                if tensorboard else None)

  def write(self, row: dict) -> None:
    with open(self.path, "a", newline="") as f:
      csv.DictWriter(f, fieldnames=self.fieldnames, extrasaction="ignore").writerow(row)
    if self._tb is not None:
      with self._tb.as_default():
        for key, value in row.items():
          if key != "round" and isinstance(value, (int, float)) and math.isfinite(value):
            tf.summary.scalar(key, value, step=int(row["round"]))
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


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
