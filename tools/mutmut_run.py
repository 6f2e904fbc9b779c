"""Runs mutmut 3 (``make mutation``) with the changes below; first, nested decorated functions are mutated.

mutmut skips every decorated function, at any depth, because a decorated
*top-level* function cannot be given its trampoline safely. Our privacy code
builds its TensorFlow/TFF computations as decorated *inner* functions
(``@tf.function def local_update`` in rpdp/dp_sgd.py, the
``@tff.tensorflow.computation`` bodies of idp_fedavg/aggregators.py): the
noise, the clipping and the normalisation live there. An inner function is
re-created on every call of its (trampolined) outer function, so mutating its
body is safe; only the decorator expression itself stays unmutated (mutmut's
own rule for ``cst.Decorator`` nodes still applies). Without this, those bodies
would silently drop out of the mutation run.

It also restricts each mutant's tests to the tests that mirror its module
(tests/ mirrors tff_idp/): mutmut picks, for the function a mutant is in,
every selected test that called it, so a mutant in a helper that all the
accounting tests go through (validation, the exact accountant) would run the
whole accounting suite when it survives. Here a mutant of
``tff_idp/<pkg>/<name>.py`` runs the tests among those in
``tests/<pkg>/test_<name>.py``; if none of them calls it, those in
``tests/<pkg>/`` (that folder only); if none, every test that calls it. A
mutant that only another module's tests catch therefore counts as survived:
each module's own tests must catch its bugs.
After the tests that called the function, the mutant runs the rest of its
mirrored file: mutmut records a call only when the Python function body runs,
and a ``tf.function`` trace or an ``lru_cache`` entry made by an earlier test
hides the calls of every later test that reuses it (rpdp/per_example.py's
weight and replacement tests reach ``vectorized_clipped_sum`` only through a
cached trace).

Each mutant's tests also run fastest first (by the durations mutmut's stats
phase recorded), grouped by file so that a module's fixtures are built once.
mutmut stops at the first failure (``pytest -x``) but hands its tests over in
set order, so a mutant that a 10 ms test kills could otherwise wait behind
every TFF test of its module first.

dp-accounting's two costliest pure functions are memoised for the mutants
(tools/accountant_memo.py): the stats phase (or mutmut's clean run, when it
runs) records their answers, and the fork server hands the record to every
mutant, so a mutant that asks the accountant what the unmutated code asked
gets the answer without the work. The stats phase, whose durations set each
mutant's timeout, only records: every call there is computed afresh.
``MUTATION_ACCOUNTANT_MEMO=0`` turns the memo off (to measure what it saves).

Every mutant's child logs its test run (tools/mutant_log.py:
``mutants/mutant_times.jsonl``, the wall and CPU seconds, how many tests ran,
the test that failed first), and the tests that killed earlier mutants of the
same function, then of the same module, are tried first
(``MUTATION_KILLERS_FIRST=0`` turns that off). Only the order changes.

mutmut runs every selected test once more (its "clean run") after the stats
phase; when the stats phase itself ran every selected test in this
invocation, in the same harness, and they passed, that second run only
repeats it and is skipped (the memo is recorded in the stats phase instead).
That stats phase itself runs in ``--max-children`` processes at once, each
taking whole test files (longest first) from one queue, instead of one.

A run without names does not test what was already reviewed: a mutant listed
as equivalent in docs/architecture.md whose diff is exactly its pinned one
(tools/mutation_equivalents.json), a mutant that only changes a message
(neither counts in the kill rate), and a known survivor: described under
"Known survivors" and pinned in tools/mutation_survivors.json, it counts as
left, exactly as if it had run and survived. They survive by definition, so
each would run its whole mirrored file: a third of the whole run's test time
(SAMPLE's survivors: about 95 s each). mutmut records them as "skipped"; the
report still classifies each with mutmut's own diff (a skipped mutant that no
longer matches counts as left).
``MUTATION_RECHECK_REVIEWED=1`` runs them too; naming a mutant always runs it.

Each test of a mutant runs under its own CPU limit (``PerTestCpuLimit``: mutmut's
formula applied to that test alone, never under 10 CPU s), so a mutant that
hangs in one fast test stops there instead of waiting out its whole mirrored
file's budget (``MUTATION_PER_TEST_LIMIT=0`` turns it off).

Usage: python tools/mutmut_run.py run --max-children 2   (any mutmut command)
"""
from __future__ import annotations

