"""A memo of dp-accounting's two costliest pure functions, for mutation runs only.

Under ``make mutation`` every mutant of the calibration modules re-runs tests
that spend almost all their time inside dp-accounting (SAMPLE's mirrored file:
97% of its 47 s in the RDP of the subsampled Gaussian at fractional orders,
Mironov et al. 2019 Sec. 3.3, and in building the PLD of the Gaussian
mechanism). A mutant that does not change what the code asks the accountant
asks it exactly what the unmutated code asked. So ``tools/mutmut_run.py``
records both functions' answers during mutmut's clean run of the tests and the
fork server hands that record to every mutant.

This is sound because the memoised functions belong to dp-accounting, which is
never mutated, and are pure: the same arguments give the same value. Keys hold
each argument's exact value *and* type (a float32 rate would compute in float32,
so it is not the float64 rate's entry); a call with any other kind of argument
goes straight to dp-accounting. A mutant that asks something new gets a fresh
answer, so no verdict can depend on the memo, only the time it takes
(tests/tools/test_accountant_memo.py checks values and that a shared PLD object
is never changed by composing it). Timeouts stay generous: mutmut measures each
test's duration in its stats phase, which runs without the memo.

Never used outside the mutation tooling: the toolkit itself always asks the
accountant afresh.
"""
from __future__ import annotations

import enum
import fcntl
import importlib
import numbers
import os
import pathlib
import pickle
from typing import Any, Callable, Hashable

_SCALAR_TYPES = (bool, int, float, str, type(None))
# (module, function, memo table) of each memoised dp-accounting function.
_MEMOISED = (("dp_accounting.rdp.rdp_privacy_accountant", "_compute_log_a", "log_a"),
             ("dp_accounting.pld.privacy_loss_distribution", "from_gaussian_mechanism",
              "gaussian_pld"))


def _key_part(value: Any) -> Hashable:
  """``value`` with its type, or raise TypeError if it is not a plain scalar or enum."""
  if isinstance(value, enum.Enum) or type(value) in _SCALAR_TYPES:
    return (type(value).__qualname__, value)
  if isinstance(value, numbers.Number) and type(value).__module__ == "numpy" and value.ndim == 0:
    return (type(value).__qualname__, value.item())
  raise TypeError(f"not memoised: {type(value).__qualname__}")


def call_key(args: tuple, kwargs: dict) -> Hashable:
  """The memo key of one call: every argument's type and exact value."""
  return (tuple(_key_part(a) for a in args),
          tuple(sorted((name, _key_part(v)) for name, v in kwargs.items())))


class AccountantMemo:
  """Answers of ``_compute_log_a`` and ``from_gaussian_mechanism`` by exact arguments."""

  def __init__(self, entries: dict[str, dict] | None = None, serve: bool = True):
    """``serve=False`` records every answer but never hands one back (the stats phase,
    whose measured durations set the mutants' timeouts, must not run faster for it)."""
    self.serve = serve
    self.entries: dict[str, dict] = {"log_a": {}, "gaussian_pld": {}}
    for table, values in (entries or {}).items():
      self.entries.setdefault(table, {}).update(values)
    self.hits = 0
    self.misses = 0

  def memoised(self, table: str, function: Callable) -> Callable:
    """``function`` answering from, and recording into, ``self.entries[table]``."""
    store = self.entries.setdefault(table, {})

    def wrapper(*args, **kwargs):
      try:
        key = call_key(args, kwargs)
      except TypeError:
        return function(*args, **kwargs)
      if self.serve and key in store:
        self.hits += 1
        return store[key]
      self.misses += 1
      value = store[key] = function(*args, **kwargs)
      return value

    wrapper.__wrapped__ = function
    return wrapper

  def install(self) -> None:
    """Route dp-accounting's module-level calls of both functions through the memo."""
    for module_name, name, table in _MEMOISED:
      module = importlib.import_module(module_name)
      function = getattr(module, name)
      function = getattr(function, "__wrapped__", function)
      setattr(module, name, self.memoised(table, function))

  @staticmethod
  def uninstall() -> None:
    """Put dp-accounting's own functions back."""
    for module_name, name, _ in _MEMOISED:
      module = importlib.import_module(module_name)
      function = getattr(module, name)
      setattr(module, name, getattr(function, "__wrapped__", function))

  @classmethod
  def load(cls, path: pathlib.Path) -> "AccountantMemo":
    """The memo saved at ``path`` (an empty one if there is none)."""
    if not path.exists():
      return cls()
    with open(path, "rb") as f:
      return cls(pickle.load(f))

  def save(self, path: pathlib.Path) -> None:
    """Merge this memo into the one at ``path`` (written atomically).

    Processes saving at once (the parallel stats phase's children) take turns
    under a lock on ``<path>.lock``, so no one's entries are lost.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f"{path.name}.lock"), "w") as lock:
      fcntl.lockf(lock, fcntl.LOCK_EX)
      merged = AccountantMemo.load(path)
      for table, values in self.entries.items():
        merged.entries.setdefault(table, {}).update(values)
      partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
      with open(partial, "wb") as f:
        pickle.dump(merged.entries, f, protocol=pickle.HIGHEST_PROTOCOL)
      os.replace(partial, path)
