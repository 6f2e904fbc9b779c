"""Run-directory safety (issue 9): corrupt checkpoints, restart, fingerprints, locking, CSV types.

A tiny numpy process stands in for TFF, so these tests train nothing real
and take a few seconds in all.
"""
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from tff_idp.errors import OutputDirError
from tff_idp.errors import TffIdpError
from tff_idp.errors import ToolkitValueError
from tff_idp.engine.sampling import PoissonClientSampler
from tff_idp.engine import checkpoint
from tff_idp.engine import fingerprint
from tff_idp.engine import metrics as metrics_lib
from tff_idp.engine.driver import RoundDriver
from tff_idp.engine.metrics import read_metrics
from tff_idp.engine.output_lock import LOCK_FILE
from tff_idp.engine.output_lock import OutputDirLock

CLIENTS = [f"c{i}" for i in range(20)]
ROUNDS = 6


class FakeProcess:
  """A LearningProcess look-alike: w += lr · (cohort size), with TFF-style metrics."""

  def __init__(self, learning_rate: float = 0.5):
    self.learning_rate = learning_rate

  def initialize(self):
    return {"w": np.zeros(3, np.float32), "step": np.int64(0)}

  def next(self, state, inputs):
    w = state["w"] + np.float32(self.learning_rate) * np.float32(len(inputs) + 0.1)
    metrics = {"client_work": {"train": {"loss": float(w.sum()) / 7.0}},
               "aggregator": {"clip": 0.1 + float(state["step"]) / 3.0,
                              "unclipped_fraction": 1.0 / 3.0}}
    return types.SimpleNamespace(state={"w": w, "step": state["step"] + 1}, metrics=metrics)

  def get_model_weights(self, state):
    return state["w"]

  def get_hparams(self, state):
    del state
    return {"client_work": {"learning_rate": np.float32(self.learning_rate)}}


def _driver(out_dir, fail_at_round=None, learning_rate=0.5, **kwargs):
  def client_input(cid, round_num):
    if round_num == fail_at_round:
      raise KeyboardInterrupt("simulated kill")
    return cid

  def evaluate(weights):
    return {"loss": float(np.sum(weights)) / 3.0, "accuracy": 0.25}

  args = dict(process=FakeProcess(learning_rate),
              sampler=PoissonClientSampler(CLIENTS, np.full(len(CLIENTS), 0.4), seed=5),
              client_input_fn=client_input, output_dir=str(out_dir), evaluate_fn=evaluate,
              eval_every=1, checkpoint_every=2, progress=False, tensorboard=False,
              run_fingerprint=fingerprint.run_fingerprint(
                  calibration={"sigma": 1.0, "rounds": ROUNDS},
                  training={"learning_rate": learning_rate}, data="fake", model="fake",
                  run_seed=0, insecure_reproducible_noise=False))
  args.update(kwargs)
  return RoundDriver(**args)


def _interrupted(out_dir, fail_at_round):
  with pytest.raises(KeyboardInterrupt):
    _driver(out_dir, fail_at_round=fail_at_round).run(ROUNDS)


# --- 1. corrupt checkpoints -------------------------------------------------------------


@pytest.mark.parametrize("damage", ["empty", "truncated", "json"])
def test_corrupt_newest_checkpoint_names_file_and_choices(tmp_path, damage):
  _interrupted(tmp_path, fail_at_round=6)  # rounds 1-5 ran; checkpoints at 2 and 4
  ckpt = tmp_path / "checkpoints"
  assert checkpoint.list_rounds(str(ckpt)) == [2, 4]
  npz, js = ckpt / "ckpt_000004.npz", ckpt / "ckpt_000004.json"
  if damage == "empty":
    npz.write_bytes(b"")
  elif damage == "truncated":
    npz.write_bytes(npz.read_bytes()[:50])
  else:
    js.write_text(js.read_text()[:20])
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    _driver(tmp_path).run(ROUNDS)
  message = str(info.value)
  assert isinstance(info.value, TffIdpError)
  assert str(js if damage == "json" else npz) in message
  assert "round 2 is readable" in message and "rounds 3-5" in message
  assert "--restart" in message and "delete" in message
  assert (str(npz) if damage == "json" else str(js)) in message  # delete both files
  # Nothing was touched: the released rows are still there, the checkpoints too.
  assert [r["round"] for r in read_metrics(tmp_path / "metrics.csv")] == [1, 2, 3, 4, 5]
  assert checkpoint.list_rounds(str(ckpt)) == [2, 4]

  # The documented choice: delete the corrupt files, resume from round 2.
  js.unlink()
  npz.unlink()
  _, rows = _driver(tmp_path).run(ROUNDS)
  _, expected = _driver(tmp_path / "straight").run(ROUNDS)
  assert _comparable(rows) == _comparable(expected)


def test_only_checkpoint_corrupt_offers_restart(tmp_path):
  _interrupted(tmp_path, fail_at_round=3)  # checkpoint at 2 only
  (tmp_path / "checkpoints" / "ckpt_000002.npz").write_bytes(b"PK\x03\x04 not really")
  with pytest.raises(checkpoint.CorruptCheckpointError,
                     match="no older readable checkpoint.*--restart"):
    _driver(tmp_path).run(ROUNDS)
  _, rows = _driver(tmp_path, restart=True).run(ROUNDS)
  assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1))


