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


def _tree_cpu_seconds() -> float:
  """CPU seconds of this process and every live descendant, their reaped children included."""
  import os  # pylint: disable=g-import-not-at-top
  tick = os.sysconf("SC_CLK_TCK")
  parents: dict[int, int] = {}
  times: dict[int, int] = {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
      continue
    parents[int(entry)] = int(fields[1])
    times[int(entry)] = sum(int(x) for x in fields[11:15])
  me = os.getpid()
  total = 0
  for pid, cpu in times.items():
    ancestor = pid
    while ancestor not in (me, 0, 1) and ancestor in parents:
      ancestor = parents[ancestor]
    if ancestor == me:
      total += cpu
  return total / tick


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  """``TFF_IDP_CPU_LOG=<file>``: CPU seconds each test costs, its processes included (issue 52).

  One line per test: CPU seconds (set-up, call and tear-down; the processes it
  starts, and module fixtures built for it), then the test's id.
  """
  del nextitem
  import os  # pylint: disable=g-import-not-at-top
  log = os.environ.get("TFF_IDP_CPU_LOG")
  before = _tree_cpu_seconds() if log else 0.0
  yield
  if log:
    with open(log, "a") as f:
      f.write(f"{_tree_cpu_seconds() - before:.2f}\t{item.nodeid}\n")
