"""A SIGTERM or Ctrl-C that is never lost: the request is remembered as well as raised.

The command lines' SIGTERM handler (:mod:`tff_idp.cli`) raises
:class:`Terminated` so that cleanup runs, and records the request here. A
Python signal handler runs wherever the main thread happens to be; when that
is a garbage-collection callback (jax registers one), the exception is printed
as "Exception ignored" and dropped, and the run would go on to exit 0. The
round driver therefore calls :func:`check` before every round, which raises
:class:`Terminated` again for a request that was swallowed.

Ctrl-C (SIGINT) is remembered the same way (issue 33: 2 of 23 were swallowed,
one inside a round, one during the final writes, and the run exited 0): the
command lines' SIGINT handler calls :func:`request_interrupt` before raising
``KeyboardInterrupt``, and :func:`check` raises ``KeyboardInterrupt`` again
for one that was dropped. Only the command lines record requests; a library
user's Ctrl-C is Python's usual ``KeyboardInterrupt``.
"""
from __future__ import annotations

import sys

_requested = False
_interrupted = False


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
  _install_quiet_hook()


def request_interrupt() -> None:
  """Records a Ctrl-C (the command lines' SIGINT handler calls it before raising)."""
  global _interrupted  # pylint: disable=global-statement
  _interrupted = True
  _install_quiet_hook()


_previous_hook = [sys.__unraisablehook__]


def _install_quiet_hook() -> None:
  if sys.unraisablehook is not _quiet_unraisable_hook:
    _previous_hook[0] = sys.unraisablehook
    sys.unraisablehook = _quiet_unraisable_hook


def _quiet_unraisable_hook(unraisable) -> None:
  if isinstance(unraisable.exc_value, Terminated):
    return  # remembered by request(); check() raises it again
  if _interrupted and isinstance(unraisable.exc_value, KeyboardInterrupt):
    return  # remembered by request_interrupt(); check() raises it again
  _previous_hook[0](unraisable)


def requested() -> bool:
  """Whether SIGTERM has been received in this process."""
  return _requested


def interrupted() -> bool:
  """Whether a Ctrl-C has been recorded in this process."""
  return _interrupted


def check() -> None:
  """Raises :class:`Terminated` after a SIGTERM, ``KeyboardInterrupt`` after a Ctrl-C."""
  if _requested:
    raise Terminated()
  if _interrupted:
    raise KeyboardInterrupt()


def reset() -> None:
  """Forgets every request (tests that signal their own process)."""
  global _requested, _interrupted  # pylint: disable=global-statement
  _requested = False
  _interrupted = False
  if sys.unraisablehook is _quiet_unraisable_hook:
    sys.unraisablehook = _previous_hook[0]