def test_load_raises_corrupt_error_not_zip_errors(tmp_path):
  state = FakeProcess().initialize()
  checkpoint.save(str(tmp_path), 1, state, {"x": 1})
  (tmp_path / "ckpt_000001.npz").write_bytes(b"")
  with pytest.raises(checkpoint.CorruptCheckpointError, match="ckpt_000001.npz") as info:
    checkpoint.load(str(tmp_path), 1, state)
  assert info.value.paths == (str(tmp_path / "ckpt_000001.npz"),)


# --- restart -----------------------------------------------------------------------------


def test_restart_discards_checkpoints_and_metrics(tmp_path):
  _interrupted(tmp_path, fail_at_round=4)
  (tmp_path / "checkpoints" / "ckpt_000002.npz.999.tmp").write_bytes(b"left over")
  other = _driver(tmp_path, learning_rate=0.1)
  with pytest.raises(checkpoint.CheckpointMismatchError, match="--restart"):
    other.run(ROUNDS)
  restarted = _driver(tmp_path, learning_rate=0.1, restart=True)
  _, rows = restarted.run(ROUNDS)
  _, expected = _driver(tmp_path / "fresh", learning_rate=0.1).run(ROUNDS)
  assert _comparable(rows) == _comparable(expected)
  assert _comparable(read_metrics(tmp_path / "metrics.csv")) == _comparable(
      read_metrics(tmp_path / "fresh" / "metrics.csv"))
  assert not list((tmp_path / "checkpoints").glob("*.tmp"))
  # restart is one-shot: running the same driver again continues (finished: no change).
  _, again = restarted.run(ROUNDS)
  assert again == rows


# --- 2. fingerprint and finished runs ----------------------------------------------------


def test_finished_run_returns_stored_rows(tmp_path):
  _, first = _driver(tmp_path).run(ROUNDS)
  assert [r["round"] for r in first] == list(range(1, ROUNDS + 1))
  before = (tmp_path / "metrics.csv").read_bytes()
  calls = []
  second = _driver(tmp_path)
  second.evaluate_fn = lambda w: calls.append(w) or {}
  state, rows = second.run(ROUNDS)
  assert not calls  # trained nothing
  assert rows == first
  assert isinstance(rows[0]["clients_sampled"], int) and isinstance(rows[0]["round"], int)
  assert (tmp_path / "metrics.csv").read_bytes() == before
  assert int(state["step"]) == ROUNDS
  with pytest.raises(checkpoint.CheckpointMismatchError, match="past the 4 rounds"):
    _driver(tmp_path).run(4)


def test_harmless_changes_resume_and_learning_rate_is_refused(tmp_path):
  _interrupted(tmp_path, fail_at_round=5)
  # A trailing slash, another eval/checkpoint frequency, release-only: same run.
  _, rows = _driver(str(tmp_path) + os.sep, eval_every=3, checkpoint_every=1,
                    progress=True).run(ROUNDS)
  assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1))
  # The process's learning rate (read through get_hparams) is part of the fingerprint.
  with pytest.raises(checkpoint.CheckpointMismatchError,
                     match=r"other privacy/training.*learning_rate") as info:
    _driver(tmp_path, learning_rate=0.25).run(ROUNDS + 2)
  assert "0.5" in str(info.value) and "0.25" in str(info.value)


def test_fingerprint_helper():
  base = dict(calibration={"sigma": 1.0, "rates": np.arange(100.0)}, training={"lr": 0.1},
              data={"x": 1}, model=None, run_seed=3, insecure_reproducible_noise=False)
  fp = fingerprint.run_fingerprint(**base)
  assert fingerprint.digest(fp) == fingerprint.digest(fingerprint.run_fingerprint(**base))
  assert "array_digest" in fp["calibration"]["rates"]  # large arrays are digested
  changed = fingerprint.run_fingerprint(**dict(base, training={"lr": 0.2}))
  assert fingerprint.digest(changed) != fingerprint.digest(fp)
  assert fingerprint.differences(fp, changed) == ["training.lr (checkpoint: 0.1, now: 0.2)"]
  with pytest.raises(ToolkitValueError, match="training hyperparameters"):
    fingerprint.run_fingerprint(**dict(base, training={}))
  with pytest.raises(ToolkitValueError, match="by name and parameters"):
    fingerprint.canonical({"fn": lambda x: x})
  assert fingerprint.canonical({"a": float("nan"), "b": np.float32(0.5)}) == {"a": "nan",
                                                                             "b": 0.5}


