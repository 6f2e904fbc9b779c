"""tools/mutmut_run.py's wiring into mutmut (skipped where mutmut is not installed, as in CI).

The memo's own wiring is in test_accountant_memo.py; here the per-mutant log,
the memo recorded in the stats phase, and the clean run skipped only after
this invocation's full stats phase.
"""
import importlib.util
import json
import os
import sys
import types

import pytest
from dp_accounting.rdp import rdp_privacy_accountant

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def mutmut_run():
  pytest.importorskip("mutmut.runners.harness")
  sys.path.insert(0, os.path.join(ROOT, "tools"))
  spec = importlib.util.spec_from_file_location(
      "mutmut_run", os.path.join(ROOT, "tools", "mutmut_run.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_each_mutant_run_is_logged_with_its_first_failing_test(tmp_path, monkeypatch, mutmut_run):
  """A mutant's child appends one record: tests reported, the killer, the exit code; the
  clean run (no mutant) is not logged. Bugs caught: a killer not recorded, or a later
  failure (or a test's teardown report) recorded instead of the first failing test."""
  from mutmut.runners import harness  # pylint: disable=g-import-not-at-top

  def fake_execute(self, params, plugins=()):
    for nodeid, failed in (("t::a", False), ("t::b", True), ("t::b", True), ("t::c", True)):
      for plugin in plugins:
        if hasattr(plugin, "pytest_runtest_logreport"):
          plugin.pytest_runtest_logreport(types.SimpleNamespace(nodeid=nodeid, failed=failed))
    return 1

  monkeypatch.setattr(harness.PytestRunner, "execute_pytest", fake_execute)
  monkeypatch.setattr(harness.PytestRunner, "run_tests",
                      lambda self, *, mutant_name, tests: self.execute_pytest(list(tests)))
  log = tmp_path / "log.jsonl"
  mutmut_run._install_mutant_log(log, per_test_limits=False)  # pylint: disable=protected-access
  runner = harness.PytestRunner.__new__(harness.PytestRunner)
  assert runner.run_tests(mutant_name="m.x_f__mutmut_3", tests=["t::a", "t::b", "t::c"]) == 1
  assert runner.run_tests(mutant_name=None, tests=[]) == 1
  records = [json.loads(line) for line in log.read_text().splitlines()]
  assert len(records) == 1
  assert {k: records[0][k] for k in ("mutant", "run", "of", "killer", "exit")} == {
      "mutant": "m.x_f__mutmut_3", "run": 3, "of": 3, "killer": "t::b", "exit": 1}
  assert "execute_pytest" not in vars(runner)  # the recorder is gone after the run


def test_the_stats_phase_records_the_memo(tmp_path, monkeypatch, mutmut_run):
  """With the clean run skipped, the stats phase is where the mutants' memo comes from."""
  from mutmut.runners import harness  # pylint: disable=g-import-not-at-top
  accountant_memo = sys.modules["accountant_memo"]

  def fake_run_stats(self, *, tests):
    for _ in range(2):
      rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.03, 1.3, [3.5])  # pylint: disable=protected-access
    return 0

  monkeypatch.setattr(harness.PytestRunner, "run_stats", fake_run_stats)
  monkeypatch.setattr(harness.PytestRunner, "run_tests", lambda self, **kw: 0)
  monkeypatch.setattr(harness.PytestRunner, "warm_up", lambda self: None)
  path = tmp_path / "memo.pkl"
  mutmut_run._install_accountant_memo(path)  # pylint: disable=protected-access
  runner = harness.PytestRunner.__new__(harness.PytestRunner)
  assert runner.run_stats(tests=[]) == 0
  assert not hasattr(rdp_privacy_accountant._compute_log_a, "__wrapped__")  # pylint: disable=protected-access
  assert list(accountant_memo.AccountantMemo.load(path).entries["log_a"].values()) == [
      rdp_privacy_accountant._compute_log_a(0.03, 1.3, 3.5)]  # pylint: disable=protected-access


def test_the_clean_run_is_skipped_only_after_a_full_stats_phase(monkeypatch, mutmut_run):
  """Stats loaded from an earlier run, or collected for new tests only, leave mutmut's
  clean run in place; a full stats phase in this invocation replaces it."""
  import mutmut.__main__ as mm  # pylint: disable=g-import-not-at-top
  from mutmut.workers import isolation  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(mm, "run_stats_collection", lambda runner, tests=None: None)
  for runner_class in (isolation.ForkServerRunner, isolation.ForkRunner):
    monkeypatch.setattr(runner_class, "run_clean_tests", lambda self, tests: 7)
  mutmut_run._install_clean_run_skip()  # pylint: disable=protected-access
  runner = isolation.ForkServerRunner.__new__(isolation.ForkServerRunner)
  assert runner.run_clean_tests([]) == 7
  mm.run_stats_collection(None, tests=["t::new"])
  assert runner.run_clean_tests([]) == 7
  mm.run_stats_collection(None)
  assert runner.run_clean_tests([]) == 0


def test_the_selection_is_split_into_files_longest_first(tmp_path, mutmut_run):
  (tmp_path / "tests" / "pkg").mkdir(parents=True)
  (tmp_path / "tests" / "pkg" / "test_long.py").write_text("x = 1\n" * 30)
  (tmp_path / "tests" / "pkg" / "test_short.py").write_text("x = 1\n" * 3)
  (tmp_path / "tests" / "pkg" / "helper.py").write_text("x = 1\n" * 99)
  (tmp_path / "tests" / "test_mid.py").write_text("x = 1\n" * 10)
  files = mutmut_run.selected_test_files(["tests/pkg", "tests/test_mid.py", "tests/pkg"],
                                         tmp_path)
  assert files == ["tests/pkg/test_long.py", "tests/test_mid.py", "tests/pkg/test_short.py"]


def test_two_processes_claim_every_file_exactly_once(tmp_path, mutmut_run):
  """The parallel stats phase's queue: no file run twice, none skipped. Bug caught: the
  counter read and written without the lock (two children running the same file)."""
  queue = mutmut_run.FileQueue(tmp_path / "queue", 400)

  def claim_all():
    taken = []
    while (index := queue.claim()) is not None:
      taken.append(index)
    return taken

  first, second = mutmut_run.run_concurrently([claim_all, claim_all])
  assert sorted(first + second) == list(range(400))
  assert queue.claim() is None


def test_a_failing_child_is_an_error_and_results_come_back_in_order(mutmut_run):
  assert mutmut_run.run_concurrently([lambda: 1, lambda: {"a": [2]}]) == [1, {"a": [2]}]
  with pytest.raises(ChildProcessError, match="ZeroDivisionError"):
    mutmut_run.run_concurrently([lambda: 1, lambda: 1 / 0])


def test_the_children_stats_merge_into_one_record(mutmut_run):
  """Every child's tests and durations are kept, and a failing child fails the phase."""
  a = {"exit_code": 0, "tests_by_mangled_function_name": {"f": ["t1"], "g": ["t1"]},
       "duration_by_test": {"t1": 0.5}, "stats_time": 1.0, "function_dependencies": {"f": ["g"]}}
  b = {"exit_code": 1, "tests_by_mangled_function_name": {"f": ["t2"]},
       "duration_by_test": {"t2": 0.25}, "stats_time": 2.0, "function_dependencies": {}}
  merged = mutmut_run.merge_stats([a, b])
  assert merged == {"exit_code": 1, "tests_by_mangled_function_name": {"f": ["t1", "t2"],
                                                                        "g": ["t1"]},
                    "duration_by_test": {"t1": 0.5, "t2": 0.25}, "stats_time": 3.0,
                    "function_dependencies": {"f": ["g"]}}


def test_a_queued_stats_child_runs_each_claimed_file_and_records_the_memo_once(
    tmp_path, mutmut_run):
  """A file with no selected test (pytest's 5) is not a failure; any other code is."""
  ran = []

  class Runner:
    def run_stats(self, *, tests):
      ran.append(tests)
      rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.05, 1.1, [2.5])  # pylint: disable=protected-access
      return {"a.py": 0, "b.py": 5, "c.py": 1}[tests[0]]

  memo_path = tmp_path / "memo.pkl"
  queue = mutmut_run.FileQueue(tmp_path / "queue", 2)
  runner = mutmut_run._QueuedStatsRunner(Runner(), ["a.py", "b.py"], queue, memo_path)  # pylint: disable=protected-access
  assert runner.run_stats(tests=[]) == 0
  assert ran == [["a.py"], ["b.py"]]
  assert len(sys.modules["accountant_memo"].AccountantMemo.load(memo_path).entries["log_a"]) == 1
  queue = mutmut_run.FileQueue(tmp_path / "queue", 3)
  assert mutmut_run._QueuedStatsRunner(Runner(), ["a.py", "b.py", "c.py"], queue, None).run_stats(  # pylint: disable=protected-access
      tests=[]) == 1


