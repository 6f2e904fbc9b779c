"""Process helpers shared by the tests that start TFF workers."""
import time


def alive(pid: int) -> bool:
  """True if ``pid`` runs and is not a zombie."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split(")")[-1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def wait_dead(pid: int, timeout: float = 15.0) -> bool:
  """Waits up to ``timeout`` seconds for ``pid`` to end; True if it did."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if not alive(pid):
      return True
    time.sleep(0.1)
  return False
