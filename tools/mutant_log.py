"""Each mutant's test run, logged, and the tests that killed earlier mutants tried first.

``tools/mutmut_run.py`` has every mutant's child append one JSON line to
``mutants/mutant_times.jsonl``: the mutant, its wall and CPU seconds, how many
of its tests ran, and the test that failed first (its *killer*; none when it
survived). Two uses:

* **Killers first.** Mutants of one function tend to be killed by the same
  few tests, and mutmut stops a mutant at its first failing test. Before a
  mutant is handed to a worker, the tests that killed earlier mutants of the
  same function, then of the same module, go to the front of its list (the
  fastest of them first, a few of each). Only the order changes, never the
  set of tests, so a mutant's verdict is the same; a wrong guess costs the
  time of the guessed tests.
* **Where the time goes.** ``python tools/mutant_log.py [mutants/mutant_times.jsonl]``
  prints, per module, the mutants logged, their total and mean wall time,
  and the share killed by the first test they ran.

Plain Python (no mutmut, no TensorFlow), so its tests run in ``make test``.
"""
from __future__ import annotations

import collections
import json
import os
import pathlib
import sys
from typing import Iterable, Mapping, Optional

# How many earlier killers of the same function, and of the same module, go first.
FUNCTION_KILLERS = 3
MODULE_KILLERS = 2


def function_of(mutant_name: str) -> str:
  """mutmut's key of the function a mutant is in (``...x_fn__mutmut_7`` -> ``...x_fn``)."""
  return mutant_name.rsplit("__mutmut_", 1)[0]


def module_of(function_key: str) -> str:
  """The module of a function key (mutmut joins class and method with 'ǁ', never '.')."""
  return function_key.rsplit(".", 1)[0]


def append_record(path: pathlib.Path, record: Mapping) -> None:
  """Appends one JSON line with a single ``write`` (O_APPEND: workers never interleave)."""
  line = (json.dumps(dict(record), sort_keys=True) + "\n").encode()
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    os.write(fd, line)
  finally:
    os.close(fd)


def read_records(path: pathlib.Path) -> list[dict]:
  """Every complete record in the log (a torn last line, from a killed child, is skipped)."""
  records = []
  try:
    text = pathlib.Path(path).read_text()
  except FileNotFoundError:
    return records
  for line in text.splitlines():
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError:
      continue
  return records


class KillerHistory:
  """The killers seen so far, by function and by module, read from the log as it grows."""

  def __init__(self, path: pathlib.Path):
    self.path = pathlib.Path(path)
    self._offset = 0
    self.by_function: dict[str, collections.OrderedDict] = collections.defaultdict(
        collections.OrderedDict)
    self.by_module: dict[str, collections.OrderedDict] = collections.defaultdict(
        collections.OrderedDict)

  def add(self, mutant_name: str, killer: Optional[str]) -> None:
    if not killer:
      return
    function = function_of(mutant_name)
    for table, key in ((self.by_function, function), (self.by_module, module_of(function))):
      table[key][killer] = table[key].get(killer, 0) + 1

  def refresh(self) -> None:
    """Reads the records appended since the last call."""
    try:
      with open(self.path, "rb") as f:
        f.seek(self._offset)
        data = f.read()
    except FileNotFoundError:
      return
    end = data.rfind(b"\n") + 1  # a line still being written waits for the next call
    self._offset += end
    for line in data[:end].splitlines():
      try:
        record = json.loads(line)
      except json.JSONDecodeError:
        continue
      self.add(record.get("mutant", ""), record.get("killer"))

  def order(self, tests: Iterable[str], mutant_name: str,
            duration_by_test: Mapping[str, float]) -> list[str]:
    """``tests`` (already in their fallback order) with earlier killers moved to the front."""
    return killers_first(list(tests), self.by_function.get(function_of(mutant_name), {}),
                         self.by_module.get(module_of(function_of(mutant_name)), {}),
                         duration_by_test)


def killers_first(ordered: list[str], function_killers: Iterable[str],
                  module_killers: Iterable[str], duration_by_test: Mapping[str, float],
                  n_function: int = FUNCTION_KILLERS, n_module: int = MODULE_KILLERS) -> list[str]:
  """``ordered`` with up to ``n_function`` + ``n_module`` earlier killers in front.

  Only killers that are among ``ordered`` move (a mutant never runs a test it
  was not given); each group goes fastest first. The result is a permutation
  of ``ordered``.
  """
  available = set(ordered)

  def duration(test: str) -> float:
    return duration_by_test.get(test, float("inf"))

  front: list[str] = []
  for killers, limit in ((function_killers, n_function), (module_killers, n_module)):
    picked = sorted((t for t in killers if t in available and t not in front), key=duration)
    front += picked[:limit]
  chosen = set(front)
  return front + [t for t in ordered if t not in chosen]


def summary(records: list[dict]) -> str:
  """Per module: mutants, total and mean wall seconds, share killed by their first test."""
  by_module: dict[str, list[dict]] = collections.defaultdict(list)
  for record in records:
    by_module[module_of(function_of(record["mutant"]))].append(record)
  lines = [f"{'module':<48} {'mutants':>7} {'wall s':>8} {'mean s':>7} {'killed':>7} "
           f"{'by 1st':>7}"]
  total = 0.0
  rows = []
  for module, group in by_module.items():
    wall = sum(r["wall"] for r in group)
    killed = [r for r in group if r.get("killer")]
    first = sum(1 for r in killed if r.get("run") == 1)
    rows.append((wall, module, len(group), len(killed), first))
    total += wall
  for wall, module, n, killed, first in sorted(rows, reverse=True):
    share = f"{100 * first / killed:.0f}%" if killed else "-"
    lines.append(f"{module:<48} {n:>7} {wall:>8.0f} {wall / n:>7.2f} {killed:>7} {share:>7}")
  lines.append(f"{'all':<48} {len(records):>7} {total:>8.0f}")
  return "\n".join(lines)


if __name__ == "__main__":
  print(summary(read_records(pathlib.Path(sys.argv[1] if len(sys.argv) > 1
                                          else "mutants/mutant_times.jsonl"))))
