"""No TFF worker_binary outlives a run: normal exit, exception, SIGTERM, SIGINT, SIGKILL."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests import processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import sys, time
    import numpy as np
    import tensorflow_federated as tff
    from tff_idp.execution import runtime

    @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
    def total(x):
      return tff.federated_sum(x)

    rt = runtime.ExecutionRuntime().start()
    assert float(total([1.0, 2.0])) == 3.0
    print("WORKER", rt.worker_pid, flush=True)
    mode = sys.argv[1]
    if mode == "raise":
      raise RuntimeError("boom")
    if mode == "wait":
      print("READY", flush=True)
      time.sleep(120)
    if mode == "kill_worker":
      import os, signal
      os.kill(rt.worker_pid, signal.SIGKILL)
      try:
        total([1.0, 2.0, 3.0])
      except runtime.WorkerDiedError as e:
        print("DIED", e, flush=True)
        sys.exit(3)
      print("NO ERROR", flush=True)
""")


_alive = processes.alive
_wait_dead = processes.wait_dead


def _start(mode: str) -> subprocess.Popen:
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  return subprocess.Popen([sys.executable, "-c", CHILD, mode], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT)


def _read_worker_pid(proc: subprocess.Popen) -> int:
  for line in proc.stdout:
    if line.startswith("WORKER"):
      return int(line.split()[1])
  raise AssertionError("child printed no worker pid")


