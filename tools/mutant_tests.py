"""Which tests a mutant runs, and in which order (plain Python, no mutmut).

Shared by tools/mutmut_run.py, which hands each mutant its tests, and by
``python tools/mutant_log.py --replay``, which replays a finished run's log
with the same order; neither imports the other.
"""
from __future__ import annotations

import pathlib
import re


def mirrored_tests(mangled: str, tests: set[str], all_tests=()) -> tuple[set[str], set[str]]:
  """``(covering, extra)``: the tests a mutant of ``mangled`` (mutmut's function key) runs.

  ``covering`` are the selected tests that called the function (tools/mutmut_run.py's
  module doc says how); ``extra`` the other tests of its mirrored file (from
  ``all_tests``), run after them: mutmut sees a call only when the Python
  function runs, and a TensorFlow trace or an ``lru_cache`` entry built by an
  earlier test hides the calls of every later test that reuses it.
  """
  match = re.match(r"(.*?)\.x(?:_|\u01c1)", mangled)
  if not match:
    return set(tests), set()
  parts = match.group(1).split(".")  # tff_idp.<pkg...>.<name>
  folder = "/".join(["tests", *parts[1:-1]])
  mirror = f"{folder}/test_{parts[-1]}.py"
  own = {t for t in tests if t.split("::")[0] == mirror}
  if own:
    return own, {t for t in all_tests if t.split("::")[0] == mirror} - own
  near = {t for t in tests if pathlib.PurePosixPath(t.split("::")[0]).parent.as_posix() == folder}
  return (near or set(tests)), set()


def fastest_first(tests, duration_by_test: dict[str, float], covering=None) -> list[str]:
  """``tests`` in the order a mutant should run them.

  The covering tests first (all of them when ``covering`` is None), then the
  rest; within each, files by their fastest test, then tests by duration.
  """
  def duration(test: str) -> float:
    return duration_by_test.get(test, float("inf"))

  def ordered(group_tests) -> list[str]:
    by_file: dict[str, list[str]] = {}
    for test in group_tests:
      by_file.setdefault(test.split("::")[0], []).append(test)
    files = sorted(by_file.values(), key=lambda group: (min(map(duration, group)), group[0]))
    return [test for group in files for test in sorted(group, key=lambda t: (duration(t), t))]

  tests = list(tests)
  first = [t for t in tests if covering is None or t in covering]
  return ordered(first) + ordered([t for t in tests if covering is not None and t not in covering])
