"""One run per output directory: an exclusive, non-blocking ``flock``.

Two runs writing the same directory interleave their metric rows and race on
checkpoint files. :class:`OutputDirLock` takes ``fcntl.flock(LOCK_EX |
LOCK_NB)`` on ``<output_dir>/.run.lock`` and writes the holder's PID into it;
a second run fails at once with :class:`tff_idp.errors.OutputDirError`
naming that PID. The kernel drops a ``flock`` when its file is closed, so the
lock goes away with the holding process even when it is killed; the lock
file itself stays (deleting it would let a third run lock a new file while a
second still holds the old one).

``flock`` locks belong to an open file description: two ``OutputDirLock``
objects on one directory conflict even within one process.
"""
from __future__ import annotations

import errno
import os
import socket
from typing import Optional

from tff_idp.errors import OutputDirError

try:
  import fcntl  # pylint: disable=g-import-not-at-top
except ImportError:  # pragma: no cover (not POSIX)
  fcntl = None

LOCK_FILE = ".run.lock"


class OutputDirLock:
  """Exclusive ownership of one output directory (a context manager).

  Args:
    directory: the run's output directory (created if missing).
  """

  def __init__(self, directory: str):
    self.directory = str(directory)
    self.path = os.path.join(self.directory, LOCK_FILE)
    self._fd: Optional[int] = None

  @property
  def held(self) -> bool:
    return self._fd is not None

  def acquire(self) -> "OutputDirLock":
    """Takes the lock or raises :class:`OutputDirError` at once (never waits)."""
    if self._fd is not None:
      return self
    try:
      os.makedirs(self.directory, exist_ok=True)
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
      raise OutputDirError(
          f"cannot use output directory {self.directory}: {e.strerror or e}. Make it "
          "writable or choose another --output_dir.") from e
    if fcntl is None:  # pragma: no cover
      self._fd = fd
      return self
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      holder = _read_holder(fd)
      os.close(fd)
      if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
        raise OutputDirError(
            f"another run ({holder}) is writing output directory {self.directory}; "
            "two runs in one directory would mix their metrics and checkpoints. Use "
            "another --output_dir, or wait until that run ends.") from None
      raise OutputDirError(
          f"cannot lock output directory {self.directory} ({e.strerror or e}); use "
          "another --output_dir on a file system that supports flock.") from e
    try:
      os.ftruncate(fd, 0)
      os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
    except OSError:
      pass  # the lock is what counts; the PID is only for the message
    self._fd = fd
    return self

  def release(self) -> None:
    """Drops the lock (idempotent). Closing the file releases the flock."""
    fd, self._fd = self._fd, None
    if fd is None:
      return
    try:
      os.ftruncate(fd, 0)
    except OSError:
      pass
    os.close(fd)

  def __enter__(self) -> "OutputDirLock":
    return self.acquire()

  def __exit__(self, *exc) -> None:
    self.release()


def _read_holder(fd: int) -> str:
  try:
    text = os.pread(fd, 200, 0).decode(errors="replace").split()
  except OSError:
    text = []
  if text and text[0].isdigit():
    return f"PID {text[0]}" + (f" on {text[1]}" if len(text) > 1 else "")
  return "PID unknown"
