"""Progress on long work: a bar on a terminal, plain lines in a log (issue 51).

A tqdm bar redraws itself with carriage returns. Written to a file or a pipe
(``make demo > log``), every redraw stays in the log: hundreds of kilobytes
of ``\\r`` updates. :func:`progress` gives a tqdm bar when stderr is a
terminal, and otherwise a :class:`PlainProgress` that prints one plain line
every tenth of the work (and at the end), with the same ``update`` /
``set_postfix`` / ``close`` calls.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Optional, TextIO

import tqdm


class PlainProgress:
  """tqdm's interface, printing ``desc: n/total unit (postfix, elapsed)`` lines, no ``\\r``."""

  def __init__(self, total: int, desc: str = "", unit: str = "it", initial: int = 0,
               file: Optional[TextIO] = None, lines: int = 10):
    self.total, self.desc, self.unit, self.n = int(total), desc, unit, int(initial)
    self.file = file
    self.every = max(1, -(-self.total // max(1, lines)))  # ceil(total / lines)
    self.postfix = ""
    self._start = time.monotonic()
    self._printed_at = self.n
    self._closed = False

  def update(self, n: int = 1) -> None:
    self.n += n
    if self.n - self._printed_at >= self.every and self.n < self.total:
      self._print()

  def set_postfix(self, postfix: Any = None, **kwargs) -> None:
    items = dict(postfix or {}, **kwargs)
    self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

  def _print(self) -> None:
    self._printed_at = self.n
    extra = f", {self.postfix}" if self.postfix else ""
    print(f"{self.desc + ': ' if self.desc else ''}{self.n}/{self.total} {self.unit}s"
          f"{extra}, {time.monotonic() - self._start:.0f} s",
          file=self.file or sys.stderr, flush=True)

  def close(self) -> None:
    if not self._closed and self.n > self._printed_at:
      self._print()
    self._closed = True


class _Off:
  """No progress at all (``enabled=False``)."""

  def update(self, n: int = 1) -> None:
    del n

  def set_postfix(self, postfix: Any = None, **kwargs) -> None:
    del postfix, kwargs

  def close(self) -> None:
    pass


def progress(total: int, desc: str = "", unit: str = "it", initial: int = 0,
             enabled: bool = True, leave: bool = True, stream: Optional[TextIO] = None):
  """A progress reporter for ``total`` steps: a tqdm bar on a terminal, else plain lines."""
  if not enabled:
    return _Off()
  stream = stream or sys.stderr
  if getattr(stream, "isatty", lambda: False)():
    return tqdm.tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=leave,
                     dynamic_ncols=True, file=stream)
  return PlainProgress(total, desc, unit, initial, file=stream)
