"""The one place that owns the TFF execution context and its worker process.

TFF 0.87 executes computations in a C++ ``worker_binary`` that the stock
context (``tff.backends.native.set_sync_local_cpp_execution_context``) starts
lazily and never stops: it outlives Python as an orphan and keeps the parent's
stdout/stderr pipes open, which hangs CI jobs and shells. ``ExecutionRuntime``
starts the worker itself and guarantees it ends with the run:

* the worker gets its own stdin/stdout/stderr (``/dev/null`` or a log file),
  so it never holds the parent's pipes;
* ``PR_SET_PDEATHSIG`` asks Linux to SIGKILL it if the Python process dies,
  even by SIGKILL (set by a single-threaded launcher that then execs the
  worker, never by Python code in a child forked from this threaded process);
* ``close()`` runs on normal exit (context manager and ``atexit``) and on
  exceptions. On SIGINT/SIGTERM the handler (chained to the previous one)
  only sends SIGTERM to the worker(s) this runtime started, by PID, and
  raises; ``close()`` then runs on the way out, outside the handler, and no
  new worker starts after a signal. It ends only processes this runtime
  started, by PID.
* a worker that exits mid-run raises :class:`WorkerDiedError` within
  ``_WATCHDOG_POLL_S`` instead of being restarted or retried forever, and a
  waiting computation wakes every ``_WATCHDOG_POLL_S`` so SIGINT/SIGTERM are
  handled at once.

Devices: ``device="cpu"`` hides GPUs from the worker. ``device="gpu"`` exposes
the chosen GPUs (``gpu_ids``) with memory growth on; the worker binary places
TensorFlow ops itself and has no per-device flags, so
``max_concurrent_computation_calls`` is the knob that bounds how many client
computations run in parallel (and so GPU memory).

Memory: the worker's live heap is small and flat, but with glibc's malloc its
RSS creeps up every round (freed memory stays resident in per-thread arenas),
so the worker runs with jemalloc (or tcmalloc) preloaded when one is installed
(``worker_allocator``). Each cohort size costs an executor stack in the worker
(~20 MiB of TensorFlow sessions and threads); executors no invocation has used
for ``executor_idle_calls`` invocations are closed, so a rare cohort size is
not held for the rest of the run. Without jemalloc the worker is *recycled*
instead (``recycle_worker_mib``): between two rounds, once its RSS has grown
that much past its size after warm-up, the runtime closes its executors and
starts a fresh worker. Nothing is lost: a round's state lives in the Python
driver, and the worker holds only the executors of finished invocations
(:func:`between_rounds`, called by :class:`tff_idp.engine.driver.RoundDriver`).
"""
from __future__ import annotations

import atexit
import contextlib
import gc
import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import weakref
from typing import Callable, Iterator, Mapping, Optional, Sequence

import cachetools
import grpc
import portpicker

from tff_idp import console
from tff_idp.execution import client_input_hints
from tff_idp.execution import fleet
from tff_idp.execution import listen_address as listen
from tff_idp.errors import TffIdpError

_PR_SET_PDEATHSIG = 1
_STARTUP_TIMEOUT_S = 60.0
_WATCHDOG_POLL_S = 0.2
# Rounds after a worker starts before its RSS is taken as its warm size.
_RECYCLE_WARMUP_ROUNDS = 20
# The default growth past the warm size at which a glibc worker is recycled.
DEFAULT_RECYCLE_WORKER_MIB = 32.0
_active: list = []  # the started runtimes, innermost last


def worker_binary_path() -> str:
  import tensorflow_federated  # pylint: disable=import-outside-toplevel
  return os.path.join(os.path.dirname(tensorflow_federated.__file__), "data",
                      "worker_binary")


# The worker is started through a tiny, single-threaded Python launcher that
# sets PR_SET_PDEATHSIG and then execs the worker binary (same PID). Setting it
# in a ``preexec_fn`` instead would run Python code in a child forked from a
# process with TensorFlow and gRPC threads, which can deadlock before exec
# (the child inherits locks held by other threads, e.g. the dynamic loader's),
# leaving ``Popen`` blocked forever.
_LAUNCHER = """\
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):
    sys.exit(70)  # the parent died before PR_SET_PDEATHSIG took hold
os.execv(sys.argv[2], sys.argv[2:])
"""


