"""Golden outputs: small, reproducible runs of every experiment module.

Each run uses ``--insecure_reproducible_noise`` and fixed seeds, so its final
metrics, ledger rows and printed tables are a function of the code alone.
They were recorded before the family restructuring (issue 22) and must stay
bit-identical through any refactoring that is not meant to change results.

Re-record only on purpose (a change meant to alter results), and say so in the
commit: ``python -m tests.golden.record [name ...]``.
"""
import json
import os
import pathlib
import re
import sys
from typing import Any
from tests import forked_runs

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN_DIR = pathlib.Path(__file__).resolve().parent / "recorded"

INSECURE = "--insecure_reproducible_noise"

# name -> (module, args); "{out}" is the run's output folder, "{raw}" a folder
# of fake raw files written by tests.datasets.fakes.
RUNS: dict[str, tuple[str, list[str]]] = {
    "idp_fedavg": ("experiments.idp_fedavg", [
        "--num_clients=60", "--clients_per_round=8", "--rounds=2", "--seeds=0",
        "--budgets=4,8", "--ratios=0.5,0.5", "--runs=nonprivate,50-50,scale",
        "--eval_every=1", "--progress=false", INSECURE]),
    "rpdp": ("experiments.rpdp", [
        "--num_clients=3", "--users_per_silo=2", "--rounds=2", "--local_steps=1",
        "--seeds=0", "--eval_every=1", "--progress=false", INSECURE]),
    "ino_sgd": ("experiments.ino_sgd", [
        "--train_examples=600", "--test_examples=200", "--steps=6", "--expected_batch=60",
        "--eval_every=3", "--seeds=0", "--drop_percents=20", "--noprogress", INSECURE]),
    "apes": ("experiments.apes", [
        "--users=20", "--rounds=1", "--local_epochs=1", "--progress=false", INSECURE]),
    "audit": ("experiments.audit", [
        "--rounds=1", "--audit_canaries=12", "--controls=q8", "--noutility_baseline",
        "--hidden=8", "--num_clients=30", "--clients_per_round=6", INSECURE]),
    "centralized": ("experiments.centralized", [
        "--mode=both", "--methods=scf,binary_search,filter", "--train_examples=300",
        "--test_examples=100", "--steps=6", "--eval_every=3", "--seeds=0",
        "--table3_examples=100", "--table3_steps=4", "--table3_trials=1", INSECURE]),
    "preset_cifar10": ("experiments.cifar10", [
        "--data_dir={raw}", "--split_dir={out}/split", "--num_clients=10", "--rounds=1",
        "--clients_per_round=4", "--local_epochs=1", "--batch_size=8",
        "--runs=nonprivate,34-43-23", "--eval_every=1", "--progress=false", INSECURE]),
}

# Keys whose values depend on the clock, the machine or the output folder.
_VOLATILE_KEY = re.compile(
    r"(seconds|elapsed|duration|wall|time|date|host|path|dir|folder|file|version|"
    r"created|started|finished|pid|rss|memory|throughput|per_s|_s$)", re.I)
# Printed lines that carry timings, paths or progress.
_VOLATILE_LINE = re.compile(
    r"(\d+(\.\d+)?\s*(s|ms|min)\b|seconds|elapsed|wrote|written|saved|→|->|/tmp/|"
    r"{out}|it/s|round \d+/\d+|NOT PRIVATE|WARNING|resume)", re.I)


def _normalise(value: Any) -> Any:
  if isinstance(value, dict):
    return {k: _normalise(v) for k, v in sorted(value.items())
            if not _VOLATILE_KEY.search(k)}
  if isinstance(value, list):
    return [_normalise(v) for v in value]
  if isinstance(value, str) and (value.startswith((os.sep, "~")) or "/tmp" in value):
    return "<path>"  # an absolute path (output or data folder), not a label like "noise/4"
  return value


_VOLATILE_COLUMN = re.compile(
    r"(runtime|\btime\b|seconds|s/step|s/round|/s\b|per second|memory|calibration \(s\)|\(ms\))",
    re.I)
_TIMING_CELL = re.compile(r"^\s*[\d.]+\s*(ms|s|µs|us|min)\s*$")


def _table_lines(stdout: str, out: str) -> list[str]:
  """The printed Markdown tables (and ε lines), without volatile lines or columns.

  A column whose header names a time (for example "calibration runtime (s)")
  is blanked in every row of its table.
  """
  lines = []
  volatile_columns: set[int] = set()
  for line in stdout.replace(out, "{out}").splitlines():
    s = line.strip()
    if not s.startswith("|"):
      volatile_columns = set()
    if not s or (not s.startswith("|") and _VOLATILE_LINE.search(s)):
      continue
    if s.startswith("|"):
      cells = s.strip("|").split("|")
      if not volatile_columns and not set(s) <= set("|-: "):
        found = {i for i, c in enumerate(cells) if _VOLATILE_COLUMN.search(c)}
        if found:
          volatile_columns = found | {-1}  # -1 marks "header seen"
          lines.append(s)
          continue
      if volatile_columns:
        cells = ["<t>" if i in volatile_columns else c for i, c in enumerate(cells)]
      cells = ["<t>" if _TIMING_CELL.match(c) else c for c in cells]
      s = "|" + "|".join(cells) + "|"
      lines.append(s)
    elif "ε" in s or "epsilon" in s.lower():
      lines.append(s)
  return lines


def run(name: str, workdir: pathlib.Path) -> dict:
  """Runs one golden configuration and returns its normalised outputs."""
  module, args = RUNS[name]
  out = workdir / name
  raw = workdir / f"{name}_raw"
  if "{raw}" in " ".join(args):
    sys.path.insert(0, str(ROOT))
    from tests.datasets import fakes  # pylint: disable=g-import-not-at-top
    fakes.write_cifar10(str(raw), n_train=120, n_test=30, as_tar=True)
  argv = [a.format(out=out, raw=raw) for a in args]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT),
             CUDA_VISIBLE_DEVICES="")
  proc = forked_runs.run_module(module, [f"--output_dir={out}", *argv], env=env, timeout=900)
  if proc.returncode != 0:
    raise RuntimeError(f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
  summary = json.loads((out / "summary.json").read_text())
  return {"module": module, "args": args, "summary": _normalise(summary),
          "tables": _table_lines(proc.stdout, str(out))}


def path(name: str) -> pathlib.Path:
  return GOLDEN_DIR / f"{name}.json"


def load(name: str) -> dict:
  return json.loads(path(name).read_text())