import contextlib
import fcntl
import heapq
import json
import os
import pathlib
import pickle
import re
import resource
import signal
import sys
import threading
import time
import traceback

import libcst as cst
import pytest
from libcst.metadata import PositionProvider
from mutmut.mutation import file_mutation as fm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from accountant_memo import AccountantMemo  # pylint: disable=wrong-import-position
import mutant_log  # pylint: disable=wrong-import-position
from mutant_tests import fastest_first, mirrored_tests  # pylint: disable=wrong-import-position
import mutation_report  # pylint: disable=wrong-import-position

# Where the clean run leaves the accountant's answers for the mutants (mutmut's own folder).
MEMO_PATH = pathlib.Path.cwd() / "mutants" / "accountant_memo.pkl"
# Where each mutant's child logs its test run (tools/mutant_log.py).
LOG_PATH = pathlib.Path.cwd() / "mutants" / "mutant_times.jsonl"

_original_skip = fm.MutationVisitor._skip_node_and_children


def _skip_node_and_children(self, node):  # pylint: disable=protected-access
  if isinstance(node, cst.FunctionDef) and node.decorators:
    outer = self.get_metadata(fm.OuterFunctionProvider, node, None)
    if outer is not None and outer is not node:  # nested in a mutated function
      position = self.get_metadata(PositionProvider, node, None)
      if position and position.start.line in self._ignored_node_lines:
        self.ignored_functions.add(node.name.value)
        return True
      return node.name.value in fm.NEVER_MUTATE_FUNCTION_NAMES
  return _original_skip(self, node)


fm.MutationVisitor._skip_node_and_children = _skip_node_and_children  # pylint: disable=protected-access



_COVERING: dict[str, set[str]] = {}  # mangled function name -> the tests that called it


def _install_fastest_first(history: "mutant_log.KillerHistory | None" = None):
  """Each mutant's tests fastest first, after the earlier killers ``history`` knows of."""
  import mutmut.__main__ as mm  # pylint: disable=g-import-not-at-top
  from mutmut.workers import isolation  # pylint: disable=g-import-not-at-top
  for runner_class in (isolation.ForkServerRunner, isolation.ForkRunner):
    original_submit = runner_class.submit

    def submit(self, mutant_name, tests, cpu_time_limit, estimated_time, _original=original_submit):
      covering = _COVERING.get(mutant_name.rsplit("__mutmut_", 1)[0])
      durations = mm.state().duration_by_test
      ordered = fastest_first(tests, durations, covering)
      if history is not None:
        history.refresh()
        ordered = history.order(ordered, mutant_name, durations)
      return _original(self, mutant_name, ordered, cpu_time_limit, estimated_time)

    runner_class.submit = submit


def _install_test_selection():
  import mutmut.__main__ as mm  # pylint: disable=g-import-not-at-top
  original = mm.collect_or_load_stats

  def collect_or_load_stats(*args, **kwargs):
    original(*args, **kwargs)
    state = mm.state()
    by_function = state.tests_by_mangled_function_name
    all_tests = set(state.duration_by_test)
    for name in list(by_function):
      covering, extra = mirrored_tests(name, set(by_function[name]), all_tests)
      _COVERING[name] = covering
      by_function[name] = covering | extra

  mm.collect_or_load_stats = collect_or_load_stats


@contextlib.contextmanager
def recording_memo(memo_path: pathlib.Path):
  """dp-accounting's answers recorded (never served) for the block, then merged into ``memo_path``."""
  memo = AccountantMemo(serve=False)
  memo.install()
  try:
    yield memo
  finally:
    memo.save(memo_path)
    AccountantMemo.uninstall()