def test_max_children_is_read_from_the_command_line(mutmut_run):
  assert mutmut_run._max_children(["run", "--max-children", "2"]) == 2  # pylint: disable=protected-access
  assert mutmut_run._max_children(["run", "--max-children=3", "x"]) == 3  # pylint: disable=protected-access
  assert mutmut_run._max_children(["run"]) == 1  # pylint: disable=protected-access


def test_reviewed_mutants_are_recorded_as_skipped_only_in_a_run_without_names(
    monkeypatch, mutmut_run):
  """Only untested mutants are looked at, skipped ones are saved as mutmut's 'skipped' (34,
  never run: the loop leaves a mutant with a result alone), and named runs are untouched."""
  import mutmut.__main__ as mm  # pylint: disable=g-import-not-at-top

  class Data:
    def __init__(self):
      self.path, self.saved = "tff_idp/m.py", 0
      self.exit_code_by_key = {"m.a__mutmut_1": None, "m.a__mutmut_2": None, "m.a__mutmut_3": 1}

    def save(self):
      self.saved += 1

  data = Data()
  rows = [(data, name, code) for name, code in data.exit_code_by_key.items()]
  monkeypatch.setattr(mm, "collect_source_file_mutation_data",
                      lambda *, mutant_names: (list(rows), {"tff_idp/m.py": data}))
  asked = []

  def fake_skips(untested):
    asked.append(untested)
    return {"m.a__mutmut_2": "equivalent", "m.a__mutmut_3": "message"}

  monkeypatch.setattr(mutmut_run.mutation_report, "reviewed_skips", fake_skips)
  mutmut_run._install_reviewed_skip()  # pylint: disable=protected-access
  named, _ = mm.collect_source_file_mutation_data(mutant_names=["m.a__mutmut_2"])
  assert named == rows and not asked and data.saved == 0
  out, _ = mm.collect_source_file_mutation_data(mutant_names=[])
  assert asked == [{"tff_idp/m.py": ["m.a__mutmut_1", "m.a__mutmut_2"]}]
  assert [code for _, _, code in out] == [None, mutmut_run.SKIPPED, 1]
  assert data.exit_code_by_key["m.a__mutmut_2"] == 34 and data.saved == 1


