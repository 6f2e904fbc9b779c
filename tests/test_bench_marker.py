"""Tests marked ``bench`` leave make test for make bench, and each says what covers it there.

``make test`` (what CI runs) must stay within 20 minutes on 2 cores, so a few long
end-to-end checks run in ``make bench`` instead. A marked test that no target runs,
or one moved without naming the faster test that covers its property in make test,
would be a check that silently stopped running.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARK = re.compile(r"pytest\.mark\.bench\b")


def _recipe(makefile: str, target: str) -> str:
  match = re.search(rf"^{target}:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.M)
  assert match, f"no {target} target in the Makefile"
  return match.group(1)


def test_make_test_leaves_bench_tests_out_and_make_bench_runs_them():
  makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
  assert re.search(r"^TEST_MARKERS \?= not bench$", makefile, re.M)
  assert '-m "$(TEST_MARKERS)"' in _recipe(makefile, "test")
  assert "-m bench" in _recipe(makefile, "bench").splitlines()[1]
  assert "not bench" in _recipe(makefile, "test-fast")
  assert "bench:" in (ROOT / "setup.cfg").read_text(encoding="utf-8")


def test_every_bench_test_names_what_covers_it_in_make_test():
  marked = []
  for path in sorted((ROOT / "tests").rglob("test_*.py")):
    if path.name == pathlib.Path(__file__).name:
      continue
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
      if MARK.search(line):
        marked.append(path.name)
        window = " ".join(lines[max(0, n - 8):n + 3])
        assert "in make test" in window, f"{path.relative_to(ROOT)}:{n + 1}"
  assert len(marked) >= 5, marked  # the moved checks (golden runs count once)
