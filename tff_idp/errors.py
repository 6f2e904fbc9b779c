"""One base class for every error the toolkit raises on purpose.

Entry modules (``experiments.*``, ``datasets.build``) catch
:class:`TffIdpError` (and ``ValueError`` for argument checks) and print one
line, ``error: <message>``, with a non-zero exit instead of a traceback. Each
subclass's message says what to change.

This module imports nothing heavy (no TensorFlow), so the accounting code
and the dataset builders can use it.
"""
from __future__ import annotations


class TffIdpError(Exception):
  """Base class of the toolkit's own errors (bad input, refused resume, ...)."""


class ToolkitValueError(TffIdpError, ValueError):
  """A bad argument or flag value; the message says which and what to change."""


class ClientInputError(TffIdpError, TypeError):
  """A client input a process cannot account for (e.g. SCALE data without its clip scale)."""


class OutputDirError(TffIdpError, OSError):
  """An output directory that cannot be used (unwritable, or locked by another run)."""


class ComputationRefusedError(TffIdpError, ValueError):
  """A TFF computation's own check refused its input in the worker (e.g. a clip scale out of range).

  The worker reports it as a gRPC ``INTERNAL`` error; the message is the
  check's own (what to change), not gRPC's wrapping.
  """
