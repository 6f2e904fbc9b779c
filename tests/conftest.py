"""Shared fixtures. TFF-executing tests must request ``tff_runtime``.

The fixture owns TFF's worker process for the whole session, so no test ever
falls back to TFF's default context (whose worker_binary would be orphaned).
"""
import pytest


@pytest.fixture(scope="session")
def tff_runtime():
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  rt = runtime.ExecutionRuntime(install_signal_handlers=False)
  rt.start()
  yield rt
  rt.close()


def _worker_children() -> list[int]:
  """PIDs of TFF worker_binary processes whose parent is this pytest process."""
  import os  # pylint: disable=g-import-not-at-top
  pids = []
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
      with open(f"/proc/{entry}/cmdline", "rb") as f:
        cmd = f.read()
    except OSError:
      continue
    if ppid == os.getpid() and b"worker_binary" in cmd:
      pids.append(int(entry))
  return pids


def pytest_sessionfinish(session, exitstatus):
  """Fails the run if a test let TFF start its own (orphan-prone) worker.

  Such a worker comes from executing a TFF computation without the
  ``tff_runtime`` fixture; it would outlive pytest and hold CI's pipes open.
  It is stopped here (it is this process's own child) and the run fails.
  """
  del exitstatus
  import os  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  leaked = _worker_children()
  for pid in leaked:
    os.kill(pid, signal.SIGKILL)
  if leaked:
    print(f"\nERROR: {len(leaked)} TFF worker_binary process(es) started outside the "
          "tff_runtime fixture (a test ran TFF without requesting it); stopped them.")
    session.exitstatus = 1


def pytest_configure(config):
  """``TFF_IDP_SPAWN_LOG=<file>``: log every Python process a test starts (issue 52).

  One line per start: the test's id, then the command. An interpreter started
  for a command that loads TensorFlow pays its import (seconds); a run of
  ``tests/forked_runs.py`` (logged as ``forked …``) starts from a process that
  has it loaded. ``cut -f1 <file> | sort | uniq -c | sort -n`` counts them by
  test.
  """
  import os  # pylint: disable=g-import-not-at-top
  log = os.environ.get("TFF_IDP_SPAWN_LOG")
  if not log:
    return
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  original = subprocess.Popen.__init__

  def logged(self, args, *a, **k):
    argv = [args] if isinstance(args, str) else list(args)
    if argv and str(argv[0]) == sys.executable:
      test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
      with open(log, "a") as f:
        command = " ".join(str(x) for x in argv[1:4]).replace("\n", " ")[:120]
        f.write(f"{test}\t{command}\n")
    original(self, args, *a, **k)

  subprocess.Popen.__init__ = logged