def test_experiment_fingerprint_ignores_output_only_settings():
  from tff_idp.idp_fedavg import runs as common  # pylint: disable=g-import-not-at-top
  config = common.TrainingConfig(
      budgets=[1.0, 2.0], ratios=[0.5, 0.5], runs=["50-50"], seeds=[0, 1], rounds=10,
      clients_per_round=5, local_epochs=1, batch_size=16, client_learning_rate=0.1,
      server_learning_rate=1.0, client_optimizer="sgd", delta=1e-5, accountant="rdp",
      output_dir="runs/x", eval_every=10, checkpoint_every=10)
  fp = common._fingerprint_config(config, seed=0)  # pylint: disable=protected-access
  same = common._fingerprint_config(  # pylint: disable=protected-access
      common.dataclasses.replace(config, output_dir="runs/x/", eval_every=1, seeds=[0, 7],
                                 checkpoint_every=3, progress=False, release_only=True,
                                 runs=["50-50", "nonprivate"]), seed=0)
  assert fingerprint.digest(same) == fingerprint.digest(fp)
  for change in (dict(client_learning_rate=0.2), dict(batch_size=32), dict(local_epochs=2),
                 dict(rounds=11), dict(delta=1e-6), dict(insecure_reproducible_noise=True),
                 dict(client_optimizer="adam")):
    other = common._fingerprint_config(  # pylint: disable=protected-access
        common.dataclasses.replace(config, **change), seed=0)
    assert fingerprint.digest(other) != fingerprint.digest(fp), change
  assert fingerprint.digest(common._fingerprint_config(  # pylint: disable=protected-access
      config, seed=1)) != fingerprint.digest(fp)


# --- 3. one run per output directory -----------------------------------------------------


def test_two_locks_on_one_directory_conflict(tmp_path):
  first = OutputDirLock(str(tmp_path)).acquire()
  with pytest.raises(OutputDirError, match=f"PID {os.getpid()}.*another --output_dir"):
    OutputDirLock(str(tmp_path)).acquire()
  first.release()
  with OutputDirLock(str(tmp_path)):  # free again
    pass


def test_driver_refuses_directory_held_by_another_process(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, "-c",
       "import sys; from tff_idp.engine.output_lock import OutputDirLock; "
       "lock = OutputDirLock(sys.argv[1]).acquire(); print('held', flush=True); "
       "sys.stdin.read()", str(tmp_path)],
      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
      cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  try:
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(OutputDirError, match=f"PID {holder.pid}"):
      _driver(tmp_path).run(ROUNDS)
    assert not (tmp_path / "metrics.csv").exists()
  finally:
    holder.kill()  # process death releases the flock
    holder.wait()
  _driver(tmp_path).run(2)


def test_lock_is_released_when_run_raises(tmp_path):
  _interrupted(tmp_path, fail_at_round=2)
  with OutputDirLock(str(tmp_path)):
    pass  # would raise OutputDirError if the failed run still held it
  assert (tmp_path / LOCK_FILE).exists()


def test_checkpoint_tmp_names_are_per_process(tmp_path, monkeypatch):
  replaced = []
  real_replace = os.replace
  monkeypatch.setattr(os, "replace", lambda a, b: replaced.append(a) or real_replace(a, b))
  checkpoint.save(str(tmp_path), 1, FakeProcess().initialize(), {})
  assert replaced and all(f".{os.getpid()}.tmp" in p for p in replaced)


# --- 4. metric types survive a resume ----------------------------------------------------


def test_resumed_csv_keeps_rows_byte_identical(tmp_path):
  _interrupted(tmp_path, fail_at_round=4)  # rows 1-3 written, checkpoint at 2
  before = {name: (tmp_path / name).read_text().splitlines()
            for name in ("metrics.csv", "diagnostics.csv")}
  assert before["diagnostics.csv"][1].split(",")[1].isdigit()  # clients_sampled: an int
  _driver(tmp_path).run(ROUNDS)
  for name, lines in before.items():
    after = (tmp_path / name).read_text().splitlines()
    assert after[:3] == lines[:3], name  # header + rounds 1, 2 exactly as written
  rows = read_metrics(tmp_path / "diagnostics.csv")
  assert all(isinstance(r["round"], int) and isinstance(r["clients_sampled"], int)
             for r in rows)
  assert all(isinstance(r["train_loss"], float) for r in rows)


def test_values_round_trip_exactly():
  for value in (0.1 + 0.2, 1.0 / 3.0, 1e-300, -0.0, 15, 0, None, "NOT PRIVATE: x"):
    assert metrics_lib.parse_value(metrics_lib.format_value(value)) == value
  assert metrics_lib.format_value(15) == "15" and metrics_lib.format_value(15.0) == "15.0"
  assert metrics_lib.format_value(np.int64(7)) == "7"
  assert metrics_lib.parse_value(metrics_lib.format_value(np.float32(0.1))) == float(
      np.float32(0.1))
  assert np.isnan(metrics_lib.parse_value(metrics_lib.format_value(float("nan"))))


# --- 5. unwritable checkpoint directory --------------------------------------------------


def test_unwritable_checkpoint_dir_is_output_dir_error(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("not a directory")
  with pytest.raises(OutputDirError, match="cannot write checkpoint.*--output_dir"):
    checkpoint.save(str(blocker / "checkpoints"), 1, FakeProcess().initialize(), {})
  with pytest.raises(OutputDirError, match="cannot use output directory"):
    _driver(blocker / "run").run(1)


def _comparable(rows):
  return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]
