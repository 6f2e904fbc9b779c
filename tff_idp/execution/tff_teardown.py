"""Drops TFF's import-time default context at exit, while the interpreter is intact.

``import tensorflow_federated`` installs a stock C++ context whose
``ServiceManager.__del__`` uses ``subprocess``; if that object is only
collected during interpreter teardown, ``subprocess`` is already gone and
Python prints "Exception ignored in ... ServiceManager.__del__ ... 'NoneType'
object has no attribute 'Popen'" after the program's last line (seen after
one-line flag errors, and after library use outside
``tff_idp.execution.runtime.execution_context``, e.g. ``train_record_dp_sgd``). If the
stock context started a worker, collecting it now also stops that worker.

The stock worker is stopped here, by its PID, with SIGTERM (SIGKILL after 5 s),
before TFF's own ``__del__`` would send it SIGINT and wait without a limit: a
process started in the background by a non-interactive shell inherits SIGINT
as *ignored*, so that ``__del__`` waited forever and the run never exited
(seen in a CI-like run; tested with SIGINT ignored).

Registered by ``import tff_idp`` (every toolkit import), so library users get
it too. Imports nothing heavy: it acts only if TFF was imported.
"""
from __future__ import annotations

import atexit
import gc
import subprocess
import sys

__all__ = ["release_stock_context"]

_STACK = "tensorflow_federated.python.core.impl.context_stack.context_stack_impl"
_ERROR = "tensorflow_federated.python.core.impl.context_stack.runtime_error_context"


_STOP_TIMEOUT_S = 5.0


def _stop_stock_workers() -> None:
  """Stops every worker a stock ``ServiceManager`` of this process started, by PID."""
  for obj in gc.get_objects():
    if type(obj).__name__ != "ServiceManager" or "executor_factory" not in type(obj).__module__:
      continue
    proc = getattr(obj, "_process", None)
    if isinstance(proc, subprocess.Popen):
      if proc.poll() is None:
        proc.terminate()
        try:
          proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
          proc.kill()
          proc.wait(timeout=_STOP_TIMEOUT_S)
      obj._process = None  # pylint: disable=protected-access  (its __del__ has nothing left to do)


def release_stock_context() -> None:
  """Stops the stock workers, swaps in TFF's error-raising context, collects the old one."""
  stack_module, error_module = sys.modules.get(_STACK), sys.modules.get(_ERROR)
  if stack_module is None or error_module is None:
    return
  try:
    _stop_stock_workers()
    stack_module.context_stack.set_default_context(error_module.create_runtime_error_context())
    gc.collect()
  except Exception:  # pylint: disable=broad-except
    pass  # best effort at exit: never turn a clean exit into an error


atexit.register(release_stock_context)
