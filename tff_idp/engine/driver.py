"""The round loop shared by every mode (IDP-FedAvg Alg. 2, outer loop).

Each round: ask the ledger whether another round is within budget, Poisson-
sample the cohort, run ``process.next``, record the round in the ledger, log
metrics, evaluate every ``eval_every`` rounds and checkpoint every
``checkpoint_every`` rounds. ``run`` resumes from the newest checkpoint in
``output_dir`` when there is one, restoring the process state, the sampler's
RNG, the privacy randomness, the round number and the ledger, so a resumed
run reproduces the uninterrupted one.

A finished run (a checkpoint at ``total_rounds``) trains nothing and returns
its state and the rows stored in the metric files. A checkpoint written under
another run fingerprint (:mod:`tff_idp.engine.fingerprint`: calibration,
training hyperparameters, data, model, run seed, insecure-noise mode) is
refused with :class:`~tff_idp.engine.checkpoint.CheckpointMismatchError`
listing what differs.

**One run per directory.** ``run`` holds an exclusive ``flock`` on the output
directory (:mod:`tff_idp.engine.output_lock`) for its whole duration; a
second run in the same directory fails at once with
:class:`tff_idp.errors.OutputDirError`.

**Corrupt checkpoints: no silent fallback.** When the newest checkpoint
cannot be read, ``run`` raises
:class:`~tff_idp.engine.checkpoint.CorruptCheckpointError` naming the
corrupt files, the newest readable older checkpoint (round N) if any, and
the choices, instead of falling back to round N by itself. Why: the rounds
after N were already trained and their rows written to ``metrics.csv`` (a
release: noised aggregates, evaluations of released models), while the
round-N ledger does not count them. Resuming from N replays those rounds
with the checkpointed secret randomness (the same cohorts and the same
noise), which re-releases the *same* values only if training is
bit-for-bit deterministic; on other hardware, library versions or code, the
replay differs, and two releases sharing one noise draw reveal the un-noised
difference of the data's statistics, which no ε covers. Charging the lost
rounds to the ledger a second time would not fix that (the replayed noise is
not fresh). So the person running the experiment decides: delete the
corrupt files to resume from round N, accepting that the lost rounds were
released (and are released again), or ``restart=True`` (the experiments'
``--restart``) to discard this run's checkpoints and metrics and start from
round 0 with fresh randomness; the rows released earlier stay released.

Metrics are split (``tff_idp.engine.metrics``): ``RELEASE_FIELDS`` are
covered by the DP guarantee, ``DIAGNOSTIC_FIELDS`` are un-noised and are not.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import sys
import time
from typing import Any, Callable, Optional, Sequence

import numpy as np

from tff_idp.accounting.ledger import PrivacyLedger
from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.engine.sampling import PoissonClientSampler
from tff_idp.engine import checkpoint
from tff_idp.engine import fingerprint
from tff_idp.engine import metrics as metrics_lib
from tff_idp.engine.metrics import MetricsWriter
from tff_idp.engine.output_lock import OutputDirLock
from tff_idp.execution import runtime
from tff_idp import progress as progress_lib
from tff_idp import termination

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
    ledger: the run's privacy ledger (:class:`tff_idp.accounting.ledger.PrivacyLedger`:
      per group for IDP-FedAvg, per record for rPDP-FL, per round for APES;
      None for non-private runs). Its ``check_budget`` runs before a run,
      ``begin_round()`` before the cohort is sampled (a pre-check; rPDP-FL's
      ledger excludes records there and ``client_input_fn`` reads the
      resulting rates), ``end_round(cohort)`` after the round; its
      ``metrics`` go into the metric rows (diagnostics when
      ``metrics_depend_on_sampling``) and its state into every checkpoint.
    group_names: names of the ledger's groups, for metric columns.
    evaluate_fn: ``model_weights -> {"loss": .., "accuracy": ..}``.
    eval_every / checkpoint_every: in rounds (the last round always does both).
    run_fingerprint: what identifies the run, best built with
      :func:`tff_idp.engine.fingerprint.run_fingerprint` (calibration,
      training hyperparameters, data, model, run seed, insecure-noise mode);
      the driver adds the process's hyperparameters
      (:func:`~tff_idp.engine.fingerprint.process_identity`). A checkpoint
      made under another fingerprint is refused.
    progress: show progress (a bar on a terminal, plain lines in a log).
    padding_input_fn: ``() -> client input`` with no data. When given, every
      cohort is padded with such inputs up to a multiple of ``pad_multiple``.
      Their updates are exactly zero, which the DP aggregator treats as absent
      and the example-weighted mean weights by 0, so results are unchanged;
      but TFF then sees a handful of cohort sizes instead of one per round,
      which keeps its per-cardinality executors (memory, time) bounded.
    process_diagnostics: further ``train/<name>`` measurements of the process
      written as diagnostics (rPDP-FL's client work: ``RECORD_LEVEL_FIELDS``).
    privacy_randomness: the run's secret randomness
      (``tff_idp.engine.privacy_randomness``), checkpointed and restored on resume
      so that client seeds derived from it continue exactly. When it is the
      insecure reproducible kind, every output row is labelled NOT PRIVATE.
    release_only: write no diagnostics (un-noised statistics) at all.
    eval_metrics: further keys of ``evaluate_fn``'s result (e.g. the
      per-group accuracies of ``tff_idp.engine.group_metrics``), written
      like loss and accuracy as release columns ``eval_<key>``: they
      evaluate the released model on held-out data (post-processing).
    restart: discard this run's checkpoints, ``metrics.csv``,
      ``diagnostics.csv`` and TensorBoard logs and start from round 0 (the
      experiments' ``--restart``). Applies to the first ``run`` call of this
      driver only, so a later ``run`` with more rounds continues.
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
  process_diagnostics: Sequence[str] = ()
  privacy_randomness: Optional[PrivacyRandomness] = None
  release_only: bool = False
  eval_metrics: Sequence[str] = ()
  restart: bool = False

  def __post_init__(self):
    if self.eval_every < 1 or self.checkpoint_every < 1:
      raise ValueError("eval_every and checkpoint_every must be >= 1.")
    self._restarted = False
    self._fingerprint_fields: Optional[dict] = None
    self._fingerprint: Optional[str] = None

  @property
  def checkpoint_dir(self) -> str:
    return os.path.join(self.output_dir, "checkpoints")

  def _fields(self) -> tuple[list[str], Optional[list[str]]]:
    """(release columns, diagnostic columns or None in release-only mode)."""
    release = list(RELEASE_FIELDS)
    diagnostics = list(DIAGNOSTIC_FIELDS) + list(self.process_diagnostics)
    if self.ledger is not None:
      ledger_fields = self.ledger.metric_names(self.group_names)
      if self.ledger.metrics_depend_on_sampling:
        diagnostics += ledger_fields
      else:
        release += ledger_fields
    release += [f for f in self._eval_columns() if f not in release]
    return release, (None if self.release_only else diagnostics)

  def _eval_columns(self) -> list[str]:
    return [f"eval_{k}" for k in self.eval_metrics]

  @property
  def _privacy_warning(self) -> Optional[str]:
    randomness = self.privacy_randomness
    return NOT_PRIVATE_LABEL if randomness is not None and randomness.reproducible else None

  def _compute_fingerprint(self, template: Any) -> None:
    """The run's fingerprint plus the process's own hyperparameters (learning rates, ...)."""
    self._fingerprint_fields = fingerprint.canonical({
        "run": self.run_fingerprint,
        "process": fingerprint.process_identity(self.process, template)})
    self._fingerprint = fingerprint.digest(self._fingerprint_fields)

  def _discard_outputs(self) -> None:
    """``restart``: removes this run's checkpoints, metric files and TensorBoard logs."""
    checkpoint.remove_all(self.checkpoint_dir)
    for name in (metrics_lib.RELEASE_FILE, metrics_lib.DIAGNOSTICS_FILE):
      try:
        os.remove(os.path.join(self.output_dir, name))
      except FileNotFoundError:
        pass
    for stream in ("release", "diagnostics"):
      shutil.rmtree(os.path.join(self.output_dir, "tensorboard", stream), ignore_errors=True)
    logging.warning("restart: discarded the checkpoints and metrics in %s; training "
                    "from round 0 with fresh randomness.", self.output_dir)

  def _stored_rounds(self) -> list[int]:
    path = os.path.join(self.output_dir, metrics_lib.RELEASE_FILE)
    if not os.path.exists(path):
      return []
    try:
      return [int(r["round"]) for r in metrics_lib.read_metrics(path)]
    except (OSError, ValueError, TypeError, KeyError):
      return []

  def _corrupt_error(self, error: checkpoint.CorruptCheckpointError, rounds: list[int],
                     template: Any) -> checkpoint.CorruptCheckpointError:
    """The error for an unreadable newest checkpoint, with the choices (module doc)."""
    newest = rounds[-1]
    files = checkpoint.paths(self.checkpoint_dir, newest)
    older = None
    for r in reversed(rounds[:-1]):
      try:
        checkpoint.load(self.checkpoint_dir, r, template)
      except checkpoint.CheckpointError:
        continue
      older = r
      break
    written = max(self._stored_rounds() + [newest])
    delete = " and ".join(files)
    if older is None:
      choices = (f"There is no older readable checkpoint. Run with --restart "
                 f"(RoundDriver(restart=True)) to discard this run's checkpoints and "
                 f"metrics and start from round 0 (rounds 1-{written} were already "
                 f"released: count them against the data's budget), or use another "
                 f"--output_dir.")
    else:
      choices = (
          f"The checkpoint of round {older} is readable, but this run does not fall back "
          f"to it by itself: rounds {older + 1}-{written} were already trained and their "
          f"rows written to metrics.csv (released), and the round-{older} ledger does "
          f"not count them; replaying them re-uses their noise and re-releases them "
          f"unchanged only if training is exactly deterministic. Choose: delete {delete} "
          f"to resume from round {older}, accepting that rounds {older + 1}-{written} were "
          f"released before and are released again; or run with --restart "
          f"(RoundDriver(restart=True)) to discard this run's checkpoints and metrics "
          f"and start from round 0 (rows released earlier stay released); or use "
          f"another --output_dir.")
    return checkpoint.CorruptCheckpointError(
        f"the newest checkpoint of {self.output_dir} (round {newest}) cannot be read: "
        f"{error} {choices}", error.paths or tuple(files))

  def _restore(self, template: Any, total_rounds: int) -> tuple[Any, int]:
    rounds = checkpoint.list_rounds(self.checkpoint_dir)
    if not rounds:
      return template, 0
    last = rounds[-1]
    try:
      state, meta = checkpoint.load(self.checkpoint_dir, last, template)
    except checkpoint.CorruptCheckpointError as e:
      raise self._corrupt_error(e, rounds, template) from e
    if meta.get("fingerprint") != self._fingerprint:
      stored = meta.get("fingerprint_fields")
      diff = (fingerprint.differences(stored, self._fingerprint_fields)
              if stored is not None else [])
      what = (f" (differs in: {fingerprint.join(diff)})" if diff else
              " (it predates the current fingerprint, or its parameters differ)")
      raise checkpoint.CheckpointMismatchError(
          f"the checkpoint in {self.checkpoint_dir} was made by a run with other "
          f"privacy/training parameters{what}; resuming it would misreport privacy and "
          "mix two runs. Use the original parameters, another --output_dir, or "
          "--restart to discard this run's checkpoints and metrics and start fresh.")
    if last > total_rounds:
      raise checkpoint.CheckpointMismatchError(
          f"the checkpoint in {self.checkpoint_dir} is at round {last}, past the "
          f"{total_rounds} rounds asked for. Ask for at least {last} rounds, use another "
          "--output_dir, or --restart to start fresh.")
    self._check_outputs(meta, last)
    self.sampler.set_state(meta["sampler"])
    if self.ledger is not None:
      # Checkpoints written before the one ledger interface kept a record-level
      # ledger's state under "record_accountant".
      ledger_state = meta.get("ledger")
      self.ledger.set_state(ledger_state if ledger_state is not None
                            else meta.get("record_accountant"))
    if self.privacy_randomness is not None:
      self.privacy_randomness.set_state(meta.get("privacy_randomness"))
    self._check_ledger_round(last)
    logging.info("resumed from round %d (%s)", last, self.checkpoint_dir)
    return state, last

  def _metric_files(self) -> list[str]:
    return [metrics_lib.RELEASE_FILE] + ([] if self.release_only
                                         else [metrics_lib.DIAGNOSTICS_FILE])

  def _output_digests(self, round_num: int) -> dict:
    """Digests of the metric rows 1..``round_num`` (what a checkpoint is sealed with)."""
    return {name: metrics_lib.rows_digest(os.path.join(self.output_dir, name), round_num)
            for name in self._metric_files()}

  def _check_outputs(self, meta: dict, round_num: int) -> None:
    """Refuses to resume when the metric files no longer hold the rows the checkpoint saw.

    A truncated, edited or deleted ``metrics.csv`` (or ``diagnostics.csv``)
    would resume a run whose written record of rounds 1..r is not the one
    trained (issue 33).
    """
    sealed = checkpoint.sealed_outputs(meta) or {}
    now = self._output_digests(round_num)
    for name in self._metric_files():
      if name in sealed and sealed[name] != now[name]:
        path = os.path.join(self.output_dir, name)
        state = "is missing" if now[name] is None else "no longer holds the same rows"
        raise checkpoint.DamagedOutputsError(
            f"{path} {state} for rounds 1-{round_num} that the checkpoint at round "
            f"{round_num} was written with (edited, truncated or deleted); resuming would "
            "misreport the run. Restore the file from a backup, or run with --restart to "
            "discard this run and train it again.", (path,))

  def _check_ledger_round(self, round_num: int) -> None:
    """The restored ledger has charged exactly the checkpoint's rounds (never fewer)."""
    if self.ledger is None:
      return
    state = self.ledger.get_state() or {}
    charged = state.get("rounds_done", state.get("rounds"))
    if charged is not None and int(charged) != round_num:
      raise checkpoint.CheckpointMismatchError(
          f"the checkpoint in {self.checkpoint_dir} is at round {round_num} but its privacy "
          f"ledger has charged {charged} rounds; the ε it would report does not match the "
          "rounds trained. Run with --restart to train this run again.")

  def _save(self, state: Any, round_num: int) -> None:
    checkpoint.save(self.checkpoint_dir, round_num, state, {
        checkpoint.OUTPUTS_KEY: self._output_digests(round_num),
        "fingerprint": self._fingerprint,
        "fingerprint_fields": self._fingerprint_fields,
        "sampler": self.sampler.get_state(),
        "ledger": self.ledger.get_state() if self.ledger is not None else None,
        # Secret: a checkpoint is as sensitive as the raw data.
        "privacy_randomness": (self.privacy_randomness.get_state()
                               if self.privacy_randomness is not None else None),
    })

  def _columns(self) -> list[str]:
    release, diagnostics = self._fields()
    columns = list(dict.fromkeys(release + (diagnostics or [])))
    return columns + ([metrics_lib.PRIVACY_WARNING_FIELD] if self._privacy_warning else [])

  def _as_stored(self, row: dict) -> dict:
    """``row`` as :meth:`_stored_rows` will read it back (same keys, same types)."""
    row = dict(row, **({metrics_lib.PRIVACY_WARNING_FIELD: self._privacy_warning}
                       if self._privacy_warning else {}))
    return {k: metrics_lib.parse_value(metrics_lib.format_value(row.get(k)))
            for k in self._columns()}

  def _stored_rows(self, up_to_round: int) -> list[dict]:
    """Rows 1..``up_to_round`` from metrics.csv, joined with diagnostics.csv by round."""
    by_round: dict[int, dict] = {}
    names = [metrics_lib.RELEASE_FILE] + ([] if self.release_only
                                           else [metrics_lib.DIAGNOSTICS_FILE])
    for name in names:
      path = os.path.join(self.output_dir, name)
      if not os.path.exists(path):
        continue
      for row in metrics_lib.read_metrics(path):
        if row.get("round") is not None and int(row["round"]) <= up_to_round:
          by_round.setdefault(int(row["round"]), {}).update(row)
    if sorted(by_round) != list(range(1, up_to_round + 1)):
      logging.warning("%s holds rows for rounds %s, not 1-%d (metric files edited or "
                      "removed?)", self.output_dir, sorted(by_round), up_to_round)
    return [by_round[r] for r in sorted(by_round)]

  def run(self, total_rounds: int) -> tuple[Any, list[dict]]:
    """Runs (or resumes) until ``total_rounds``; returns (state, metric rows).

    The rows are the whole run's, rounds 1 to ``total_rounds``: those kept
    from before a resume (read back from the metric files, typed as
    :func:`tff_idp.engine.metrics.read_metrics` gives them) and those
    trained now, with the same keys. A finished run trains nothing and
    returns its stored rows.

    Raises:
      OutputDirError: another run holds the output directory, or it cannot
        be written.
      CheckpointMismatchError: the checkpoint belongs to another run.
      CorruptCheckpointError: the newest checkpoint cannot be read (see the
        module docstring for the choices).
    """
    if self.ledger is not None:
      self.ledger.check_budget(total_rounds)
    with OutputDirLock(self.output_dir):
      return self._run_locked(total_rounds)

  def _run_locked(self, total_rounds: int) -> tuple[Any, list[dict]]:
    if self.restart and not self._restarted:
      self._discard_outputs()
      self._restarted = True
    template = self.process.initialize()
    self._compute_fingerprint(template)
    state, start = self._restore(template, total_rounds)
    if start == total_rounds and start > 0:
      print(f"{self.output_dir}: already finished its {start} rounds; nothing to train "
            "(--restart trains again).", file=sys.stderr, flush=True)
      return state, self._stored_rows(start)
    if start > 0:  # issue 50: a resumed run says where it picks up
      print(f"{self.output_dir}: resuming from round {start} of {total_rounds} (its "
            "checkpoint).", file=sys.stderr, flush=True)
    release_fields, diagnostic_fields = self._fields()
    writer = MetricsWriter(self.output_dir, release_fields, diagnostic_fields,
                           resume_after_round=start, tensorboard=self.tensorboard,
                           privacy_warning=self._privacy_warning)
    rows: list[dict] = self._stored_rows(start) if start > 0 else []
    bar = progress_lib.progress(total_rounds, initial=start, enabled=self.progress,
                                desc=os.path.basename(os.path.normpath(self.output_dir)),
                                unit="round")
    try:
      for round_num in range(start + 1, total_rounds + 1):
        termination.check()  # a SIGTERM whose exception was swallowed (e.g. in a gc callback)
        t0 = time.perf_counter()
        if self.ledger is not None:
          self.ledger.begin_round()
        cohort = self.sampler.sample()
        inputs = [self.client_input_fn(cid, round_num) for cid in cohort]
        if self.padding_input_fn is not None:
          padded = -(-max(1, len(inputs)) // self.pad_multiple) * self.pad_multiple
          inputs += [self.padding_input_fn() for _ in range(padded - len(inputs))]
        output = self.process.next(state, inputs)
        state = output.state
        if self.ledger is not None:
          self.ledger.end_round(cohort)
        flat = _flatten(output.metrics)
        row = {
            "round": round_num,
            # Real clients only: an audit's canaries are not clients.
            "clients_sampled": getattr(self.sampler, "last_real_count", len(cohort)),
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
        for name in self.process_diagnostics:
          row[name] = _pick(flat, f"train/{name}")
        evaluating = round_num % self.eval_every == 0 or round_num == total_rounds
        if self.ledger is not None:
          row.update(self.ledger.metrics(self.group_names, evaluating))
        if self.evaluate_fn is not None and evaluating:
          result = self.evaluate_fn(self.process.get_model_weights(state))
          row["eval_loss"] = result.get("loss")
          row["eval_accuracy"] = result.get("accuracy")
          for key, column in zip(self.eval_metrics, self._eval_columns()):
            row[column] = result.get(key)
        row["seconds"] = time.perf_counter() - t0
        writer.write(row)
        rows.append(self._as_stored(row))
        if round_num % self.checkpoint_every == 0 or round_num == total_rounds:
          self._save(state, round_num)
        # No computation is in flight: a grown glibc worker may be restarted here.
        runtime.between_rounds()
        postfix = {} if self.release_only else {"clients": row["clients_sampled"]}
        if row.get("eval_accuracy") is not None:
          postfix["acc"] = f"{row['eval_accuracy']:.3f}"
        bar.set_postfix(postfix)  # before the count: a plain line shows this round's values
        bar.update(1)
    finally:
      bar.close()
      writer.close()
    return state, rows
