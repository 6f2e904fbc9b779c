"""Package exports loaded on first use (PEP 562), so importing a package stays cheap.

A package lists ``{name: module}`` and sets ``__getattr__ = lazy_exports.getattr_for(
__name__, EXPORTS)``: ``package.name`` (and ``from package import name``) then
imports ``module`` the first time, e.g. TensorFlow only where a TensorFlow
module is asked for.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def getattr_for(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
  """The module-level ``__getattr__`` of ``package`` for ``exports`` (name -> module)."""

  def __getattr__(name: str) -> Any:  # pylint: disable=invalid-name
    module = exports.get(name)
    if module is None:
      raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    setattr(sys.modules[package], name, value)  # later lookups skip this function
    return value

  return __getattr__