def _install_gc_freeze():
  """Freezes the fork server's objects after its warm-up, so the mutants' children share them.

  mutmut calls ``gc.freeze()`` in its parent, before it starts the fork server; the
  server then imports TensorFlow, collects the tests and loads the accountant memo
  (~440,000 objects). A garbage collection in a child walks every one of them and so
  copies the pages they live on (copy-on-write): measured on this machine, a child that
  collects once costs 0.36 s against 0.03 s once they are frozen. Freezing them after
  the warm-up moves them out of the collector's reach (they live as long as the server
  anyway). ``MUTATION_GC_FREEZE=0`` turns it off.
  """
  import gc  # pylint: disable=g-import-not-at-top
  from mutmut.runners import harness  # pylint: disable=g-import-not-at-top
  original_warm_up = harness.PytestRunner.warm_up

  def warm_up(self):
    original_warm_up(self)
    gc.freeze()

  harness.PytestRunner.warm_up = warm_up


def _install_accountant_memo(memo_path: pathlib.Path = MEMO_PATH):
  """The clean run records the accountant's answers; the fork server serves them."""
  from mutmut.runners import harness  # pylint: disable=g-import-not-at-top
  original_run_tests = harness.PytestRunner.run_tests
  original_warm_up = harness.PytestRunner.warm_up
  original_run_stats = harness.PytestRunner.run_stats

  def run_tests(self, *, mutant_name, tests):
    tests = list(tests)
    if mutant_name is not None:  # a mutant: the fork server already serves the memo
      return original_run_tests(self, mutant_name=mutant_name, tests=tests)
    # The clean run (an empty list means every selected test: a run without names), or the
    # forced-fail run, whose first call fails and records next to nothing. Each runs in a
    # child of its own and merges what it recorded into the saved memo.
    with recording_memo(memo_path):
      return original_run_tests(self, mutant_name=mutant_name, tests=tests)

  def warm_up(self):
    original_warm_up(self)
    AccountantMemo.load(memo_path).install()  # in the fork server, before any mutant's fork

  def run_stats(self, *, tests):  # records too: the clean run is skipped after full stats
    if tests:  # one file of the parallel stats phase (its child records) or new tests only
      return original_run_stats(self, tests=tests)
    with recording_memo(memo_path):
      return original_run_stats(self, tests=tests)

  harness.PytestRunner.run_tests = run_tests
  harness.PytestRunner.warm_up = warm_up
  harness.PytestRunner.run_stats = run_stats


class _TestRecorder:
  """A pytest plugin: how many tests reported, and the first that failed."""

  def __init__(self):
    self.seen: list[str] = []
    self.killer = None

  def pytest_runtest_logreport(self, report):
    if report.nodeid not in self.seen:
      self.seen.append(report.nodeid)
    if report.failed and self.killer is None:
      self.killer = report.nodeid


# A test's own CPU budget never falls below this many seconds (see PerTestCpuLimit).
PER_TEST_FLOOR_S = 10.0


def per_test_cpu_budget(duration: float, multiplier: float, constant: float,
                        floor: float = PER_TEST_FLOOR_S) -> float:
  """CPU seconds one test's call may use in a mutant's child: mutmut's per-mutant formula,
  2 x multiplier x (duration + constant), applied to the test alone, and at least ``floor``."""
  return max(2.0 * multiplier * (duration + constant), floor)


