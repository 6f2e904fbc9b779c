"""The README's "Your own data in 10 lines" snippet runs as printed, end to end."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _snippet() -> str:
  text = open(os.path.join(ROOT, "README.md")).read()
  match = re.search(r"<!-- own-data-example -->\s*```python\n(.*?)```\s*<!-- /own-data-example -->",
                    text, re.S)
  assert match, "the README lost its <!-- own-data-example --> block"
  return match.group(1)


def test_snippet_is_short():
  code = [l for l in _snippet().splitlines() if l.strip() and not l.lstrip().startswith("#")]
  assert len(code) <= 12, code


def test_snippet_runs_end_to_end(tmp_path):
  # Verbatim, in a fresh interpreter (the runner owns its TFF worker), from a scratch directory
  # so that its relative output_dir lands there.
  proc = subprocess.run([sys.executable, "-c", _snippet()], cwd=tmp_path, capture_output=True,
                        text=True, timeout=900, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  table = proc.stdout
  for method in ("ours", "minimum", "dropout", "privacy_free"):
    assert re.search(rf"^\| {method} \| \d+\.\d\d ± ", table, re.M), table
  out = tmp_path / "runs" / "my_hospitals"
  assert (out / "ours" / "seed0" / "metrics.csv").exists()
  assert (out / "summary.json").exists() and (out / "accuracy.png").exists()
