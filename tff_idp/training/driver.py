"""The round loop shared by every mode (IDP-FedAvg Alg. 2, outer loop).

Each round: ask the ledger whether another round is within budget, Poisson-
sample the cohort, run ``process.next``, record the round in the ledger, log
metrics, evaluate every ``eval_every`` rounds and checkpoint every
``checkpoint_every`` rounds. ``run`` resumes from the newest checkpoint in
``output_dir`` when there is one, restoring the process state, the sampler's
RNG, the privacy randomness, the round number and the ledger, so a resumed
run reproduces the uninterrupted one.

Metrics are split (``tff_idp.training.metrics``): ``RELEASE_FIELDS`` are
covered by the DP guarantee, ``DIAGNOSTIC_FIELDS`` are un-noised and are not.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tqdm

from tff_idp.accounting.ledger import PrivacyLedger
from tff_idp.privacy_randomness import NOT_PRIVATE_LABEL
from tff_idp.privacy_randomness import PrivacyRandomness
from tff_idp.sampling import PoissonClientSampler
from tff_idp.training import checkpoint
from tff_idp.training.metrics import MetricsWriter

ClientInputFn = Callable[[str, int], Any]
EvaluateFn = Callable[[Any], dict]

# Private release: noised aggregates, the released model's evaluation on
# held-out data (post-processing) and, added per group, the ε ledger.
RELEASE_FIELDS = ["round", "clip", "noise_std", "mean_noise_std", "unclipped_fraction",
                  "eval_loss", "eval_accuracy"]
# Diagnostics: exact, un-noised statistics of the private data or of the
# private sampling (even the wall time grows with the cohort size).
DIAGNOSTIC_FIELDS = ["round", "clients_sampled", "num_clients", "nonfinite_updates",
                     "invalid_clip_scales", "train_loss", "train_accuracy", "seconds"]
# Diagnostics of record-level (rPDP-FL) runs, from the client work's measurements.
RECORD_LEVEL_FIELDS = ["sampled_records", "clipped_fraction", "mean_expected_batch",
                       "participating_clients"]


def _flatten(tree: Any, prefix: str = "") -> dict:
  out = {}
  if hasattr(tree, "items"):
    for k, v in tree.items():
      out.update(_flatten(v, f"{prefix}{k}/"))
  elif np.ndim(tree) == 0 and not isinstance(tree, (tuple, list)):
    try:
      out[prefix[:-1]] = float(tree)
    except (TypeError, ValueError):
      pass
  return out


def _pick(flat: dict, suffix: str) -> Optional[float]:
  for k, v in flat.items():
    if k.endswith(suffix):
      return v
  return None


@dataclasses.dataclass
class RoundDriver:
  """Runs a ``tff.learning.templates.LearningProcess`` for a number of rounds.

  Attributes:
    process: any LearningProcess whose ``next`` takes a list of client inputs.
    sampler: who participates in each round.
    client_input_fn: ``(client_id, round) -> client input`` (e.g. a dataset).
    output_dir: metrics.csv (release), diagnostics.csv, tensorboard/, checkpoints/.
    ledger: privacy ledger (None for non-private runs).
    group_names: names of the ledger's groups, for metric columns.
    evaluate_fn: ``model_weights -> {"loss": .., "accuracy": ..}``.
    eval_every / checkpoint_every: in rounds (the last round always does both).
    run_fingerprint: anything identifying the calibration; a checkpoint made
      under another fingerprint is refused.
    progress: show a tqdm progress bar.
    padding_input_fn: ``() -> client input`` with no data. When given, every
      cohort is padded with such inputs up to a multiple of ``pad_multiple``.
      Their updates are exactly zero, which the DP aggregator treats as absent
      and the example-weighted mean weights by 0, so results are unchanged;
      but TFF then sees a handful of cohort sizes instead of one per round,
      which keeps its per-cardinality executors (memory, time) bounded.
    record_accountant: per-record budget accountant (rPDP-FL §6.2), e.g.
      ``tff_idp.accounting.record_ledger.RecordBudgetAccountant``: its
      ``begin_round()`` runs before the cohort is sampled (pre-check and
      exclusion; ``client_input_fn`` reads the resulting rates), its
      ``end_round(cohort)`` after the round, its ``metrics()`` go into the
      metric rows (diagnostics when ``metrics_depend_on_sampling``) and its
      state into every checkpoint.
    privacy_randomness: the run's secret randomness
      (``tff_idp.privacy_randomness``), checkpointed and restored on resume
      so that client seeds derived from it continue exactly. When it is the
      insecure reproducible kind, every output row is labelled NOT PRIVATE.
    release_only: write no diagnostics (un-noised statistics) at all.
    eval_metrics: further keys of ``evaluate_fn``'s result (e.g. the
      per-group accuracies of ``tff_idp.training.group_metrics``), written
      like loss and accuracy as release columns ``eval_<key>``: they
      evaluate the released model on held-out data (post-processing).
  """
  process: Any
  sampler: PoissonClientSampler
  client_input_fn: ClientInputFn
  output_dir: str
  ledger: Optional[PrivacyLedger] = None
  group_names: Sequence[str] = ()
  evaluate_fn: Optional[EvaluateFn] = None
  eval_every: int = 10
  checkpoint_every: int = 10
  run_fingerprint: Any = None
  progress: bool = True
  tensorboard: bool = True
  padding_input_fn: Optional[Callable[[], Any]] = None
  pad_multiple: int = 8
  record_accountant: Optional[Any] = None
  privacy_randomness: Optional[PrivacyRandomness] = None
  release_only: bool = False
  eval_metrics: Sequence[str] = ()

  def __post_init__(self):
    if self.eval_every < 1 or self.checkpoint_every < 1:
      raise ValueError("eval_every and checkpoint_every must be >= 1.")
    if self.ledger is not None and len(self.group_names) != self.ledger.num_groups:
      self.group_names = [f"group{p}" for p in range(self.ledger.num_groups)]
    self._fingerprint = hashlib.sha256(
        json.dumps(self.run_fingerprint, sort_keys=True, default=str).encode()
    ).hexdigest()[:16]

  @property
  def checkpoint_dir(self) -> str:
    return os.path.join(self.output_dir, "checkpoints")

  def _fields(self) -> tuple[list[str], Optional[list[str]]]:
    """(release columns, diagnostic columns or None in release-only mode)."""
    release = RELEASE_FIELDS + [f"epsilon_{g}" for g in self.group_names]
    release += [f for f in self._eval_columns() if f not in release]
    diagnostics = list(DIAGNOSTIC_FIELDS)
    if self.record_accountant is not None:
      diagnostics += RECORD_LEVEL_FIELDS
      ledger_fields = list(self.record_accountant.metric_names)
      if getattr(self.record_accountant, "metrics_depend_on_sampling", True):
        diagnostics += ledger_fields
      else:
        release += ledger_fields
    return release, (None if self.release_only else diagnostics)

  def _eval_columns(self) -> list[str]:
    return [f"eval_{k}" for k in self.eval_metrics]

  @property
  def _privacy_warning(self) -> Optional[str]:
    randomness = self.privacy_randomness
    return NOT_PRIVATE_LABEL if randomness is not None and randomness.reproducible else None

  def _restore(self, template: Any) -> tuple[Any, int]:
    last = checkpoint.latest_round(self.checkpoint_dir)
    if last is None:
      return template, 0
    state, meta = checkpoint.load(self.checkpoint_dir, last, template)
    if meta.get("fingerprint") != self._fingerprint:
      raise checkpoint.CheckpointMismatchError(
          f"the checkpoint in {self.checkpoint_dir} was made by a run with other "
          "privacy/training parameters; resuming it would misreport privacy. Use a "
          "fresh output directory, or the original parameters.")
    self.sampler.set_state(meta["sampler"])
    if self.ledger is not None:
      self.ledger.set_state(meta["ledger"])
    if self.record_accountant is not None:
      self.record_accountant.set_state(meta["record_accountant"])
    if self.privacy_randomness is not None:
      self.privacy_randomness.set_state(meta.get("privacy_randomness"))
    logging.info("resumed from round %d (%s)", last, self.checkpoint_dir)
    return state, last

  def _save(self, state: Any, round_num: int) -> None:
    checkpoint.save(self.checkpoint_dir, round_num, state, {
        "fingerprint": self._fingerprint,
        "sampler": self.sampler.get_state(),
        "ledger": self.ledger.get_state() if self.ledger is not None else None,
        "record_accountant": (self.record_accountant.get_state()
                              if self.record_accountant is not None else None),
        # Secret: a checkpoint is as sensitive as the raw data.
        "privacy_randomness": (self.privacy_randomness.get_state()
                               if self.privacy_randomness is not None else None),
    })

  def run(self, total_rounds: int) -> tuple[Any, list[dict]]:
    """Runs (or resumes) until ``total_rounds``; returns (state, metric rows)."""
    if self.ledger is not None:
      self.ledger.check_can_run(0)
      if total_rounds > self.ledger.calibrated_rounds and not self.ledger.allow_overrun:
        self.ledger.check_can_run(total_rounds - self.ledger.rounds_done)
    state, start = self._restore(self.process.initialize())
    release_fields, diagnostic_fields = self._fields()
    writer = MetricsWriter(self.output_dir, release_fields, diagnostic_fields,
                           resume_after_round=start, tensorboard=self.tensorboard,
                           privacy_warning=self._privacy_warning)
    rows: list[dict] = []
    bar = tqdm.tqdm(total=total_rounds, initial=start, disable=not self.progress,
                    desc=os.path.basename(os.path.normpath(self.output_dir)),
                    unit="round", dynamic_ncols=True)
    try:
      for round_num in range(start + 1, total_rounds + 1):
        if self.ledger is not None:
          self.ledger.check_can_run(1)
        t0 = time.perf_counter()
        if self.record_accountant is not None:
          self.record_accountant.begin_round()
        cohort = self.sampler.sample()
        inputs = [self.client_input_fn(cid, round_num) for cid in cohort]
        if self.padding_input_fn is not None:
          padded = -(-max(1, len(inputs)) // self.pad_multiple) * self.pad_multiple
          inputs += [self.padding_input_fn() for _ in range(padded - len(inputs))]
        output = self.process.next(state, inputs)
        state = output.state
        if self.ledger is not None:
          self.ledger.record_round()
        if self.record_accountant is not None:
          self.record_accountant.end_round(cohort)
        flat = _flatten(output.metrics)
        row = {
            "round": round_num,
            "clients_sampled": len(cohort),
            "train_loss": _pick(flat, "train/loss"),
            "train_accuracy": _pick(flat, "train/sparse_categorical_accuracy"),
            "clip": _pick(flat, "aggregator/clip"),
            "noise_std": _pick(flat, "aggregator/noise_std"),
            "mean_noise_std": _pick(flat, "aggregator/mean_noise_std"),
            "unclipped_fraction": _pick(flat, "aggregator/unclipped_fraction"),
            "num_clients": _pick(flat, "diagnostics/num_clients"),
            "nonfinite_updates": _pick(flat, "diagnostics/nonfinite_updates"),
            "invalid_clip_scales": _pick(flat, "diagnostics/invalid_clip_scales"),
        }
        if self.record_accountant is not None:
          for name in RECORD_LEVEL_FIELDS:
            row[name] = _pick(flat, f"train/{name}")
          row.update(self.record_accountant.metrics())
        evaluating = round_num % self.eval_every == 0 or round_num == total_rounds
        # RDP ε is cheap (cached per-step RDP, scaled); a PLD composition costs
        # ~1 s per group, so PLD ledgers are read on evaluation rounds only.
        if self.ledger is not None and (self.ledger.accountant == "rdp" or evaluating):
          for name, eps in zip(self.group_names, self.ledger.spent()):
            row[f"epsilon_{name}"] = eps
        if self.evaluate_fn is not None and evaluating:
          result = self.evaluate_fn(self.process.get_model_weights(state))
          row["eval_loss"] = result.get("loss")
          row["eval_accuracy"] = result.get("accuracy")
          for key, column in zip(self.eval_metrics, self._eval_columns()):
            row[column] = result.get(key)
        row["seconds"] = time.perf_counter() - t0
        writer.write(row)
        rows.append(row)
        if round_num % self.checkpoint_every == 0 or round_num == total_rounds:
          self._save(state, round_num)
        bar.update(1)
        postfix = {} if self.release_only else {"clients": len(cohort)}
        if row.get("eval_accuracy") is not None:
          postfix["acc"] = f"{row['eval_accuracy']:.3f}"
        bar.set_postfix(postfix)
    finally:
      bar.close()
      writer.close()
    return state, rows