class PerTestCpuLimit:
  """A pytest plugin for a mutant's child: each test's call phase gets its own CPU limit.

  mutmut limits a mutant's CPU time by the sum of all its tests' measured
  durations (x 8, + 8 s). A mutant that makes a search never end hangs in
  one test, usually a fast one (killers and fast tests run first), yet waits
  out the whole sum: up to 6.5 minutes for one of SAMPLE's mutants, whose
  mirrored file takes ~95 s. Here the soft RLIMIT_CPU is lowered to that one
  test's budget (``per_test_cpu_budget``) for its call phase, then restored;
  the kernel's SIGXCPU ends the child exactly as mutmut's own limit does (a
  timeout, counted as killed), even inside C code. The ``floor`` (10 CPU s)
  covers what a cold cache or a fresh ``tf.function`` trace adds to a test
  measured warm in the stats phase: every selected test run cold, fastest
  first, one process per file (unmutated, no memo), used at most 7.5 CPU s in
  a call whose budget here is 10 s or more. Where a test's budget would not
  end before the mutant's own limit, that limit is left as it is.

  While a lowered limit is in force, ``marker_dir/<mutant>.json`` names the
  mutant and the test; a child that dies there leaves it behind
  (``python tools/mutant_log.py`` lists them after the run; during it, the
  running children's markers are there too).
  """

  def __init__(self, duration_by_test: dict, multiplier: float, constant: float,
               mutant_name: str = "", marker_dir: "pathlib.Path | None" = None,
               floor: float = PER_TEST_FLOOR_S):
    self.duration_by_test = duration_by_test
    self.multiplier, self.constant, self.floor = multiplier, constant, floor
    self.mutant_name, self.marker_dir = mutant_name, marker_dir

  def limit_for(self, nodeid: str, now_cpu: float, soft: int) -> "int | None":
    """The lowered soft limit for this test's call, or None to keep ``soft``."""
    duration = self.duration_by_test.get(nodeid)
    if duration is None:
      return None
    budget = per_test_cpu_budget(duration, self.multiplier, self.constant, self.floor)
    limit = int(now_cpu + budget) + 1
    if soft != resource.RLIM_INFINITY and limit >= soft:
      return None
    return limit

  @pytest.hookimpl(hookwrapper=True)
  def pytest_runtest_call(self, item):
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    limit = self.limit_for(item.nodeid, time.process_time(), soft)
    marker = None
    if limit is not None:
      if self.marker_dir is not None:
        marker = self.marker_dir / f"{self.mutant_name or os.getpid()}.json"
        marker.write_text(json.dumps({"mutant": self.mutant_name, "test": item.nodeid,
                                      "cpu_limit": limit}))
      resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
    try:
      yield
    finally:
      if limit is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        if marker is not None:
          marker.unlink(missing_ok=True)


def _install_mutant_log(log_path: pathlib.Path = LOG_PATH, per_test_limits: bool = True):
  """Each mutant's child appends its test run to ``log_path`` (tools/mutant_log.py), and
  (``per_test_limits``) runs each test under its own CPU limit (``PerTestCpuLimit``)."""
  from mutmut.runners import harness  # pylint: disable=g-import-not-at-top
  from mutmut.configuration import config as mm_config  # pylint: disable=g-import-not-at-top
  from mutmut.state import state as mm_state  # pylint: disable=g-import-not-at-top
  previous = harness.PytestRunner.run_tests

  def run_tests(self, *, mutant_name, tests):
    if mutant_name is None:
      return previous(self, mutant_name=mutant_name, tests=tests)
    tests = list(tests)
    recorder = _TestRecorder()
    execute = self.execute_pytest
    plugins = [recorder]
    wall, cpu = time.monotonic(), time.process_time()
    if per_test_limits:
      cfg = mm_config()
      marker_dir = log_path.parent / "per_test_limit"
      marker_dir.mkdir(exist_ok=True)
      plugins.append(PerTestCpuLimit(mm_state().duration_by_test, cfg.timeout_multiplier,
                                     cfg.timeout_constant, mutant_name, marker_dir))

    def execute_with_recorder(params, **kwargs):
      kwargs["plugins"] = list(kwargs.get("plugins") or []) + plugins
      return execute(params, **kwargs)

    self.execute_pytest = execute_with_recorder
    exit_code = None
    try:
      exit_code = previous(self, mutant_name=mutant_name, tests=tests)
      return exit_code
    finally:
      del self.execute_pytest
      mutant_log.append_record(log_path, {
          "mutant": mutant_name, "wall": round(time.monotonic() - wall, 3),
          "cpu": round(time.process_time() - cpu, 3), "run": len(recorder.seen),
          "of": len(tests), "killer": recorder.killer, "exit": exit_code})

  harness.PytestRunner.run_tests = run_tests


