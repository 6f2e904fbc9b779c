"""Signals at chosen moments of a real command-line run, and the contract each exit must keep.

Issue 50: SIGINT must end a run with exit 130 and SIGTERM with 143, with one
line that says how to go on, and never a traceback, a foreign message or a
swallowed signal, whatever the process is doing. Random delays hit a moment
by chance; here each *phase* is recognised from outside the process, so every
run of the harness hits the same ones:

* ``imports``: the toolkit's first handler is installed (``SigCgt`` in
  ``/proc/<pid>/status``), the entry module's imports are running;
* ``tensorflow``: TensorFlow's shared library is mapped (``/proc/<pid>/maps``);
* ``set-up``: the run printed its first line (data loaded, calibration next);
* ``first-round``: the first metrics file exists (the worker and round 1);
* ``checkpoint``: the first checkpoint file appears (its write is under way);
* ``after-checkpoint``: the first checkpoint is complete (its ``.json``, written last);
* ``end``: ``summary.json`` appears (the summary, table and plot are written).

Used by ``tests/test_signal_harness.py`` (a few phases, ``make test``) and its
``bench``-marked sweep (every phase, both signals, two commands, each
interrupted run then resumed with the same command).
"""
from __future__ import annotations

import dataclasses
import glob
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ACCEPTED_LAST_LINES = {
    signal.SIGINT: ("interrupted; resume with the same command",
                    "interrupted while starting, before anything was written; run the same "
                    "command to start"),
    signal.SIGTERM: ("terminated; resume with the same command",
                     "terminated while starting, before anything was written; run the same "
                     "command to start"),
}
FOREIGN = ("Traceback", "Exception ignored", "IMPORTANT: PLEASE READ THIS", "KeyboardInterrupt",
           "Fatal Python error")
PHASES = ("imports", "tensorflow", "set-up", "first-round", "checkpoint", "after-checkpoint",
          "end")


@dataclasses.dataclass
class Outcome:
  phase: str
  signum: int
  returncode: int
  stdout: str
  stderr: str
  landed: bool  # the signal was sent while the process still ran


def _caught(pid: int) -> int:
  try:
    with open(f"/proc/{pid}/status") as f:
      return next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
  except (OSError, StopIteration):
    return 0


def _maps_tensorflow(pid: int) -> bool:
  try:
    with open(f"/proc/{pid}/maps") as f:
      return "libtensorflow_framework" in f.read()
  except OSError:
    return False


def _trigger(phase: str, pid: int, output_dir: str, printed: list) -> Callable[[], bool]:
  files = {"first-round": "**/metrics.csv", "checkpoint": "**/checkpoints/ckpt_*",
           "after-checkpoint": "**/checkpoints/ckpt_*.json", "end": "summary.json"}
  if phase == "imports":
    return lambda: bool(_caught(pid) >> (signal.SIGTERM - 1) & 1)
  if phase == "tensorflow":
    return lambda: _maps_tensorflow(pid)
  if phase == "set-up":
    return lambda: bool(printed)
  pattern = os.path.join(output_dir, files[phase])
  return lambda: bool(glob.glob(pattern, recursive=True))


def clean_env() -> dict:
  """The user's environment: no TF log level of ours, the repository importable."""
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_CPP_MIN_LOG_LEVEL", "TFF_IDP_VERBOSE")}
  return dict(env, PYTHONPATH=ROOT)


def interrupt(module: str, args: list[str], output_dir: str, phase: str, signum: int,
              limit_s: float = 300.0) -> Outcome:
  """Runs ``python -m module args``, sends ``signum`` as ``phase`` begins, waits for the exit."""
  proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=clean_env(),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
  printed: list[str] = []
  out_chunks: list[str] = []

  def read_stdout():
    for line in proc.stdout:
      out_chunks.append(line)
      if line.strip():
        printed.append(line)

  reader = threading.Thread(target=read_stdout, daemon=True)
  reader.start()
  err_chunks: list[str] = []
  err_reader = threading.Thread(target=lambda: err_chunks.extend(proc.stderr), daemon=True)
  err_reader.start()
  ready = _trigger(phase, proc.pid, output_dir, printed)
  deadline = time.monotonic() + limit_s
  landed = False
  try:
    while proc.poll() is None and time.monotonic() < deadline:
      if ready():
        proc.send_signal(signum)
        landed = proc.poll() is None
        break
      time.sleep(0.002)
    proc.wait(timeout=max(1.0, deadline - time.monotonic()))
  finally:
    if proc.poll() is None:  # a hang: leave no process behind, report it
      proc.kill()
      proc.wait()
  reader.join(timeout=10)
  err_reader.join(timeout=10)
  return Outcome(phase, signum, proc.returncode, "".join(out_chunks), "".join(err_chunks),
                 landed)


def violations(outcome: Outcome) -> list[str]:
  """What in ``outcome`` breaks the signal contract (empty: kept)."""
  problems = []
  code = 128 + outcome.signum
  lines = [line for line in outcome.stderr.splitlines() if line.strip()]
  for word in FOREIGN:
    if word in outcome.stderr:
      problems.append(f"{word!r} on stderr")
  if outcome.returncode == 0 and outcome.phase == "end":
    return problems  # the run finished its last write before the signal: nothing to stop
  if outcome.returncode != code:
    problems.append(f"exit {outcome.returncode}, not {code}")
  if not lines or lines[-1].strip() not in ACCEPTED_LAST_LINES[outcome.signum]:
    problems.append(f"last line {lines[-1] if lines else None!r}")
  others = [line for line in lines[:-1]
            if not line.startswith(("note:", "warning:", "/"))]  # "/…: resuming from round"
  if others:
    problems.append(f"{len(others)} more lines: {others[:3]}")
  return problems


def report(outcomes: list[Outcome]) -> str:
  """One row per run: the phase, the signal, the exit and what broke (plain text)."""
  rows = []
  for o in outcomes:
    broken = violations(o)
    rows.append(f"{o.phase:>12} {signal.Signals(o.signum).name:>8} exit {o.returncode:>4} "
                f"{'ok' if not broken else '; '.join(broken)}")
  return "\n".join(rows)


def resume_after(module: str, args: list[str]) -> Optional[subprocess.CompletedProcess]:
  """The same command again, to its end (an interrupted run must resume or start cleanly)."""
  return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, env=clean_env(),
                        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