def _launch_command(argv: Sequence[str]) -> list[str]:
  """``argv`` run via the launcher: the worker dies with this process (SIGKILL)."""
  return [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(os.getpid()), *argv]


class WorkerDiedError(TffIdpError, RuntimeError):
  """The TFF worker process exited while the run still needed it."""


# Allocators for the worker, best first. With glibc's malloc the worker's RSS
# creeps up ~0.25 MiB per round (171 -> 259 MiB over 200 rounds) although its
# live heap stays flat at ~30 MiB: it runs every client computation on fresh
# threads spread over up to 8 arenas per core, and glibc returns only the top
# of an arena to the OS, so freed memory stays resident, ever more fragmented.
# jemalloc (or tcmalloc) keeps the worker flat, returns what closed executors
# free, and makes rounds ~20% faster (benchmarks/bench_cohort_variation.py).
_ALLOCATORS = ("libjemalloc.so.2", "libjemalloc.so", "libtcmalloc_minimal.so.4",
               "libtcmalloc.so.4")


def _library_dirs() -> list[str]:
  multiarch = sysconfig.get_config_var("MULTIARCH")
  dirs = [f"/usr/lib/{multiarch}", f"/lib/{multiarch}"] if multiarch else []
  return dirs + ["/usr/lib64", "/usr/lib", "/usr/local/lib", "/lib64", "/lib"]


def find_worker_allocator() -> Optional[str]:
  """Path of the first of jemalloc / tcmalloc installed, or None."""
  for name in _ALLOCATORS:
    for directory in _library_dirs():
      path = os.path.join(directory, name)
      if os.path.isfile(path):
        return path
  return None


def _resolve_allocator(allocator: Optional[str]) -> Optional[str]:
  """``"auto"``: jemalloc/tcmalloc if installed; a path: that; None/"glibc": none."""
  if allocator is None or allocator == "glibc":
    return None
  if allocator != "auto":
    if not os.path.isfile(allocator):
      raise ValueError(f"worker_allocator={allocator!r}: no such file; give a "
                       "shared library path, 'auto' or 'glibc'.")
    return allocator
  return find_worker_allocator()


def note_glibc_worker_recycled(grown_mib: float) -> bool:
  """Says once per process, when it first happens, why the worker is being restarted.

  Printed at the first recycle rather than at start-up (issue 34 item 5: the
  notice printed twice per run in two logging formats, and ahead of the
  one-line error of a refused run); True if it printed.
  """
  return console.note(
      f"the TFF worker has grown {grown_mib:.0f} MiB (glibc malloc: no jemalloc or tcmalloc "
      "found), so it is restarted between rounds, without losing state. Installing "
      "jemalloc (Debian/Ubuntu: apt-get install libjemalloc2) keeps it flat without "
      "restarts.", key="glibc_worker_recycled")


def release_compiled_computations() -> None:
  """Drops every computation TFF's execution contexts have compiled, and collects garbage.

  TFF 0.87 memoises ``CompilerPipeline.compile`` with an ``lru_cache`` of 128
  entries shared by every context, so each learning process a grid builds
  (``initialize``, ``next``, ... of every run spec) stays reachable with its
  compiled form: the driving process grew about 2.6 MiB per run spec of a
  small logistic regression, more for larger models (issue 33 item 7).
  Called between run specs (:func:`tff_idp.engine.run_template.run_grid`);
  a computation used again is compiled again, with the same result.
  """
  if "tensorflow_federated" in sys.modules:  # nothing compiled where TFF never loaded
    from tensorflow_federated.python.core.impl.execution_contexts import compiler_pipeline  # pylint: disable=g-import-not-at-top
    compiler_pipeline.CompilerPipeline.compile.cache_clear()
  gc.collect()