_FULL_STATS = {"ran": False}  # did this invocation run the stats phase over every test?


def _install_clean_run_skip():
  """Skips mutmut's clean run when this invocation's stats phase ran every selected test.

  Both run the same selected tests, unmutated, in a child of the same harness,
  and mutmut stops if the stats phase fails; the second run only repeats the
  first (about 5 minutes of the whole run). With stats loaded from an earlier
  run, the clean run runs as mutmut has it.
  """
  import mutmut.__main__ as mm  # pylint: disable=g-import-not-at-top
  from mutmut.workers import isolation  # pylint: disable=g-import-not-at-top
  original_stats = mm.run_stats_collection

  def run_stats_collection(runner, tests=None):
    original_stats(runner, tests)
    if not tests:  # mutmut's "every test"
      _FULL_STATS["ran"] = True

  mm.run_stats_collection = run_stats_collection
  for runner_class in (isolation.ForkServerRunner, isolation.ForkRunner):
    original_clean = runner_class.run_clean_tests

    def run_clean_tests(self, tests, _original=original_clean):
      if _FULL_STATS["ran"]:
        print("    (skipped: the stats phase just ran every selected test, and they passed)")
        return 0
      return _original(self, tests)

    runner_class.run_clean_tests = run_clean_tests


def selected_test_files(selection, root: pathlib.Path) -> list[str]:
  """The test files of mutmut's selection (a folder: its ``test_*.py``), longest first.

  Paths are relative to ``root``; the longest files go first so that the
  stats phase's workers, taking files from one queue, end close together.
  """
  files: dict[str, int] = {}
  for item in selection:
    path = root / item
    found = sorted(path.rglob("test_*.py")) if path.is_dir() else [path]
    for file in found:
      files.setdefault(file.relative_to(root).as_posix(), len(file.read_bytes().splitlines()))
  return sorted(files, key=lambda f: (-files[f], f))


class FileQueue:
  """Hands out the indices 0..n-1 once each, across processes (a counter file under a lock)."""

  def __init__(self, path: pathlib.Path, n: int):
    self.path, self.n = pathlib.Path(path), n
    self.path.write_text("0")

  def claim(self):
    """The next index, or None when all are taken."""
    with open(self.path, "r+") as f:
      fcntl.lockf(f, fcntl.LOCK_EX)
      index = int(f.read() or 0)
      f.seek(0)
      f.truncate()
      f.write(str(index + 1))
      f.flush()
    return index if index < self.n else None


class _QueuedStatsRunner:
  """A child's runner for the parallel stats phase: runs files from the queue until none is left."""

  def __init__(self, runner, files: list[str], queue: FileQueue,
               memo_path: "pathlib.Path | None"):
    self._runner, self._files, self._queue, self._memo_path = runner, files, queue, memo_path

  def run_stats(self, *, tests):
    del tests  # every selected test: the files of the queue
    codes = []
    with (recording_memo(self._memo_path) if self._memo_path else contextlib.nullcontext()):
      while (index := self._queue.claim()) is not None:
        code = self._runner.run_stats(tests=[self._files[index]])
        codes.append(0 if code == 5 else code)  # 5: pytest selected no test in that file
    return max(codes, default=0)


def run_concurrently(operations) -> list:
  """Runs each operation in a forked child of its own, all at once; their results in order."""
  children = []
  for operation in operations:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
      os.close(read_fd)
      try:
        data = {"ok": True, "value": operation()}
      except BaseException:  # pylint: disable=broad-except
        data = {"ok": False, "error": traceback.format_exc()}
      with os.fdopen(write_fd, "wb") as f:
        pickle.dump(data, f)
      os._exit(0)  # pylint: disable=protected-access
    os.close(write_fd)
    children.append((pid, read_fd))
  results, errors = [], []
  for pid, read_fd in children:
    with os.fdopen(read_fd, "rb") as f:
      try:
        data = pickle.load(f)
      except Exception:  # pylint: disable=broad-except
        data = None
    _, status = os.waitpid(pid, 0)
    if data is None or not data["ok"]:
      errors.append(f"child {pid} (exit {os.waitstatus_to_exitcode(status)}): "
                    f"{(data or {}).get('error', 'no result')}")
    else:
      results.append(data["value"])
  if errors:
    raise ChildProcessError("\n".join(errors))
  return results


