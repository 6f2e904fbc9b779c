"""One silo: every record of one data holder, a test set and the model that fits them.

The centralized comparison (rPDP-FL §7.1) and INO-SGD both train on one
silo; the experiment modules build it from the embedded data or from
local dataset files (:mod:`datasets`), and the runs only read it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np


@dataclasses.dataclass
class Silo:
  """Train records ``x``/``y``, test records, and ``keras_builder`` (``init seed -> model``)."""
  x: np.ndarray
  y: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  keras_builder: Callable[[int], Any]
  name: str

  def subset(self, n: int, seed: int) -> "Silo":
    """``n`` records drawn without replacement (seeded), in their original order."""
    if n > len(self.y):
      raise ValueError(f"a subset of {n} records needs at least that many; the silo has "
                       f"{len(self.y)} (raise --train_examples).")
    rows = np.sort(np.random.default_rng(seed).choice(len(self.y), n, replace=False))
    return dataclasses.replace(self, x=self.x[rows], y=self.y[rows],
                               name=f"{self.name}, {n}-record subset")

  def predictions(self, keras_model, batch_size: int = 4096) -> np.ndarray:
    """The model's predicted class of every test record (batched, inference mode)."""
    return np.concatenate([
        np.argmax(keras_model(self.test_x[i:i + batch_size], training=False).numpy(), -1)
        for i in range(0, len(self.test_y), batch_size)])

  def accuracy(self, keras_model, batch_size: int = 4096) -> float:
    """Test accuracy of ``keras_model``."""
    return float(np.mean(self.predictions(keras_model, batch_size) == self.test_y))
