"""A quiet console for command-line runs: TensorFlow's log lines off by default.

TensorFlow's C++ runtime logs from the Python process as well as from TFF's
worker: about ten lines at import (oneDNN, CUDA stubs, cuDNN/cuFFT/cuBLAS
factory registration, TensorRT, CPU features) and two grappler lines
("Starting new session") every time a TFF process is built. The C++ level is
read once, when TensorFlow's shared library loads, so it has to be set
*before* ``import tensorflow``. :func:`quiet_tensorflow` does that; the
``experiments`` and ``benchmarks`` packages call it from their
``__init__``, which Python runs before any entry module's own imports, so
every entry module shares this one place.

Library use is quiet too: ``import tff_idp`` (and ``import datasets``)
call :func:`quiet_tensorflow` with ``library=True``, which changes only what
the user has not set: ``TF_CPP_MIN_LOG_LEVEL`` if unset, and the
``tensorflow`` logger if its level is still unset. It cannot quieten the
C++ import lines if TensorFlow was imported first.

``--verbose`` on the command line (or ``TFF_IDP_VERBOSE=1``) keeps
TensorFlow's default logging. A ``TF_CPP_MIN_LOG_LEVEL`` the user set
explicitly is respected either way.

No TensorFlow import here.
"""
from __future__ import annotations

import logging
import os
import sys
from typing import Optional, Sequence

VERBOSE_FLAG = "verbose"
VERBOSE_ENV = "TFF_IDP_VERBOSE"
# 3 = FATAL only: also hides the cuDNN/cuFFT/cuBLAS "Unable to register
# factory" E-lines that every CPU-only TF 2.14 import prints.
QUIET_CPP_LEVEL = "3"


def verbose_requested(argv: Optional[Sequence[str]] = None) -> bool:
  """True when ``--verbose`` (absl spelling: ``--verbose[=true|1]``) or the env asks."""
  if os.environ.get(VERBOSE_ENV, "").lower() in ("1", "true", "yes"):
    return True
  argv = sys.argv if argv is None else argv
  for arg in argv[1:]:
    if arg == "--":
      break
    if arg in (f"--{VERBOSE_FLAG}", f"-{VERBOSE_FLAG}"):
      return True
    if arg.startswith(f"--{VERBOSE_FLAG}="):
      return arg.split("=", 1)[1].lower() in ("1", "true", "t", "yes")
  return False


def quiet_tensorflow(argv: Optional[Sequence[str]] = None, library: bool = False) -> bool:
  """Silences TensorFlow's C++ and Python logging unless verbose; returns True if quiet.

  Call before TensorFlow is imported (the C++ level is read at load time).
  The Python-side loggers (``tensorflow``, absl) are lowered to errors and
  warnings respectively, so library warnings that matter still show.
  ``library=True`` (an ``import``, not a command line): a ``tensorflow``
  logger level the user set is kept and absl's verbosity is left alone;
  ``--verbose`` in ``sys.argv`` (an entry module imports the library first)
  and ``TFF_IDP_VERBOSE`` still keep TensorFlow's logs.
  """
  if verbose_requested(argv):  # a command line's --verbose also reaches library imports
    return False
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", QUIET_CPP_LEVEL)
  tf_logger = logging.getLogger("tensorflow")
  if library:
    if tf_logger.level == logging.NOTSET:
      tf_logger.setLevel(logging.ERROR)
    return True
  # Pre-set: a later `import tensorflow` keeps the level of an existing logger.
  tf_logger.setLevel(logging.ERROR)
  try:
    from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
    absl_logging.set_verbosity(absl_logging.WARNING)
  except ImportError:  # absl is a dependency; be robust anyway.
    pass
  return True


_noted: set = set()


def note(message: str, key: Optional[str] = None) -> bool:
  """Prints ``note: <message>`` on stderr once per process (per ``key``, default the text).

  For advice the user may act on (issue 34: the jemalloc notice went through
  Python logging and absl, and printed twice in two formats). Returns True
  when it printed.
  """
  key = message if key is None else key
  if key in _noted:
    return False
  _noted.add(key)
  print(f"note: {message}", file=sys.stderr, flush=True)
  return True


def warning(message: str) -> None:
  """Prints ``warning: <message>`` on stderr: a setting that will likely spoil the run."""
  print(f"warning: {message}", file=sys.stderr, flush=True)
