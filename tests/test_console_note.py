"""console.note: advice printed once per process, in one format (issue 34 item 5)."""
import os
import subprocess
import sys

from tff_idp import console

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_note_prints_once_per_key(capsys):
  key = "test-note-once"
  assert console.note("first text", key=key)
  assert not console.note("other text, same key", key=key)
  err = capsys.readouterr().err
  assert err == "note: first text\n"


_TWO_RECYCLES = """
import logging
from absl import logging as absl_logging
logging.basicConfig()      # a user script with Python logging set up, and absl imported
logging.warning("user's own line")
from tff_idp.execution import runtime
assert runtime._resolve_allocator("auto") is None or True   # start-up says nothing
runtime.note_glibc_worker_recycled(33.4)
runtime.note_glibc_worker_recycled(35.0)   # a second recycle, or a second runtime
"""


def test_the_allocator_notice_prints_once_in_one_format():
  """Bug caught: the no-jemalloc notice went through Python logging and absl's handler,
  printing twice in two formats, at every start-up (also ahead of a refused run's error)."""
  proc = subprocess.run([sys.executable, "-c", _TWO_RECYCLES], capture_output=True,
                        text=True, timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-2000:]
  lines = [l for l in proc.stderr.splitlines() if "jemalloc" in l]
  assert len(lines) == 1 and lines[0].startswith("note: the TFF worker has grown 33 MiB"), \
      proc.stderr
