"""A SIGTERM that is never lost: the request is remembered as well as raised.

The command lines' SIGTERM handler (:mod:`tff_idp.cli`) raises
:class:`Terminated` so that cleanup runs, and records the request here. A
Python signal handler runs wherever the main thread happens to be; when that
is a garbage-collection callback (jax registers one), the exception is printed
as "Exception ignored" and dropped, and the run would go on to exit 0. The
round driver therefore calls :func:`check` before every round, which raises
:class:`Terminated` again for a request that was swallowed.
"""
from __future__ import annotations

import sys

_requested = False


class Terminated(BaseException):
  """SIGTERM was received: unwind (``finally`` blocks run) and exit 143."""


def request() -> None:
  """Records a termination request (the SIGTERM handler calls it before raising).

  Also silences Python's "Exception ignored in ..." report of a
  :class:`Terminated` dropped by a callback: it is raised again at the next
  :func:`check`, so the user sees the one "terminated" line only.
  """
  global _requested  # pylint: disable=global-statement
  _requested = True
  if sys.unraisablehook is not _quiet_unraisable_hook:
    _previous_hook[0] = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable_hook


_previous_hook = [sys.__unraisablehook__]


def _quiet_unraisable_hook(unraisable) -> None:
  if isinstance(unraisable.exc_value, Terminated):
    return  # remembered by request(); check() raises it again
  _previous_hook[0](unraisable)


def requested() -> bool:
  """Whether SIGTERM has been received in this process."""
  return _requested


def check() -> None:
  """Raises :class:`Terminated` if SIGTERM has been received (between rounds)."""
  if _requested:
    raise Terminated()


def reset() -> None:
  """Forgets a request (tests that send SIGTERM to their own process)."""
  global _requested  # pylint: disable=global-statement
  _requested = False
  if sys.unraisablehook is _quiet_unraisable_hook:
    sys.unraisablehook = _previous_hook[0]
