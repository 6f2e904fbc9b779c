"""tools/mutant_tests.py: which tests a mutant runs (its mirrored file first) and in which order."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import mutant_tests  # pylint: disable=g-import-not-at-top,wrong-import-position

FN = "tff_idp.engine.sampling.x_poisson_mask"
MIRROR = "tests/engine/test_sampling.py"


def test_a_mutant_runs_its_mirrored_file_covering_tests_first_then_the_rest_of_that_file():
  covering = {f"{MIRROR}::test_a", "tests/engine/test_other.py::test_b", "tests/x/test_y.py::t"}
  all_tests = covering | {f"{MIRROR}::test_c", "tests/engine/test_other.py::test_d"}
  own, extra = mutant_tests.mirrored_tests(FN, covering, all_tests)
  assert own == {f"{MIRROR}::test_a"}
  assert extra == {f"{MIRROR}::test_c"}


def test_without_a_mirrored_caller_the_folder_then_every_caller():
  near = {"tests/engine/test_other.py::test_b", "tests/x/test_y.py::t"}
  assert mutant_tests.mirrored_tests(FN, near) == ({"tests/engine/test_other.py::test_b"}, set())
  far = {"tests/x/test_y.py::t", "tests/z/test_w.py::u"}
  assert mutant_tests.mirrored_tests(FN, far) == (far, set())
  assert mutant_tests.mirrored_tests("not_a_mutmut_key", far) == (far, set())


def test_covering_tests_go_first_files_by_their_fastest_test_then_tests_by_duration():
  durations = {"a.py::slow": 3.0, "a.py::fast": 0.1, "b.py::mid": 0.5, "c.py::x": 0.01}
  tests = ["a.py::slow", "b.py::mid", "a.py::fast", "c.py::x", "c.py::unmeasured"]
  assert mutant_tests.fastest_first(tests, durations) == [
      "c.py::x", "c.py::unmeasured", "a.py::fast", "a.py::slow", "b.py::mid"]
  covering = {"b.py::mid", "a.py::slow"}
  assert mutant_tests.fastest_first(tests, durations, covering) == [
      "b.py::mid", "a.py::slow", "c.py::x", "c.py::unmeasured", "a.py::fast"]
