"""The suite asserts no wall time (issue 32): speed goals live in benchmarks/, as ratios.

A bound on seconds fails on unchanged code when the machine is loaded. Hangs
are caught by subprocess timeouts, which fail only on a real hang.
"""
import pathlib
import re

TESTS = pathlib.Path(__file__).resolve().parent
PATTERN = re.compile(r"assert[^\n]*(perf_counter|monotonic|time\.time)\(\)")


def test_no_test_asserts_a_wall_time():
  offenders = [f"{p.relative_to(TESTS)}:{n}" for p in TESTS.rglob("*.py")
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
               if PATTERN.search(line) and p.name != pathlib.Path(__file__).name]
  assert not offenders, offenders