def merge_stats(results: list[dict]) -> dict:
  """One StatsResult dict from several children's (sets unite, durations join, codes max)."""
  merged = {"exit_code": 0, "tests_by_mangled_function_name": {}, "duration_by_test": {},
            "stats_time": 0.0, "function_dependencies": {}}
  for result in results:
    merged["exit_code"] = max(merged["exit_code"], result["exit_code"])
    merged["duration_by_test"].update(result["duration_by_test"])
    merged["stats_time"] += result["stats_time"]
    for key in ("tests_by_mangled_function_name", "function_dependencies"):
      for name, values in result[key].items():
        merged[key][name] = sorted(set(merged[key].get(name, ())) | set(values))
  return merged


def _install_parallel_stats(workers: int, memo_path: "pathlib.Path | None"):
  """mutmut's full stats phase in ``workers`` children at once, taking test files from a queue.

  mutmut runs every selected test once, traced, in one process (5-6 minutes
  of the whole run on one of the two cores). Here each child runs whole test
  files, longest first, from a shared queue; their records are merged as
  mutmut merges its one child's. With ``memo_path``, each child records the
  accountant memo (tools/accountant_memo.py) and merges it under its lock.
  """
  from mutmut.configuration import config  # pylint: disable=g-import-not-at-top
  from mutmut.workers import isolation  # pylint: disable=g-import-not-at-top
  original = isolation.ForkServerRunner.collect_stats

  def collect_stats(self, tests):
    if tests or workers < 2:
      return original(self, tests)
    root = pathlib.Path.cwd() / "mutants"
    files = selected_test_files(config().pytest_add_cli_args_test_selection, root)
    queue = FileQueue(root / "stats_queue", len(files))

    def run_in_children(operation):
      def one():
        runner = _QueuedStatsRunner(self.test_runner_class(**self.test_runner_args), files,
                                    queue, memo_path)
        return operation(runner)
      return merge_stats(run_concurrently([one] * workers))

    self._run_in_child = run_in_children  # pylint: disable=protected-access
    try:
      return original(self, tests)
    finally:
      del self._run_in_child  # pylint: disable=protected-access

  isolation.ForkServerRunner.collect_stats = collect_stats


SKIPPED = 34  # mutmut's exit code for "skipped"


def process_start_time(pid: int) -> "str | None":
  """Field 22 of ``/proc/<pid>/stat`` (start time in clock ticks since boot), or None if gone.

  A PID and its start time name one process: a PID the kernel hands out again
  gets another start time.
  """
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
      stat = f.read()
  except OSError:
    return None
  fields = stat.rsplit(")", 1)[-1].split()  # after "pid (comm)": state is field 3
  return fields[19] if len(fields) > 19 else None


class SafeTimeouts:
  """mutmut's wall-clock timeouts, sent only to the process that was registered.

  mutmut 3.8.1 (``mutmut.workers.timeout``) keeps every (deadline, pid) until
  the deadline passes and then sends SIGXCPU to that PID, "letting expired
  entries for already-terminated processes remain". By then the mutant's child
  has usually exited and the kernel may have given its PID to an unrelated
  process: a CI run beside a mutation run lost its TFF worker to SIGXCPU (exit
  -24, 70 failed tests). Here each entry also keeps the process's start time,
  and the signal goes out only while that PID still has it.
  """

  def __init__(self, start_time=process_start_time, kill=os.kill):
    self._start_time, self._kill = start_time, kill
    self._heap: list = []
    self._lock = threading.Condition()
    self._thread = None

  def register(self, pid: int, timeout_s: float) -> None:
    started = self._start_time(pid)
    if started is None:
      return  # already gone: nothing to time out
    with self._lock:
      heapq.heappush(self._heap, (time.time() + timeout_s, pid, started))
      self._lock.notify()
      if self._thread is None:
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="mutmut-safe-timeouts")
        self._thread.start()

  def expire(self, now: float) -> list[int]:
    """Signals the registered processes whose deadline passed; returns the PIDs signalled."""
    signalled = []
    while self._heap and self._heap[0][0] <= now:
      _, pid, started = heapq.heappop(self._heap)
      if self._start_time(pid) != started:
        continue  # exited (or its PID now names another process): never signal that
      try:
        self._kill(pid, signal.SIGXCPU)
        signalled.append(pid)
      except ProcessLookupError:
        pass
    return signalled

  def _run(self) -> None:
    with self._lock:
      while True:
        while not self._heap:
          self._lock.wait()
        self.expire(time.time())
        if self._heap:
          self._lock.wait(timeout=max(0.0, self._heap[0][0] - time.time()))