class _ClosingLRUCache(cachetools.LRUCache):
  """LRU cache of executors that closes the ones it evicts.

  Besides evicting the least recently used executor when full, it closes
  every executor that no lookup has asked for in the last ``idle_calls``
  lookups (one lookup per TFF invocation): an executor for a rare cohort
  size is built, used and released again instead of holding its TensorFlow
  sessions and threads in the worker for the rest of the run.
  """

  def __init__(self, maxsize: int, idle_calls: Optional[int] = None):
    super().__init__(maxsize)
    self.idle_calls = idle_calls
    self._tick = 0
    self._last_used: dict = {}

  def get(self, key, default=None):
    self._tick += 1
    if self.idle_calls is not None:
      idle = [k for k, t in self._last_used.items()
              if k != key and self._tick - t > self.idle_calls]
      for k in idle:
        _close_quietly(self.pop(k))
    return super().get(key, default)

  def __getitem__(self, key):
    value = super().__getitem__(key)
    self._last_used[key] = self._tick
    return value

  def __setitem__(self, key, value):
    super().__setitem__(key, value)
    self._last_used[key] = self._tick

  def __delitem__(self, key):
    super().__delitem__(key)
    self._last_used.pop(key, None)

  def popitem(self):
    key, executor = super().popitem()
    _close_quietly(executor)
    return key, executor


def rss_mib(pid: int) -> float:
  """Resident memory of process ``pid`` in MiB (Linux ``/proc``; NaN where unreadable)."""
  try:
    with open(f"/proc/{pid}/status") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) / 1024.0
  except OSError:
    pass
  return float("nan")


def between_rounds() -> bool:
  """Lets the innermost started runtime recycle its worker; True if it did.

  Called by the round driver after every round, when no computation is in
  flight (see :meth:`ExecutionRuntime.maybe_recycle_worker`).
  """
  return _active[-1].maybe_recycle_worker() if _active else False


def _dispose_nothing(value_ref, value_executor_id) -> None:
  """A stopped worker's executors dispose nothing (see ``_forget_remote_values``)."""
  del value_ref, value_executor_id


