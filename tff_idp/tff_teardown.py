"""Drops TFF's import-time default context at exit, while the interpreter is intact.

``import tensorflow_federated`` installs a stock C++ context whose
``ServiceManager.__del__`` uses ``subprocess``; if that object is only
collected during interpreter teardown, ``subprocess`` is already gone and
Python prints "Exception ignored in ... ServiceManager.__del__ ... 'NoneType'
object has no attribute 'Popen'" after the program's last line (seen after
one-line flag errors, and after library use outside
``tff_idp.runtime.execution_context``, e.g. ``train_record_dp_sgd``). If the
stock context started a worker, collecting it now also stops that worker.

Registered by ``import tff_idp`` (every toolkit import), so library users get
it too. Imports nothing: it acts only if TFF was imported.
"""
from __future__ import annotations

import atexit
import gc
import sys

__all__ = ["release_stock_context"]

_STACK = "tensorflow_federated.python.core.impl.context_stack.context_stack_impl"
_ERROR = "tensorflow_federated.python.core.impl.context_stack.runtime_error_context"


def release_stock_context() -> None:
  """Replaces TFF's default context by its error-raising one and collects the old one now."""
  stack_module, error_module = sys.modules.get(_STACK), sys.modules.get(_ERROR)
  if stack_module is None or error_module is None:
    return
  try:
    stack_module.context_stack.set_default_context(error_module.create_runtime_error_context())
    gc.collect()
  except Exception:  # pylint: disable=broad-except
    pass  # best effort at exit: never turn a clean exit into an error


atexit.register(release_stock_context)