def _install_safe_timeouts() -> SafeTimeouts:
  """mutmut's runners register their children's timeouts with :class:`SafeTimeouts`."""
  from mutmut.workers import isolation  # pylint: disable=g-import-not-at-top
  from mutmut.workers import timeout as mutmut_timeout  # pylint: disable=g-import-not-at-top
  safe = SafeTimeouts()
  isolation.register_timeout = safe.register
  mutmut_timeout.register_timeout = safe.register
  return safe


def _install_reviewed_skip():
  """A run without names records the reviewed mutants as skipped instead of testing them."""
  import mutmut.__main__ as mm  # pylint: disable=g-import-not-at-top
  original = mm.collect_source_file_mutation_data

  def collect_source_file_mutation_data(*, mutant_names):
    mutants, by_path = original(mutant_names=mutant_names)
    if mutant_names:  # named mutants are always run
      return mutants, by_path
    untested = {}
    for data, name, result in mutants:
      if result is None:
        untested.setdefault(str(data.path), []).append(name)
    skips = mutation_report.reviewed_skips(untested)
    out, changed, kinds = [], {}, []
    for data, name, result in mutants:
      if result is None and name in skips:
        data.exit_code_by_key[name] = result = SKIPPED
        changed[id(data)] = data
        kinds.append(skips[name])
      out.append((data, name, result))
    for data in changed.values():
      data.save()
    print(f"    not run: {kinds.count('equivalent')} reviewed equivalents, "
          f"{kinds.count('survivor')} known survivors (counted as left) and "
          f"{kinds.count('message')} message-only mutants (skipped)")
    return out, by_path

  mm.collect_source_file_mutation_data = collect_source_file_mutation_data


def _max_children(argv) -> int:
  """mutmut's ``--max-children`` from the command line (1 when absent)."""
  for i, arg in enumerate(argv):
    if arg == "--max-children" and i + 1 < len(argv):
      return int(argv[i + 1])
    if arg.startswith("--max-children="):
      return int(arg.split("=", 1)[1])
  return 1


if __name__ == "__main__":
  _install_safe_timeouts()  # first: no timeout may reach a process mutmut did not start
  _install_test_selection()
  _install_clean_run_skip()
  memo_on = os.environ.get("MUTATION_ACCOUNTANT_MEMO", "1") != "0"
  if memo_on:
    _install_accountant_memo()
  _install_parallel_stats(_max_children(sys.argv), MEMO_PATH if memo_on else None)
  if os.environ.get("MUTATION_GC_FREEZE", "1") != "0":
    _install_gc_freeze()  # after the memo's warm-up, so that the memo is frozen too
  if os.environ.get("MUTATION_RECHECK_REVIEWED", "0") != "1":
    _install_reviewed_skip()
  _install_mutant_log(per_test_limits=os.environ.get("MUTATION_PER_TEST_LIMIT", "1") != "0")
  _install_fastest_first(mutant_log.KillerHistory(LOG_PATH)
                         if os.environ.get("MUTATION_KILLERS_FIRST", "1") != "0" else None)
  from mutmut.__main__ import cli  # pylint: disable=g-import-not-at-top
  sys.argv[0] = "mutmut"
  cli()