@pytest.mark.parametrize("mode,expected_rc", [("exit", 0), ("raise", 1)])
def test_worker_ends_with_run_and_releases_pipes(mode, expected_rc):
  proc = _start(mode)
  try:
    pid = _read_worker_pid(proc)
    # communicate() only returns once every holder of the stdout pipe closed it:
    # a surviving worker that inherited the pipe would make this time out.
    proc.communicate(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == expected_rc
  assert _wait_dead(pid), f"worker_binary {pid} outlived its run"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_worker_ends_when_run_is_signalled(sig):
  proc = _start("wait")
  try:
    pid = _read_worker_pid(proc)
    assert proc.stdout.readline().strip() == "READY"
    assert _alive(pid)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode != 0
  assert _wait_dead(pid), f"worker_binary {pid} outlived a {sig.name}"


def test_worker_that_dies_mid_run_is_an_error_not_a_hang():
  """A killed worker is named in a WorkerDiedError; TFF's retries do not spin forever."""
  proc = _start("kill_worker")
  try:
    pid = _read_worker_pid(proc)
    out, _ = proc.communicate(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 3, out
  assert f"pid {pid}" in out and "exited with code -9" in out, out


def test_worker_is_launched_without_python_in_a_forked_child(monkeypatch):
  """The worker's command is the launcher + worker argv; Popen gets no preexec_fn."""
  from tff_idp.execution import runtime
  worker = runtime.worker_binary_path()  # imports TFF before Popen is faked
  calls = []

  class FakePopen:
    def __init__(self, args, **kwargs):
      calls.append((args, kwargs))
      raise OSError("stop here")

  monkeypatch.setattr(runtime.subprocess, "Popen", FakePopen)
  rt = runtime.ExecutionRuntime(install_signal_handlers=False, worker_allocator=None)
  with pytest.raises(OSError, match="stop here"):
    rt._start_worker()  # pylint: disable=protected-access
  (args, kwargs), = calls
  assert kwargs.get("preexec_fn") is None
  assert args[:4] == [sys.executable, "-I", "-S", "-c"]
  assert args[5] == str(os.getpid()) and args[6] == worker


def test_launcher_sets_parent_death_signal(tmp_path):
  """The launcher execs its target (same PID) with PR_SET_PDEATHSIG = SIGKILL."""
  from tff_idp.execution import runtime
  probe = ("import ctypes, signal; v = ctypes.c_int(); "
           "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); print(v.value)")
  out = subprocess.run(runtime._launch_command([sys.executable, "-c", probe]),  # pylint: disable=protected-access
                       capture_output=True, text=True, timeout=60, check=True).stdout
  assert int(out) == signal.SIGKILL


def test_closed_runtime_restores_previous_context_and_is_idempotent(tff_runtime):
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
  from tff_idp.execution import runtime
  before = context_stack_impl.context_stack.current
  rt = runtime.ExecutionRuntime(install_signal_handlers=False).start()
  pid = rt.worker_pid
  assert context_stack_impl.context_stack.current is not before
  rt.close()
  rt.close()
  assert context_stack_impl.context_stack.current is before
  assert _wait_dead(pid)
  with pytest.raises(RuntimeError, match="cannot be restarted"):
    rt.start()


def test_bad_device_is_rejected():
  from tff_idp.execution import runtime
  with pytest.raises(ValueError, match="'cpu' or 'gpu'"):
    runtime.ExecutionRuntime(device="tpu")


class _FakeExecutor:
  """Stands in for a RemoteExecutor: records close()."""

  def __init__(self):
    self.closed = 0

  def close(self):
    self.closed += 1


def test_executor_cache_closes_idle_and_evicted_executors():
  """Issue 9: executors for rare cohort sizes must not stay in the worker."""
  from tff_idp.execution import runtime
  cache = runtime._ClosingLRUCache(3, idle_calls=2)  # pylint: disable=protected-access
  made = {}

  def lookup(key):  # what ResourceManagingExecutorFactory.create_executor does
    ex = cache.get(key)
    if ex is None:
      ex = made[key] = _FakeExecutor()
      cache[key] = ex
    return ex

  lookup("a")
  lookup("b")
  assert lookup("a") is made["a"]  # a hit keeps "a" warm
  lookup("a")
  lookup("a")  # "b" unused for 3 > 2 lookups: closed and dropped
  assert made["b"].closed == 1 and "b" not in cache
  assert made["a"].closed == 0 and "a" in cache
  assert lookup("b") is not None and made["b"].closed == 0  # rebuilt when needed
  for key in ("c", "d"):  # LRU eviction (maxsize 3) also closes
    lookup(key)
  assert all(ex.closed <= 1 for ex in made.values())
  assert len(cache) <= 3
  closed_by_lru = [k for k, ex in made.items() if ex.closed]
  assert all(k not in cache for k in closed_by_lru)
  # clean_up_executor closes itself and then deletes: no second close.
  ex = cache["d"]
  ex.close()
  del cache["d"]
  assert ex.closed == 1 and "d" not in cache._last_used  # pylint: disable=protected-access


def test_executor_cache_without_idle_limit_keeps_executors():
  from tff_idp.execution import runtime
  cache = runtime._ClosingLRUCache(8, idle_calls=None)  # pylint: disable=protected-access
  cache["a"] = a = _FakeExecutor()
  for _ in range(50):
    cache.get("b")
  assert cache.get("a") is a and a.closed == 0


def test_worker_env_allocator_and_arenas(monkeypatch, tmp_path):
  """Issue 9: the worker gets jemalloc/tcmalloc when installed (RSS stays flat)."""
  from tff_idp.execution import runtime
  monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
  monkeypatch.delenv("LD_PRELOAD", raising=False)
  found = runtime.find_worker_allocator()
  every = {"listen_address": "0.0.0.0"}  # no loopback library: the allocator alone
  env = runtime.ExecutionRuntime(**every)._worker_env()  # pylint: disable=protected-access
  assert env.get("LD_PRELOAD") == found and "MALLOC_ARENA_MAX" not in env
  env = runtime.ExecutionRuntime(worker_allocator="glibc", malloc_arena_max=1, **every)._worker_env()  # pylint: disable=protected-access
  assert "LD_PRELOAD" not in env and env["MALLOC_ARENA_MAX"] == "1"
  lib = tmp_path / "liballoc.so"
  lib.write_bytes(b"")
  monkeypatch.setenv("LD_PRELOAD", "/x/other.so")  # kept, after ours
  env = runtime.ExecutionRuntime(worker_allocator=str(lib), worker_env={"FOO": "1"}, **every)._worker_env()  # pylint: disable=protected-access
  assert env["LD_PRELOAD"] == f"{lib}:/x/other.so" and env["FOO"] == "1"
  # Issue 50: by default the loopback library goes first, the allocator and the user's after.
  env = runtime.ExecutionRuntime(worker_allocator=str(lib))._worker_env()  # pylint: disable=protected-access
  assert env["LD_PRELOAD"].split(":")[1:] == [str(lib), "/x/other.so"]
  assert "bind_address-" in env["LD_PRELOAD"].split(":")[0]
  monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # a user's own setting wins
  env = runtime.ExecutionRuntime(worker_allocator=None, malloc_arena_max=1)._worker_env()  # pylint: disable=protected-access
  assert env["MALLOC_ARENA_MAX"] == "4"
  with pytest.raises(ValueError, match="no such file"):
    runtime.ExecutionRuntime(worker_allocator=str(tmp_path / "missing.so"))
  with pytest.raises(ValueError, match="executor_idle_calls"):
    runtime.ExecutionRuntime(executor_idle_calls=0)
  with pytest.raises(ValueError, match="malloc_arena_max"):
    runtime.ExecutionRuntime(malloc_arena_max=0)


def test_running_worker_closes_idle_executors_and_gets_allocator(tff_runtime):
  """End to end: the worker runs with the allocator; idle cohort sizes are disposed."""
  import numpy as np
  import tensorflow_federated as tff
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
  from tff_idp.execution import runtime

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def total(x):
    return tff.federated_sum(x)

  if tff_runtime.worker_allocator_path is not None:
    with open(f"/proc/{tff_runtime.worker_pid}/maps") as f:
      assert os.path.realpath(tff_runtime.worker_allocator_path) in f.read()  # loaded
  before = context_stack_impl.context_stack.current
  rt = runtime.ExecutionRuntime(install_signal_handlers=False, executor_idle_calls=2).start()
  try:
    cache = context_stack_impl.context_stack.current.executor_factory._executors  # pylint: disable=protected-access
    assert float(total([1.0] * 3)) == 3.0
    rare = next(iter(cache.values()))
    for _ in range(3):
      assert float(total([1.0, 2.0])) == 3.0
    assert len(cache) == 1
    assert rare._executor_id is None  # pylint: disable=protected-access  # closed: disposed in the worker
    assert float(total([1.0] * 3)) == 3.0  # and rebuilt on demand
  finally:
    rt.close()
  assert context_stack_impl.context_stack.current is before


def test_stock_tff_context_is_released_before_interpreter_teardown():
  """A one-line error must stay one line: no "Exception ignored in ServiceManager.__del__".

  TFF's import-time context owns a ServiceManager whose __del__ needs
  ``subprocess``; the toolkit's atexit hook collects it while modules are intact.
  A check registered before the hook runs after it (atexit is LIFO).
  """
  script = textwrap.dedent("""
      import atexit, gc
      def check():
        gc.collect()
        alive = sum(type(o).__name__ == "ServiceManager" for o in gc.get_objects())
        print("service managers alive:", alive)
      atexit.register(check)
      import tensorflow_federated
      from tff_idp.execution import runtime
  """)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
  proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        timeout=300, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "service managers alive: 0" in proc.stdout, proc.stdout + proc.stderr[-2000:]
  assert "Exception ignored" not in proc.stderr


def test_library_use_on_the_stock_context_exits_quietly():
  """Library code run outside ``execution_context`` (TFF's stock context starts its own
  worker) ends without "Exception ignored in ServiceManager.__del__": ``import tff_idp``
  registers the hook, and the collected ServiceManager stops its worker by itself."""
  script = textwrap.dedent("""
      import numpy as np
      import tff_idp
      import tensorflow_federated as tff
      @tff.tensorflow.computation(np.int32)
      def add_one(x):
        return x + 1
      print("result", add_one(np.int32(1)))
  """)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
  # SIGINT ignored, as for a job a non-interactive shell starts in the background (CI):
  # TFF's own __del__ stops its worker with SIGINT and waits without a limit.
  ignore_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)  # noqa: E731
  proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                        timeout=120, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                        preexec_fn=ignore_sigint)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "result 2" in proc.stdout
  assert "Exception ignored" not in proc.stderr, proc.stderr[-2000:]


