"""Centralized record-level DP-SGD on one silo: IDP-SGD, rPDP-SGD and INO-SGD.

One data holder trains on all records; record d enters each step's batch
independently with its own rate q_d, is clipped to its own threshold C_d
(≤ ``clip_norm``), optionally weighted by w_d ∈ [0, 1] after clipping
(INO-SGD's importance scores, :mod:`tff_idp.ino_sgd.importance`), and the
sum gets N(0, (σ·clip_norm)²) before division by the expected batch Σ_d q_d.
This is INO-SGD Alg. 1 (IDP-SGD when no weights are given; Boenisch et al.
2023's SAMPLE/SCALE through q_d and C_d, see
:mod:`tff_idp.accounting.owner.plan`) and rPDP-SGD (rPDP-FL §7.1, one client).

The steps run through the same ``tf.function`` as the federated client work
(:func:`tff_idp.rpdp.dp_sgd.build_local_dp_sgd`), in chunks of
``eval_every`` steps (plain SGD keeps no state between chunks), each chunk
with its own secret seed from a :class:`~tff_idp.engine.privacy_randomness.PrivacyRandomness`.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Callable, Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp import progress as progress_lib
from tff_idp.rpdp import dp_sgd
from tff_idp.engine.privacy_randomness import PrivacyRandomness

Evaluation = Callable[[tf.keras.Model], Union[float, dict]]
"""Evaluates the model after a chunk: a number (taken as ``accuracy``) or a dict."""


@dataclasses.dataclass
class CentralizedRun:
  """History of one centralized run: ``history[i] = (step, {metric: value})``.

  ``chunk_diagnostics[i] = (step, {"mean_batch", "clipped_fraction"})`` per
  evaluation chunk: realised, un-noised statistics for the researcher, not
  covered by the DP guarantee (never part of a release).
  """
  history: list
  chunk_diagnostics: list
  seconds_per_step: float
  mean_batch: float          # realised batch: a diagnostic, not covered by the DP guarantee
  clipped_fraction: float    # diagnostic
  final_weights: tff.learning.models.ModelWeights

  @property
  def final(self) -> dict:
    return self.history[-1][1] if self.history else {}


def eval_chunks(steps: int, every: int) -> list[int]:
  """Chunk lengths: ``every`` steps each, the remainder last (``every`` ≤ 0: one chunk)."""
  every = every if 0 < every < steps else steps
  return [every] * (steps // every) + ([steps % every] if steps % every else [])


def train_record_dp_sgd(keras_builder: Callable[[], tf.keras.Model], x: np.ndarray,
                        y: np.ndarray, q: np.ndarray, noise_multiplier: float,
                        clip_norm: float, learning_rate: float, steps: int,
                        randomness: PrivacyRandomness, evaluate: Evaluation,
                        eval_every: int = 0, clip_norms: Optional[np.ndarray] = None,
                        example_weight_fn: Optional[dp_sgd.ExampleWeightFn] = None,
                        progress: bool = False, desc: str = "DP-SGD") -> CentralizedRun:
  """Trains ``keras_builder()`` with record-level DP-SGD (see module doc).

  Args:
    keras_builder: a fresh logits model (deterministic init).
    x, y: every record of the silo (labels int).
    q: each record's sampling rate (0 = never sampled).
    noise_multiplier: z; the noise std on the sum is z·``clip_norm``.
    clip_norm: the largest clip threshold C.
    learning_rate: SGD η.
    steps: T.
    randomness: the run's privacy randomness (secret unless explicitly debug).
    evaluate: called with a Keras model holding the current weights.
    eval_every: evaluate every k steps (0 = at the end only).
    clip_norms: each record's threshold C_d ≤ ``clip_norm`` (default: C).
    example_weight_fn: ``(losses, thresholds) -> w ∈ [0, 1]`` after clipping
      (INO-SGD: :func:`tff_idp.ino_sgd.importance.ino_example_weight_fn`).
    progress: show progress over the steps (a bar on a terminal, plain lines in a log).
  """
  spec = collections.OrderedDict(
      x=tf.TensorSpec([None] + list(np.shape(x)[1:]), tf.float32),
      y=tf.TensorSpec([None], tf.int32))
  model = models.tff_model_fn(keras_builder, spec)()
  weights = tf.nest.map_structure(lambda v: v.read_value(),
                                  tff.learning.models.ModelWeights.from_model(model))
  x = tf.constant(np.asarray(x, np.float32))
  y = tf.constant(np.asarray(y, np.int32))
  q = np.asarray(q, np.float32)
  if q.shape != (int(y.shape[0]),):
    raise ValueError(f"q has shape {q.shape}; give one rate per record ({y.shape[0]}).")
  extra = {} if clip_norms is None else {
      "clip_norms": tf.constant(np.asarray(clip_norms, np.float32))}
  updates = {}
  eval_model = keras_builder()
  history, diagnostics, seconds, sampled, clipped = [], [], 0.0, 0.0, 0.0
  done = 0
  bar = None
  if progress:
    bar = progress_lib.progress(steps, desc=desc, unit="step", leave=False)
  try:
    for c, length in enumerate(eval_chunks(steps, eval_every)):
      if length not in updates:
        updates[length] = dp_sgd.build_local_dp_sgd(
            model, tff.learning.optimizers.build_sgdm(learning_rate), length,
            noise_multiplier, clip_norm, example_weight_fn=example_weight_fn)
        updates[length](weights, x, y, tf.zeros_like(q), tf.constant([0, 0], tf.int64),
                        **extra)  # traces; q = 0 takes no step and draws nothing
      start = time.perf_counter()
      delta, stats = updates[length](weights, x, y, q,
                                     tf.constant(randomness.client_seed("silo", c), tf.int64),
                                     **extra)
      weights = tff.learning.models.ModelWeights(
          trainable=[w - d for w, d in zip(weights.trainable, delta)],
          non_trainable=weights.non_trainable)
      seconds += time.perf_counter() - start
      sampled += float(stats["sampled"])
      clipped += float(stats["clipped"])
      diagnostics.append((done + length, {
          "mean_batch": float(stats["sampled"]) / length,
          "clipped_fraction": float(stats["clipped"]) / max(float(stats["sampled"]), 1.0)}))
      done += length
      weights.assign_weights_to(eval_model)
      result = evaluate(eval_model)
      history.append((done, result if isinstance(result, dict)
                      else {"accuracy": float(result)}))
      if bar is not None:
        bar.update(length)
  finally:
    if bar is not None:
      bar.close()
  return CentralizedRun(history, diagnostics, seconds / steps, sampled / steps,
                        clipped / max(sampled, 1.0), weights)