def test_the_runner_records_without_serving(tmp_path, mutmut_run):
  """The stats phase's (and the parallel stats children's) memo only records."""
  with mutmut_run.recording_memo(tmp_path / "memo.pkl") as memo:
    assert memo.serve is False
  assert (tmp_path / "memo.pkl").exists()


def test_each_test_gets_its_own_cpu_budget_with_a_floor(mutmut_run):
  """mutmut's per-mutant formula, 2 x multiplier x (duration + constant), per test, never
  under the floor; a limit that would not lower the mutant's own is left alone. Bugs
  caught: the budget summed over the mutant's tests (nothing gained), or no floor (a test
  measured warm stopped while it fills a cold cache)."""
  assert mutmut_run.per_test_cpu_budget(0.01, 4.0, 1.0) == mutmut_run.PER_TEST_FLOOR_S == 10.0
  assert mutmut_run.per_test_cpu_budget(20.0, 4.0, 1.0) == 168.0
  limiter = mutmut_run.PerTestCpuLimit({"t::fast": 0.01, "t::slow": 20.0}, 4.0, 1.0)
  assert limiter.limit_for("t::fast", 5.2, soft=800) == 16
  assert limiter.limit_for("t::slow", 5.2, soft=800) == 174
  assert limiter.limit_for("t::slow", 5.2, soft=170) is None  # mutmut's own limit is lower
  assert limiter.limit_for("t::unmeasured", 5.2, soft=800) is None
  import resource  # pylint: disable=g-import-not-at-top
  assert limiter.limit_for("t::fast", 5.2, soft=resource.RLIM_INFINITY) == 16


