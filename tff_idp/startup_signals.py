"""SIGINT/SIGTERM while a command line starts: one line, exit 130/143, from the first import on.

``python -m experiments.<module>`` (or ``tff_idp.*``, ``datasets.*``) spends
seconds importing numpy, absl and TensorFlow before :func:`tff_idp.cli.launch`
installs the run's own handlers. Without a handler, a Ctrl-C there printed a
20-70 line ``KeyboardInterrupt`` traceback, or numpy's "IMPORTANT: PLEASE READ
THIS" broken-install message when it landed inside numpy's import, and a
SIGTERM killed the process silently with -15 (issue 50).

:func:`install_for_command_line` is the first statement of ``tff_idp``'s and
``datasets``' package ``__init__``, which Python runs before any line of the
entry module. It installs :func:`exit_at_once` for both signals only when the
process is one of the toolkit's command lines (``python -m`` of a module in
:data:`COMMAND_PACKAGES`). Nothing is written before the run's handlers
replace it, so there is nothing to clean up: the handler writes its one line
with a single ``write`` and ends the process with ``os._exit``, which no
callback can swallow and no half-done import can answer. A library user's
process is left alone. It imports only ``os``, ``signal`` and ``sys``.
"""
from __future__ import annotations

import os
import signal
import sys

COMMAND_PACKAGES = ("experiments", "tff_idp", "datasets")
"""Packages whose ``python -m`` modules are the toolkit's command lines (each hands over to
:func:`tff_idp.cli.entry`'s handlers; the developers' ``benchmarks`` keep Python's own)."""

MESSAGES = {
    signal.SIGINT: "interrupted while starting, before anything was written; run the same "
                   "command to start",
    signal.SIGTERM: "terminated while starting, before anything was written; run the same "
                    "command to start",
}


def exit_at_once(signum: int, frame) -> None:
  """Writes the signal's one line to stderr and exits 128 + signal, without unwinding."""
  del frame
  try:
    os.write(2, f"\n{MESSAGES.get(signum, 'stopped')}\n".encode())
  finally:
    os._exit(128 + signum)  # pylint: disable=protected-access


def is_installed(handler) -> bool:
  """Whether ``handler`` is this module's (the run's own handlers may replace it)."""
  return handler is exit_at_once


def command_module(argv: list[str]) -> str | None:
  """The module of ``python [options] -m <module>`` in ``argv`` (``sys.orig_argv``), else None."""
  for i, arg in enumerate(argv[1:], start=1):
    if arg == "-m":
      return argv[i + 1] if i + 1 < len(argv) else None
    if arg.startswith("-m") and len(arg) > 2:  # python -mexperiments.idp_fedavg
      return arg[2:]
    if arg == "-c" or not arg.startswith("-"):  # a script or -c: no module follows
      return None
  return None


def install_for_command_line() -> bool:
  """Installs :func:`exit_at_once` for SIGINT and SIGTERM in the toolkit's command lines.

  Only while Python is locating a ``-m`` module (``sys.argv[0] == "-m"``) of
  :data:`COMMAND_PACKAGES`, in the main thread, over handlers nobody else set.
  Returns whether it did.
  """
  module = command_module(list(getattr(sys, "orig_argv", [])))
  if (sys.argv[:1] != ["-m"] or module is None
      or module.split(".")[0] not in COMMAND_PACKAGES):
    return False
  try:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
      signal.signal(signal.SIGINT, exit_at_once)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
      signal.signal(signal.SIGTERM, exit_at_once)
  except ValueError:  # not the main thread
    return False
  return True
