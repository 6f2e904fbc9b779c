"""Each mutant's test run, logged, and the tests that killed earlier mutants tried first.

``tools/mutmut_run.py`` has every mutant's child append one JSON line to
``mutants/mutant_times.jsonl``: the mutant, its wall and CPU seconds, how many
of its tests ran, and the test that failed first (its *killer*; none when it
survived). Two uses:

* **Killers first.** Mutants of one function tend to be killed by the same
  few tests, and mutmut stops a mutant at its first failing test. Before a
  mutant is handed to a worker, the tests that killed earlier mutants of the
  same function, then of the same module, go to the front of its list (a
  few of each, by kills per second of their measured duration). Only the order changes, never the
  set of tests, so a mutant's verdict is the same; a wrong guess costs the
  time of the guessed tests.
* **Where the time goes.** ``python tools/mutant_log.py [mutants/mutant_times.jsonl]``
  prints, per module, the mutants logged, their total and mean wall time,
  and the share killed by the first test they ran.
  ``python tools/mutant_log.py --replay [mutants]`` replays the log: the test
  time of the killed mutants with and without the killers first.

Plain Python (no mutmut, no TensorFlow; the replay takes each mutant's test order from
tools/mutant_tests.py, as tools/mutmut_run.py does), so its tests run in ``make test``.
"""
from __future__ import annotations

import collections
import json
import os
import pathlib
import sys
from typing import Iterable, Mapping, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import mutant_tests  # pylint: disable=wrong-import-position

# How many earlier killers of the same function, and of the same module, go first.
FUNCTION_KILLERS = 3
MODULE_KILLERS = 2
# A killer's kills per second use at least this duration (a 1 ms test is not 100x better).
MIN_DURATION_S = 0.05


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


def killers_first(ordered: list[str], function_killers: Mapping[str, int] | Iterable[str],
                  module_killers: Mapping[str, int] | Iterable[str],
                  duration_by_test: Mapping[str, float],
                  n_function: int = FUNCTION_KILLERS, n_module: int = MODULE_KILLERS) -> list[str]:
  """``ordered`` with up to ``n_function`` + ``n_module`` earlier killers in front.

  Killers come with how many mutants each killed (a plain list counts one
  each) and go by kills per second of their measured duration, most first
  (ties: the faster), so that a test that killed many of a function's
  mutants goes before a fast one that killed a single argument check. Only
  killers among ``ordered`` move (a mutant never runs a test it was not
  given). The result is a permutation of ``ordered``.
  """
  available = set(ordered)

  def duration(test: str) -> float:
    return duration_by_test.get(test, float("inf"))

  def by_kill_rate(killers) -> list[str]:
    counts = killers if isinstance(killers, Mapping) else dict.fromkeys(killers, 1)
    return sorted(counts, key=lambda t: (-counts[t] / max(duration(t), MIN_DURATION_S),
                                         duration(t), t))

  front: list[str] = []
  for killers, limit in ((function_killers, n_function), (module_killers, n_module)):
    picked = [t for t in by_kill_rate(killers) if t in available and t not in front]
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


def replay(records: list[dict], tests_of, duration_by_test: Mapping[str, float],
           n_function: int = FUNCTION_KILLERS, n_module: int = MODULE_KILLERS) -> float:
  """Measured test seconds the logged killed mutants would spend with these killers first.

  ``tests_of(mutant)``: the mutant's tests in their fallback order. Each killed
  mutant costs the measured durations of its tests up to its killer, in the
  order :func:`killers_first` gives from the killers logged before it. An
  upper bound: a test moved in front of the killer may kill the mutant sooner.
  ``n_function = n_module = 0`` is the fallback order alone.
  """
  history = KillerHistory(pathlib.Path("/nonexistent"))
  total = 0.0
  for record in records:
    killer = record.get("killer")
    if not killer:
      continue
    function = function_of(record["mutant"])
    order = killers_first(tests_of(record["mutant"]), history.by_function.get(function, {}),
                          history.by_module.get(module_of(function), {}), duration_by_test,
                          n_function, n_module)
    if killer in order:
      total += sum(duration_by_test.get(t, 0.0) for t in order[:order.index(killer) + 1])
    history.add(record["mutant"], killer)
  return total


def _replay_run(folder: pathlib.Path) -> str:
  """The replay of a finished run's log, with and without earlier killers first."""
  stats = json.loads((folder / "mutmut-stats.json").read_text())
  durations = stats["duration_by_test"]
  by_function = stats["tests_by_mangled_function_name"]

  def tests_of(mutant: str) -> list[str]:
    function = function_of(mutant)
    covering, extra = mutant_tests.mirrored_tests(function, set(by_function.get(function, ())),
                                                set(durations))
    return mutant_tests.fastest_first(covering | extra, durations, covering)

  records = read_records(folder / "mutant_times.jsonl")
  killed = sum(1 for r in records if r.get("killer"))
  fallback = replay(records, tests_of, durations, 0, 0)
  first = replay(records, tests_of, durations)
  return (f"{killed} killed mutants, their tests up to the killer (measured durations): "
          f"{fallback:.0f} s fastest first, {first:.0f} s with earlier killers first")


def stopped_in_tests(marker_dir: pathlib.Path) -> str:
  """The children that died while a test ran under its own CPU limit (tools/mutmut_run.py,
  PerTestCpuLimit): each left a marker naming the mutant and the test (mutmut counts such a
  child as a timeout, i.e. killed)."""
  rows = []
  for marker in sorted(pathlib.Path(marker_dir).glob("*.json")):
    try:
      record = json.loads(marker.read_text())
    except (OSError, ValueError):
      continue
    rows.append(f"  {record.get('mutant')}: {record.get('test')}")
  if not rows:
    return ""
  return (f"{len(rows)} mutants stopped in a test that ran under its own CPU limit "
          "(timeouts):\n" + "\n".join(sorted(rows)))


if __name__ == "__main__":
  if sys.argv[1:2] == ["--replay"]:
    print(_replay_run(pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "mutants")))
  else:
    log = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "mutants/mutant_times.jsonl")
    print(summary(read_records(log)))
    stopped = stopped_in_tests(log.parent / "per_test_limit")
    if stopped:
      print("\n" + stopped)