def _run_call_in_child(limiter, nodeid: str, busy_seconds: float,
                       outer_limit: int) -> tuple[int, float]:
  """Forks; the child sets mutmut's whole-mutant CPU limit, runs the limiter's hook around
  ``busy_seconds`` of CPU work, then exits 0 (its soft limit restored) or 3 (not restored).
  Returns the child's wait status and the CPU seconds it used (its rusage, not a wall time)."""
  import resource  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  pid = os.fork()
  if pid == 0:
    try:
      now = int(time.process_time())
      resource.setrlimit(resource.RLIMIT_CPU, (now + outer_limit, now + outer_limit + 1))
      hook = limiter.pytest_runtest_call(types.SimpleNamespace(nodeid=nodeid))
      next(hook)
      end = time.process_time() + busy_seconds
      while time.process_time() < end:
        pass
      try:
        next(hook)
      except StopIteration:
        pass
      ok = resource.getrlimit(resource.RLIMIT_CPU)[0] == now + outer_limit
      os._exit(0 if ok else 3)  # pylint: disable=protected-access
    except BaseException:  # pylint: disable=broad-except
      os._exit(4)  # pylint: disable=protected-access
  _, status, usage = os.wait4(pid, 0)
  return status, usage.ru_utime + usage.ru_stime


def test_a_hanging_test_is_stopped_at_its_own_budget_and_named(tmp_path, mutmut_run):
  """A child stuck in one test ends by SIGXCPU (mutmut's timeout) at that test's budget,
  long before the whole mutant's limit, and leaves a marker naming the mutant and the test;
  a test within its budget gets the mutant's limit back and leaves no marker. Bugs caught:
  the lowered limit not applied (the child runs to the whole limit) or not restored."""
  import signal  # pylint: disable=g-import-not-at-top
  limiter = mutmut_run.PerTestCpuLimit({"t::hangs": 0.0, "t::fine": 0.0}, 0.25, 0.0,
                                       "m.x_f__mutmut_1", tmp_path, floor=1.0)
  status, cpu_seconds = _run_call_in_child(limiter, "t::hangs", busy_seconds=30.0, outer_limit=60)
  assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU
  assert cpu_seconds < 15.0  # CPU, not wall: 1-2 s, not the 30 s of work nor the 60 s limit
  markers = list(tmp_path.glob("*.json"))
  assert [m.name for m in markers] == ["m.x_f__mutmut_1.json"]
  assert [json.loads(m.read_text())["test"] for m in markers] == ["t::hangs"]
  assert json.loads(markers[0].read_text())["mutant"] == "m.x_f__mutmut_1"
  markers[0].unlink()
  status, _ = _run_call_in_child(limiter, "t::fine", busy_seconds=0.2, outer_limit=60)
  assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
  assert not list(tmp_path.glob("*.json"))


def test_a_timeout_never_reaches_a_process_that_got_the_pid_later(mutmut_run):
  """mutmut sent SIGXCPU to a timed-out child's PID after the child had exited; a CI run beside
  a mutation run lost its TFF worker (exit -24) when the kernel reused that PID."""
  import signal  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  starts = {101: "500", 102: "700", 103: "900"}
  killed = []
  safe = mutmut_run.SafeTimeouts(start_time=starts.get,
                                 kill=lambda pid, sig: killed.append((pid, sig)))
  for pid in (101, 102, 103):
    safe.register(pid, 3600)
  safe.register(104, 1)  # already gone when registered: nothing to time out
  starts[102] = "999"  # 102 exited and the kernel gave its PID to another process
  del starts[103]  # 103 exited
  registered_at = time.time()  # the deadlines are an hour later; no duration is asserted
  assert safe.expire(registered_at) == []  # nothing due yet
  assert safe.expire(registered_at + 7200) == [101]
  assert killed == [(101, signal.SIGXCPU)]


def test_the_start_time_names_one_process(mutmut_run):
  import os  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  mine = mutmut_run.process_start_time(os.getpid())
  assert mine and mine == mutmut_run.process_start_time(os.getpid())
  child = subprocess.Popen(["sleep", "0"])
  child.wait()
  assert mutmut_run.process_start_time(child.pid) is None  # reaped: gone