CHAIN_CHILD = textwrap.dedent("""
    import signal, sys, time
    class Chained(BaseException):
      pass
    def handler(signum, frame):
      raise Chained()
    signal.signal(signal.SIGTERM, handler)   # as tff_idp.cli.entry installs its own
    from tff_idp.execution import runtime
    rt = runtime.ExecutionRuntime().start()
    try:  # the signal may come as soon as the line is out
      print("WORKER", rt.worker_pid, flush=True)
      time.sleep(120)
    except Chained:
      print("CHAINED", flush=True)
      sys.exit(7)
""")


def test_signal_handler_chains_to_the_one_it_replaced():
  """SIGTERM on a started runtime stops the worker and then runs the handler it replaced
  (the CLI's, which prints "terminated; resume with the same command"); it used to read
  that handler after close() had forgotten it, and exit with a bare SystemExit(143)."""
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  proc = subprocess.Popen([sys.executable, "-c", CHAIN_CHILD], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
  try:
    pid = _read_worker_pid(proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 7 and "CHAINED" in out, (proc.returncode, out, err[-2000:])
  assert _wait_dead(pid)


def test_recycled_worker_answers_the_same_and_the_old_one_is_gone(tff_runtime):  # pylint: disable=unused-argument
  """recycle_worker: executors closed, old worker ended by PID, a fresh one serves the rest."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def total(x):
    return tff.federated_sum(x)

  with runtime.ExecutionRuntime(install_signal_handlers=False, worker_allocator="glibc") as rt:
    assert runtime._active[-1] is rt  # pylint: disable=protected-access  (between_rounds' target)
    before = [float(total([1.0, 2.0])), float(total([1.0, 2.0, 3.0]))]
    old_pid = rt.worker_pid
    rt.recycle_worker()
    assert rt.worker_pid != old_pid and rt.worker_recycles == 1
    assert _wait_dead(old_pid), "the recycled worker is still running"
    assert not rt._factory._executors  # pylint: disable=protected-access
    after = [float(total([1.0, 2.0])), float(total([1.0, 2.0, 3.0]))]
  assert before == after == [3.0, 6.0]
  assert rt not in runtime._active  # pylint: disable=protected-access


def test_worker_is_recycled_only_past_its_warm_size_plus_the_bound(monkeypatch):
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  rt = runtime.ExecutionRuntime(install_signal_handlers=False, worker_allocator="glibc",
                                recycle_worker_mib=10.0)
  sizes = iter([100.0, 105.0, 109.9, 110.5, 50.0])
  monkeypatch.setattr(runtime, "_RECYCLE_WARMUP_ROUNDS", 1)
  monkeypatch.setattr(runtime, "rss_mib", lambda pid: next(sizes))
  recycled, spawned = [], []
  monkeypatch.setattr(rt, "recycle_worker", lambda: recycled.append(True))
  monkeypatch.setattr(rt, "_spawn_worker", lambda port: spawned.append(port) or {"port": port})
  rt._process = type("P", (), {"pid": 1})()  # pylint: disable=protected-access
  decisions = [rt.maybe_recycle_worker() for _ in range(4)]
  assert decisions == [False, False, False, True]  # warm 100 MiB; 110.5 > 100 + 10
  assert rt._warm_rss_mib == 100.0  # pylint: disable=protected-access
  # The replacement was launched once, half-way (109.9 > 100 + 5), before the swap.
  assert len(spawned) == 1
  # jemalloc, an arena limit or a fleet: nothing to recycle.
  assert runtime.ExecutionRuntime(malloc_arena_max=2).recycle_worker_mib is None
  assert runtime.ExecutionRuntime(workers=["localhost:1"]).recycle_worker_mib is None
  with pytest.raises(ValueError, match="recycle_worker_mib"):
    runtime.ExecutionRuntime(recycle_worker_mib=-1)


def test_signal_handler_only_signals_the_worker_and_close_runs_on_the_way_out():
  """Issue 33 item 2: the handler ends the worker by PID and raises; it releases no
  channel, executor or context (native memory other threads use), and no new worker
  can start afterwards (a recycle after a swallowed Ctrl-C started a second one).
  """
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  rt = runtime.ExecutionRuntime(install_signal_handlers=False, worker_allocator="glibc").start()
  try:
    pid = rt.worker_pid
    closed_in_handler = []
    real_close = rt.close
    rt.close = lambda *a, **k: closed_in_handler.append(True)
    with pytest.raises(SystemExit) as stop:
      rt._on_signal(signal.SIGTERM, None)  # pylint: disable=protected-access
    assert stop.value.code == 128 + signal.SIGTERM
    assert not closed_in_handler, "close() ran inside the signal handler"
    assert _wait_dead(pid), "the handler did not end the worker"
    with pytest.raises(RuntimeError, match="asked to stop"):
      rt._spawn_worker(1)  # pylint: disable=protected-access
    rt.close = real_close
  finally:
    rt.close()
  assert rt.context is not None and rt._closed  # pylint: disable=protected-access


def test_release_compiled_computations_empties_tffs_compile_cache(tff_runtime):  # pylint: disable=unused-argument
  """What run_grid calls between run specs: TFF's memoised compilations are dropped."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.execution_contexts import compiler_pipeline  # pylint: disable=g-import-not-at-top
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def total(x):
    return tff.federated_sum(x)

  assert float(total([1.0, 2.0])) == 3.0
  assert compiler_pipeline.CompilerPipeline.compile.cache_info().currsize > 0
  runtime.release_compiled_computations()
  assert compiler_pipeline.CompilerPipeline.compile.cache_info().currsize == 0
  assert float(total([1.0, 2.0, 4.0])) == 7.0  # compiled again, same answer


@pytest.mark.parametrize("stop", ["close", "signal"])
def test_values_alive_when_the_worker_stops_are_not_disposed_on_it(stop):
  """Remote values still referenced when the worker stops (Ctrl-C, SIGTERM, close) are
  garbage-collected later; their finalizers must not call the stopped worker. They did:
  a CI run's Ctrl-C ended with "Exception ignored in: <finalize object>" and a gRPC
  "Connection refused" traceback after the "interrupted" line. TFF sends a dispose RPC
  per 20 values, so 45 values reach it twice. A value made after the stop (a response
  that was in flight at Ctrl-C) must not fail either: its finalizer hit TFF's
  ``assert self._dispose_request is not None`` and printed an AssertionError in CI.
  """
  from tensorflow_federated.proto.v0 import executor_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.executors import remote_executor  # pylint: disable=g-import-not-at-top
  import asyncio  # pylint: disable=g-import-not-at-top
  import gc  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.core.impl.types import placements  # pylint: disable=g-import-not-at-top
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  rt = runtime.ExecutionRuntime(install_signal_handlers=False, worker_allocator="glibc").start()
  loop = asyncio.new_event_loop()
  try:
    executor = rt._factory.create_executor({placements.CLIENTS: 1})  # pylint: disable=protected-access
    values = [loop.run_until_complete(executor.create_value(np.float32(i),
                                                            tff.TensorType(np.float32)))
              for i in range(45)]
    pid = rt.worker_pid
    if stop == "signal":
      with pytest.raises(SystemExit):
        rt._on_signal(signal.SIGTERM, None)  # pylint: disable=protected-access
      assert _wait_dead(pid)
    else:
      rt.close()
    values.append(remote_executor.RemoteValue(  # made after the stop, with the cleared id
        executor_pb2.ValueRef(id="late"), tff.TensorType(np.float32), executor))
    reported, previous_hook = [], sys.unraisablehook
    sys.unraisablehook = reported.append
    try:
      del values
      gc.collect()
    finally:
      sys.unraisablehook = previous_hook
    assert not reported, [repr(r.exc_value)[:300] for r in reported]
  finally:
    loop.close()
    rt.close()


def test_a_computations_own_check_reaches_the_caller_as_its_message(tff_runtime):  # pylint: disable=unused-argument
  """Issue 51: an assertion inside a computation came back as gRPC's _InactiveRpcError INTERNAL."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_idp.errors import ComputationRefusedError  # pylint: disable=g-import-not-at-top

  @tff.tensorflow.computation(np.float32)
  def positive(x):
    with tf.control_dependencies([tf.debugging.assert_greater(x, 0.0,
                                                              message="x must be > 0")]):
      return tf.identity(x)

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def each(xs):
    return tff.federated_map(positive, xs)

  assert list(each([1.0, 2.0])) == [1.0, 2.0]
  with pytest.raises(ComputationRefusedError) as refused:
    each([1.0, -1.0])
  message = str(refused.value)
  assert message.startswith("a TFF computation refused its input: x must be > 0 (TensorFlow:")
  assert "\n" not in message and "_InactiveRpcError" not in message


class _FakeRpcError(Exception):
  """What grpc raises: an RpcError that is also a Call with a code and details."""

  def __init__(self, code, details):
    super().__init__(details)
    self._code, self._details = code, details

  def code(self):
    return self._code

  def details(self):
    return self._details


def test_only_a_computations_refusal_is_translated():
  import grpc  # pylint: disable=g-import-not-at-top
  from tff_idp.execution import fleet  # pylint: disable=g-import-not-at-top
  fake = type("Rpc", (_FakeRpcError, grpc.RpcError, grpc.Call), {})
  for abstract in ("add_callback", "cancel", "is_active", "time_remaining",
                   "initial_metadata", "trailing_metadata"):
    setattr(fake, abstract, lambda self, *a: None)
  refused = fleet.refusal_of(fake(grpc.StatusCode.INTERNAL, "Failed to run computation: "
                                  "InvalidArgumentError: scale out of range"))
  assert str(refused) == ("a TFF computation refused its input: (TensorFlow: "
                          "InvalidArgumentError: scale out of range)")
  assert fleet.refusal_of(fake(grpc.StatusCode.INVALID_ARGUMENT,
                               "assertion failed: [q in [0, 1]] [x]")) is not None
  assert fleet.refusal_of(fake(grpc.StatusCode.UNAVAILABLE, "assertion failed: [x]")) is None
  assert fleet.refusal_of(fake(grpc.StatusCode.INTERNAL, "socket closed")) is None
  assert fleet.refusal_of(ValueError("assertion failed: [x]")) is None
