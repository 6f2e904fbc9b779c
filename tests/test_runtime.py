"""No TFF worker_binary outlives a run: normal exit, exception, SIGTERM, SIGINT, SIGKILL."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    import tensorflow_federated as tff
    from tff_idp import runtime

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def total(x):
      return tff.federated_sum(x)

    rt = runtime.ExecutionRuntime().start()
    assert float(total([1.0, 2.0])) == 3.0
    print("WORKER", rt.worker_pid, flush=True)
    mode = sys.argv[1]
    if mode == "raise":
      raise RuntimeError("boom")
    if mode == "wait":
      print("READY", flush=True)
      time.sleep(120)
""")


def _alive(pid: int) -> bool:
  """True if ``pid`` runs and is not a zombie."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(")")[-1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def _wait_dead(pid: int, timeout: float = 15.0) -> bool:
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if not _alive(pid):
      return True
    time.sleep(0.1)
  return False


def _start(mode: str) -> subprocess.Popen:
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)


def _read_worker_pid(proc: subprocess.Popen) -> int:
  for line in proc.stdout:
    if line.startswith("WORKER"):
      return int(line.split()[1])
  raise AssertionError("child printed no worker pid")


@pytest.mark.parametrize("mode,expected_rc", [("exit", 0), ("raise", 1)])
def test_worker_ends_with_run_and_releases_pipes(mode, expected_rc):
  proc = _start(mode)
  try:
    pid = _read_worker_pid(proc)
    # communicate() only returns once every holder of the stdout pipe closed it:
    # a surviving worker that inherited the pipe would make this time out.
    proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == expected_rc
  assert _wait_dead(pid), f"worker_binary {pid} outlived its run"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_worker_ends_when_run_is_signalled(sig):
  proc = _start("wait")
  try:
    pid = _read_worker_pid(proc)
    assert proc.stdout.readline().strip() == "READY"
    assert _alive(pid)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode != 0
  assert _wait_dead(pid), f"worker_binary {pid} outlived a {sig.name}"


def test_closed_runtime_restores_previous_context_and_is_idempotent(tff_runtime):
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
  from tff_idp import runtime
  before = context_stack_impl.context_stack.current
  rt = runtime.ExecutionRuntime(install_signal_handlers=False).start()
  pid = rt.worker_pid
  assert context_stack_impl.context_stack.current is not before
  rt.close()
  rt.close()
  assert context_stack_impl.context_stack.current is before
  assert _wait_dead(pid)
  with pytest.raises(RuntimeError, match="cannot be restarted"):
    rt.start()


def test_bad_device_is_rejected():
  from tff_idp import runtime
  with pytest.raises(ValueError, match="'cpu' or 'gpu'"):
    runtime.ExecutionRuntime(device="tpu")