def _terminate(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
  """Ends a worker this runtime started, by PID: SIGTERM, then SIGKILL after ``timeout_s``."""
  if proc.poll() is not None:
    return
  try:
    proc.terminate()
    proc.wait(timeout=timeout_s)
  except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait(timeout=timeout_s)
  except ProcessLookupError:
    pass


def _close_quietly(executor) -> None:
  try:
    executor.close()
  except Exception:  # pylint: disable=broad-except
    pass  # the worker may already be gone; nothing left to free


class ExecutionRuntime:
  """Owns a TFF C++ execution context and its ``worker_binary`` process.

  Args:
    device / gpu_ids / max_concurrent_computation_calls / log_path /
      install_signal_handlers: see the module docstring.
    executor_cache_size: at most this many executors (one per cohort size)
      are kept; the least recently used is closed beyond that.
    executor_idle_calls: an executor not used by the last this-many
      invocations is closed (None: never), freeing its worker state.
    worker_allocator: ``"auto"`` preloads jemalloc or tcmalloc into the worker
      when installed (else glibc, recycled, with a note at the first recycle); a library path preloads
      that; ``None`` or ``"glibc"`` keeps glibc's malloc.
    malloc_arena_max: glibc only: sets ``MALLOC_ARENA_MAX`` for the worker
      (unless already set). 1 also keeps it flat, but rounds get ~20-35%
      slower on a 2-core machine.
    worker_env: extra environment variables for the worker (applied last).
    workers: ``["host:port", ...]`` of running TFF workers (``python -m
      tff_idp.execution.worker``): no local worker is started; computations run on
      TFF's mergeable-comp context over the fleet (see :mod:`tff_idp.execution.fleet`).
      None (default): one local worker, started and owned here.
    worker_retries: fleet only: how many times a computation that fails on a
      worker is rerun on the workers left (0: fail at once).
    connect_timeout_s: fleet only: every worker must answer within this.
    rpc_timeout_s: fleet only: deadline of every gRPC call to a worker.
    tls: fleet only: :class:`tff_idp.execution.fleet.TlsConfig` for TLS channels.
    port: the local worker's port (default: a free one).
    listen_address: the IP address the local worker listens on (default: the
      ``TFF_IDP_WORKER_LISTEN`` environment variable, else ``127.0.0.1``, so only
      this machine can reach it; ``0.0.0.0`` for every interface). See
      :mod:`tff_idp.execution.listen_address`.
    recycle_worker_mib: a local glibc worker (no jemalloc/tcmalloc preloaded,
      no ``malloc_arena_max``) is restarted between rounds once its RSS has
      grown this many MiB past its size after ``_RECYCLE_WARMUP_ROUNDS``
      rounds, which keeps it flat at the cost of a worker start (~0.5 s) every
      ~100 small rounds (``benchmarks/bench_worker_memory.py``). ``None``:
      never. Default: :data:`DEFAULT_RECYCLE_WORKER_MIB` with glibc, never
      with an allocator that is flat by itself.
  """

  def __init__(self, device: str = "cpu", gpu_ids: Optional[Sequence[int]] = None,
               max_concurrent_computation_calls: int = -1,
               log_path: Optional[str] = None,
               install_signal_handlers: bool = True,
               executor_cache_size: int = 64,
               executor_idle_calls: Optional[int] = 100,
               worker_allocator: Optional[str] = "auto",
               malloc_arena_max: Optional[int] = None,
               worker_env: Optional[Mapping[str, str]] = None,
               workers: Optional[Sequence[str]] = None,
               worker_retries: int = 0,
               connect_timeout_s: float = fleet.DEFAULT_CONNECT_TIMEOUT_S,
               rpc_timeout_s: float = fleet.DEFAULT_RPC_TIMEOUT_S,
               tls: Optional[fleet.TlsConfig] = None,
               port: Optional[int] = None,
               listen_address: Optional[str] = None,
               recycle_worker_mib: Optional[float] = DEFAULT_RECYCLE_WORKER_MIB):
    if device not in ("cpu", "gpu"):
      raise ValueError(f"device={device!r} must be 'cpu' or 'gpu'.")
    self.device = device
    self.gpu_ids = list(gpu_ids) if gpu_ids is not None else None
    self.max_concurrent_computation_calls = int(max_concurrent_computation_calls)
    self.log_path = log_path
    if executor_cache_size < 1:
      raise ValueError("executor_cache_size must be >= 1.")
    self.executor_cache_size = int(executor_cache_size)
    if executor_idle_calls is not None and executor_idle_calls < 1:
      raise ValueError("executor_idle_calls must be >= 1 (or None: never).")
    self.executor_idle_calls = executor_idle_calls
    if malloc_arena_max is not None and malloc_arena_max < 1:
      raise ValueError("malloc_arena_max must be >= 1 (or None: glibc's default).")
    self.malloc_arena_max = malloc_arena_max
    self.worker_allocator = worker_allocator
    self.worker_allocator_path = _resolve_allocator(worker_allocator)
    self.worker_env = dict(worker_env or {})
    self.workers = fleet.parse_addresses(workers) if workers is not None else None
    if worker_retries < 0:
      raise ValueError("worker_retries must be >= 0.")
    if worker_retries and self.workers is None:
      raise ValueError("worker_retries needs a fleet (workers=[...]).")
    if tls is not None and self.workers is None:
      raise ValueError("TLS applies to remote workers only; give workers=[...].")
    for name, value in (("connect_timeout_s", connect_timeout_s),
                        ("rpc_timeout_s", rpc_timeout_s)):
      if not value > 0:
        raise ValueError(f"{name}={value} must be > 0 seconds.")
    if port is not None and workers is not None:
      raise ValueError("port is the local worker's; a fleet has no local worker.")
    self.requested_port = port
    self.listen_address = (listen.default_address() if listen_address is None
                           else listen.parse(listen_address))
    self.worker_retries = int(worker_retries)
    self.connect_timeout_s = float(connect_timeout_s)
    self.rpc_timeout_s = float(rpc_timeout_s)
    self.tls = tls
    self.context = None
    self._channels: dict = {}
    self._install_signal_handlers = install_signal_handlers
    self._process: Optional[subprocess.Popen] = None
    self._port: Optional[int] = None
    self._stub = None
    self._previous_context = None
    self._previous_handlers: dict[int, object] = {}
    self._stop_requested = False
    self._lock = threading.RLock()
    self._closed = False
    self._log_file = None
    if recycle_worker_mib is not None and not recycle_worker_mib >= 0:
      raise ValueError(f"recycle_worker_mib={recycle_worker_mib} must be >= 0 MiB (or None: "
                       "never recycle the worker).")
    flat_allocator = self.worker_allocator_path is not None or malloc_arena_max is not None
    self.recycle_worker_mib = (None if workers is not None or flat_allocator
                               else recycle_worker_mib)
    self.worker_recycles = 0
    self._rounds_since_start = 0
    self._warm_rss_mib: Optional[float] = None
    self._factory = None
    self._standby: Optional[dict] = None  # a replacement worker being started
    self._local_executors: "weakref.WeakSet" = weakref.WeakSet()  # on the local worker

  # ------------------------------------------------------------------ worker
  @property
  def worker_pid(self) -> Optional[int]:
    return self._process.pid if self._process is not None else None

  def _worker_env(self) -> dict:
    env = dict(os.environ)
    if self.device == "cpu":
      env["CUDA_VISIBLE_DEVICES"] = ""
    else:
      if self.gpu_ids is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in self.gpu_ids)
      env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if self.worker_allocator_path is not None:
      preload = env.get("LD_PRELOAD")
      env["LD_PRELOAD"] = self.worker_allocator_path + (f":{preload}" if preload else "")
    if self.malloc_arena_max is not None:
      env.setdefault("MALLOC_ARENA_MAX", str(self.malloc_arena_max))
    env.update(listen.worker_env(self.listen_address, env.get("LD_PRELOAD")))
    env.update(self.worker_env)
    return env

  def _spawn_worker(self, port: int) -> dict:
    """Launches a worker_binary on ``port`` without waiting for it: its process, stub, log."""
    if self._stop_requested:  # a signal asked the run to stop: never start another worker
      raise RuntimeError("this run was asked to stop (SIGTERM/Ctrl-C); no new TFF worker "
                         "is started.")
    from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub  # pylint: disable=g-import-not-at-top
    path = worker_binary_path()
    if not os.path.isfile(path):
      raise RuntimeError(f"TFF worker binary not found at {path}; reinstall "
                         "tensorflow-federated (see README).")
    log_file = open(self.log_path, "ab") if self.log_path else None  # pylint: disable=consider-using-with
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        _launch_command([
            path, f"--port={port}",
            f"--max_concurrent_computation_calls={self.max_concurrent_computation_calls}"]),
        stdin=subprocess.DEVNULL, stdout=log_file or subprocess.DEVNULL,
        stderr=log_file or subprocess.DEVNULL, close_fds=True, env=self._worker_env())
    channel = grpc.insecure_channel(listen.connect_target(self.listen_address, port),
                                    fleet.GRPC_OPTIONS)
    return {"process": process, "port": port, "log_file": log_file,
            "stub": remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)}

  def _adopt_worker(self, worker: dict) -> None:
    """Makes a spawned worker the runtime's, once it answers (RuntimeError if it never does)."""
    self._process, self._port = worker["process"], worker["port"]
    self._stub, self._log_file = worker["stub"], worker["log_file"]
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    while not self._stub.is_ready:
      if self._process.poll() is not None:
        raise RuntimeError(
            f"TFF worker_binary exited with code {self._process.returncode} "
            f"during start-up{'; see ' + self.log_path if self.log_path else ''}.")
      if time.monotonic() > deadline:
        self._stop_worker()
        raise RuntimeError(f"TFF worker_binary did not become ready in "
                           f"{_STARTUP_TIMEOUT_S:.0f} s.")
      time.sleep(0.02)

  def _signal_workers(self) -> None:
    """SIGTERM to the worker and its standby, by PID, if this runtime started them."""
    if self._process is not None:
      self._forget_remote_values()
    standby = self._standby
    for proc in (self._process, standby["process"] if standby else None):
      if proc is not None and proc.returncode is None:  # not reaped: still our child's PID
        try:
          os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
          pass

  def _start_worker(self):
    self._adopt_worker(self._spawn_worker(self.requested_port or
                                          portpicker.pick_unused_port()))

  @property
  def port(self) -> Optional[int]:
    """The local worker's port (None before it starts, and for a fleet)."""
    return self._port

  def launch_worker(self) -> subprocess.Popen:
    """Starts the local worker only (no TFF context); ``close()`` stops it."""
    with self._lock:
      if self._closed:
        raise RuntimeError("this ExecutionRuntime is closed.")
      if self.workers is not None:
        raise ValueError("a fleet runtime has no local worker to launch.")
      self._start_worker()
      return self._process

  def _get_stub(self):
    """The worker's stub. A worker that exited is an error, never restarted.

    Restarting silently would lose the state of executors in use and re-run
    work; a channel that is merely not READY reconnects by itself.
    """
    with self._lock:
      if self._closed:
        raise RuntimeError("this ExecutionRuntime is closed.")
      self.check_worker()
      return self._stub

  def check_worker(self) -> None:
    """Raises :class:`WorkerDiedError` if the worker process is gone."""
    proc = self._process
    if proc is None or self._stub is None:
      raise WorkerDiedError("the TFF worker is not running (runtime not started or closed).")
    code = proc.poll()
    if code is not None:
      raise WorkerDiedError(
          f"the TFF worker_binary (pid {proc.pid}) exited with code {code} "
          f"mid-run{'; see ' + self.log_path if self.log_path else ''}. "
          "Rerun the same command to resume from the last checkpoint.")

  def _forget_remote_values(self) -> None:
    """Tells the local worker's executors that their values need no disposing.

    Each TFF ``RemoteValue`` has a finalizer (garbage collection in any
    thread, or interpreter exit) that asks its executor to dispose it on the
    worker. Once the worker is stopped, that gRPC call is refused, and Python
    prints "Exception ignored in: <finalize object>" with a gRPC traceback after
    the run's last line (seen after a Ctrl-C in CI). TFF skips the call for a
    value whose executor id is no longer the executor's, as after
    ``RemoteExecutor.close()``; clearing the ids does that with no RPC, so it is
    safe in a signal handler. Called before the worker is signalled or stopped.

    A value can still be created afterwards: a response already in flight when
    Ctrl-C arrives is turned into a value with the cleared (None) id, and its
    finalizer then failed TFF's ``assert self._dispose_request is not None`` at
    exit, printing an AssertionError traceback after the "interrupted" line
    (seen once in CI under load). Each executor's ``_dispose`` is therefore
    replaced by a no-op as well, which covers those values too.
    """
    for executor in list(self._local_executors):
      executor._dispose = _dispose_nothing  # pylint: disable=protected-access
      executor._executor_id = None  # pylint: disable=protected-access
      executor._dispose_request = None  # pylint: disable=protected-access

  def _stop_worker(self, timeout_s: float = 10.0) -> None:
    if self._process is not None:
      self._forget_remote_values()
    proc, self._process, self._stub = self._process, None, None
    if proc is not None:
      _terminate(proc, timeout_s)
    if self._log_file is not None:
      self._log_file.close()
      self._log_file = None

  # ----------------------------------------------------------------- context
  def _executor_factory(self, get_stub: Callable[[], object], local: bool = False):
    """TFF's executor factory over one worker, with the closing LRU cache.

    ``local``: the worker is this runtime's own, so its executors are remembered
    for :meth:`_forget_remote_values` when it stops.
    """
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
    from tensorflow_federated.python.core.impl.executors import remote_executor
    from tensorflow_federated.python.core.impl.types import placements
    # pylint: enable=g-import-not-at-top

    def stack_fn(cardinalities):
      cardinalities.setdefault(placements.CLIENTS, 0)
      ex = remote_executor.RemoteExecutor(get_stub())
      ex.set_cardinalities(cardinalities)
      if local:
        self._local_executors.add(ex)
      return ex

    factory = python_executor_stacks.ResourceManagingExecutorFactory(stack_fn)
    # TFF keeps one executor per cohort size in an LRU cache of 10 and drops
    # evicted ones without closing them, so their state stays in the worker:
    # with Poisson sampling (cohort sizes spread over ~25-40 values) worker
    # memory grows without bound, and re-creating executors slows rounds.
    # A larger cache that closes what it evicts, and closes executors left
    # idle (rare cohort sizes), keeps both flat (see
    # benchmarks/bench_cohort_variation.py).
    factory._executors = _ClosingLRUCache(  # pylint: disable=protected-access
        self.executor_cache_size, self.executor_idle_calls)
    self._factory = factory
    return factory

  # --------------------------------------------------------------- recycling
  def maybe_recycle_worker(self) -> bool:
    """Restarts a grown local worker between rounds (see ``recycle_worker_mib``); True if so.

    Its warm size is its RSS ``_RECYCLE_WARMUP_ROUNDS`` rounds after the
    first start. Half-way to the bound a replacement is launched in the
    background, so the swap does not wait for a worker to start. Only call
    it when no computation is in flight.
    """
    if self.recycle_worker_mib is None or self._process is None or self._closed:
      return False
    self._rounds_since_start += 1
    rss = rss_mib(self._process.pid)
    if self._warm_rss_mib is None:
      if self._rounds_since_start >= _RECYCLE_WARMUP_ROUNDS:
        self._warm_rss_mib = rss
      return False
    grown = rss - self._warm_rss_mib
    if (grown > self.recycle_worker_mib / 2 and self._standby is None
        and self.requested_port is None):
      with self._lock:
        if not self._closed:
          self._standby = self._spawn_worker(portpicker.pick_unused_port())
    if not grown > self.recycle_worker_mib:
      return False
    if self.worker_allocator_path is None:
      note_glibc_worker_recycled(grown)
    self.recycle_worker()
    return True

  def recycle_worker(self) -> None:
    """Closes every cached executor, stops the local worker and switches to a fresh one."""
    with self._lock:
      if self._closed or self.workers is not None:
        raise RuntimeError("only a started runtime's local worker can be recycled.")
      cache = getattr(self._factory, "_executors", None)
      while cache:  # free the executors' state in the old worker first
        cache.popitem()
      self._stop_worker()
      standby, self._standby = self._standby, None
      if standby is not None and standby["process"].poll() is None:
        self._adopt_worker(standby)
      else:
        self._start_worker()
      self.worker_recycles += 1
      self._rounds_since_start = 0

  def _wait(self, future):
    watchdog = self.check_worker if self.workers is None else None
    try:
      return fleet.wait_interruptibly(future, _WATCHDOG_POLL_S, watchdog)
    except grpc.RpcError as e:  # a computation's own check, not gRPC's wrapping (issue 51)
      refused = fleet.refusal_of(e)
      if refused is None:
        raise
      raise refused from None

  def _local_context(self):
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.backends.native import compiler
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
    from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context
    # pylint: enable=g-import-not-at-top
    self._start_worker()
    context = sync_execution_context.SyncExecutionContext(
        executor_fn=self._executor_factory(self._get_stub, local=True),
        compiler_fn=compiler.desugar_and_transform_to_native,
        transform_args=tensorflow_computation.transform_args,
        transform_result=tensorflow_computation.transform_result)
    context._async_runner = fleet._WatchedRunner(  # pylint: disable=protected-access
        context._async_runner, self._wait)  # pylint: disable=protected-access
    return context

  def _fleet_context(self) -> "fleet.FleetContext":
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.backends.native import compiler
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
    from tensorflow_federated.python.core.impl.context_stack import context_base
    from tensorflow_federated.python.core.impl.execution_contexts import async_execution_context
    # pylint: enable=g-import-not-at-top
    channels = {a: fleet.open_channel(a, self.tls) for a in self.workers}
    self._channels = channels
    fleet.wait_until_ready(channels, self.connect_timeout_s)
    stub_class = fleet._deadline_stub_class()  # pylint: disable=protected-access
    own_loop = fleet._own_loop_context_class()  # pylint: disable=protected-access
    stubs = {a: stub_class(a, ch, self.rpc_timeout_s) for a, ch in channels.items()}

    def make_worker_context(address: str):
      inner = async_execution_context.AsyncExecutionContext(
          executor_fn=self._executor_factory(lambda: stubs[address]),
          compiler_fn=compiler.desugar_and_transform_to_native,
          transform_args=tensorflow_computation.transform_args,
          transform_result=tensorflow_computation.transform_result)
      return own_loop(inner, address)

    context_base.SyncContext.register(fleet.FleetContext)
    return fleet.FleetContext(self.workers, make_worker_context,
                              retries=self.worker_retries, wait_fn=self._wait)

  def start(self) -> "ExecutionRuntime":
    """Starts the worker (or connects to the fleet) and installs TFF's default context."""
    from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
    with self._lock:
      if self._closed:
        raise RuntimeError("an ExecutionRuntime cannot be restarted; make a new one.")
      if self.workers is None:
        context = self._local_context()
      else:
        context = self._fleet_context()
      context.invoke = client_input_hints.explaining_client_inputs(context.invoke)
      self.context = context
      _active.append(self)
      stack = context_stack_impl.context_stack
      self._previous_context = stack.current
      stack.set_default_context(context)
      atexit.register(self.close)
      if self._install_signal_handlers and (
          threading.current_thread() is threading.main_thread()):
        for sig in (signal.SIGINT, signal.SIGTERM):
          self._previous_handlers[sig] = signal.getsignal(sig)
          signal.signal(sig, self._on_signal)
    return self

  @contextlib.contextmanager
  def program_context(self) -> Iterator[object]:
    """TFF's program-API context over this runtime's worker, installed for the ``with`` block.

    ``tff.learning.programs.train_model`` and other ``tff.program`` logic need
    a ``tff.program.NativeFederatedContext`` (an async context), not the
    synchronous default this runtime installs. This one is
    :class:`tff_idp.execution.program_context.ClientListFederatedContext`,
    which also passes structured client data (SCALE, APES) that TFF 0.87's
    own context mangles. Inside the block the same
    worker and executor cache serve the program; on exit the previous
    context is back. Local worker only (not a fleet)::

        with runtime.program_context():
          asyncio.run(tff.learning.programs.train_model(...))
    """
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.backends.native import compiler
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
    from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
    from tensorflow_federated.python.core.impl.execution_contexts import async_execution_context
    from tff_idp.execution import program_context
    # pylint: enable=g-import-not-at-top
    if self.context is None or self._closed:
      raise RuntimeError("start the runtime before asking for its program context.")
    if self.workers is not None:
      raise RuntimeError("program_context() runs on the local worker; a fleet runtime has "
                         "no single executor for TFF's program API.")
    inner = async_execution_context.AsyncExecutionContext(
        executor_fn=self._factory, compiler_fn=compiler.desugar_and_transform_to_native,
        transform_args=tensorflow_computation.transform_args,
        transform_result=tensorflow_computation.transform_result)
    context = program_context.ClientListFederatedContext(inner)
    with context_stack_impl.context_stack.install(context):
      yield context

  def _on_signal(self, signum, frame):
    # Read the handler to chain to first: close() restores and forgets them
    # (reading it after close() lost the CLI's "terminated; resume ..." line
    # once a runtime had started, and exited with a bare 143).
    previous = self._previous_handlers.get(signum)
    # Only what is safe while TensorFlow's and gRPC's threads still run: the
    # worker(s) this runtime started get SIGTERM by PID, with no waiting and no
    # lock. The channels, executors and TFF's context are released by close()
    # on the way out (the ``with`` block's exit, or atexit), once the
    # exception raised here has unwound the stack: releasing them from the
    # handler freed native memory that other threads were using (issue 33: a
    # glibc "free(): invalid next size" abort instead of exit 143).
    self._stop_requested = True
    self._signal_workers()
    if callable(previous):
      previous(signum, frame)
    elif signum == signal.SIGINT:
      raise KeyboardInterrupt
    else:
      raise SystemExit(128 + signum)

  def close(self, lock_timeout_s: float = -1) -> None:
    """Stops the worker (by PID) and restores the previous TFF context. Idempotent.

    Args:
      lock_timeout_s: wait at most this long for another thread's use of the
        runtime to finish (-1: as long as it takes); past it, close anyway.
    """
    acquired = self._lock.acquire(timeout=lock_timeout_s)
    try:
      if self._closed:
        return
      self._closed = True
      if self in _active:
        _active.remove(self)
      if isinstance(self.context, fleet.FleetContext):
        self.context.close()  # subrounds still in flight end in errors no one reads
      self._stop_worker()
      standby, self._standby = self._standby, None
      if standby is not None:
        _terminate(standby["process"])
        if standby["log_file"] is not None:
          standby["log_file"].close()
      for channel in self._channels.values():
        channel.close()
      self._channels = {}
      if self._previous_context is not None:
        from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
        context_stack_impl.context_stack.set_default_context(self._previous_context)
        self._previous_context = None
      if threading.current_thread() is threading.main_thread():
        for sig, handler in self._previous_handlers.items():
          if signal.getsignal(sig) == self._on_signal:
            signal.signal(sig, handler)
      self._previous_handlers.clear()
    finally:
      if acquired:
        self._lock.release()
    atexit.unregister(self.close)

  def __enter__(self) -> "ExecutionRuntime":
    return self.start()

  def __exit__(self, *exc) -> None:
    self.close()


@contextlib.contextmanager
def execution_context(device: str = "cpu", **kwargs) -> Iterator[ExecutionRuntime]:
  """``with execution_context(): ...`` runs TFF computations on an owned worker."""
  runtime = ExecutionRuntime(device=device, **kwargs)
  with runtime:
    yield runtime
