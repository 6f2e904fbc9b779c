"""The one place that owns the TFF execution context and its worker process.

TFF 0.87 executes computations in a C++ ``worker_binary`` that the stock
context (``tff.backends.native.set_sync_local_cpp_execution_context``) starts
lazily and never stops: it outlives Python as an orphan and keeps the parent's
stdout/stderr pipes open, which hangs CI jobs and shells. ``ExecutionRuntime``
starts the worker itself and guarantees it ends with the run:

* the worker gets its own stdin/stdout/stderr (``/dev/null`` or a log file),
  so it never holds the parent's pipes;
* ``PR_SET_PDEATHSIG`` asks Linux to SIGKILL it if the Python process dies,
  even by SIGKILL;
* ``close()`` runs on normal exit (context manager and ``atexit``), on
  exceptions, and on SIGINT/SIGTERM (handlers chain to the previous ones).
  It ends only the process this runtime started, by PID.

Devices: ``device="cpu"`` hides GPUs from the worker. ``device="gpu"`` exposes
the chosen GPUs (``gpu_ids``) with memory growth on; the worker binary places
TensorFlow ops itself and has no per-device flags, so
``max_concurrent_computation_calls`` is the knob that bounds how many client
computations run in parallel (and so GPU memory).
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from typing import Iterator, Optional, Sequence

import cachetools
import grpc
import portpicker

_PR_SET_PDEATHSIG = 1
_STARTUP_TIMEOUT_S = 60.0
_GRPC_OPTIONS = [
    ("grpc.max_message_length", 2 * 1000 * 1000 * 1000),
    ("grpc.max_receive_message_length", 2 * 1000 * 1000 * 1000),
    ("grpc.max_send_message_length", 2 * 1000 * 1000 * 1000),
]


def worker_binary_path() -> str:
  import tensorflow_federated  # pylint: disable=import-outside-toplevel
  return os.path.join(os.path.dirname(tensorflow_federated.__file__), "data",
                      "worker_binary")


def _die_with_parent() -> None:
  """Runs in the child before exec: SIGKILL me when my parent dies."""
  try:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  except OSError:
    pass


class _ClosingLRUCache(cachetools.LRUCache):
  """LRU cache of executors that closes the ones it evicts."""

  def popitem(self):
    key, executor = super().popitem()
    try:
      executor.close()
    except Exception:  # pylint: disable=broad-except
      pass  # the worker may already be gone; nothing left to free
    return key, executor


class ExecutionRuntime:
  """Owns a TFF C++ execution context and its ``worker_binary`` process."""

  def __init__(self, device: str = "cpu", gpu_ids: Optional[Sequence[int]] = None,
               max_concurrent_computation_calls: int = -1,
               log_path: Optional[str] = None,
               install_signal_handlers: bool = True,
               executor_cache_size: int = 64):
    if device not in ("cpu", "gpu"):
      raise ValueError(f"device={device!r} must be 'cpu' or 'gpu'.")
    self.device = device
    self.gpu_ids = list(gpu_ids) if gpu_ids is not None else None
    self.max_concurrent_computation_calls = int(max_concurrent_computation_calls)
    self.log_path = log_path
    if executor_cache_size < 1:
      raise ValueError("executor_cache_size must be >= 1.")
    self.executor_cache_size = int(executor_cache_size)
    self._install_signal_handlers = install_signal_handlers
    self._process: Optional[subprocess.Popen] = None
    self._port: Optional[int] = None
    self._stub = None
    self._previous_context = None
    self._previous_handlers: dict[int, object] = {}
    self._lock = threading.RLock()
    self._closed = False
    self._log_file = None

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
    return env

  def _start_worker(self):
    from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub  # pylint: disable=g-import-not-at-top
    path = worker_binary_path()
    if not os.path.isfile(path):
      raise RuntimeError(f"TFF worker binary not found at {path}; reinstall "
                         "tensorflow-federated (see README).")
    self._port = portpicker.pick_unused_port()
    if self.log_path:
      self._log_file = open(self.log_path, "ab")  # pylint: disable=consider-using-with
      out = self._log_file
    else:
      out = subprocess.DEVNULL
    self._process = subprocess.Popen(  # pylint: disable=consider-using-with
        [path, f"--port={self._port}",
         f"--max_concurrent_computation_calls={self.max_concurrent_computation_calls}"],
        stdin=subprocess.DEVNULL, stdout=out, stderr=out, close_fds=True,
        env=self._worker_env(), preexec_fn=_die_with_parent)
    channel = grpc.insecure_channel(f"localhost:{self._port}", _GRPC_OPTIONS)
    self._stub = remote_executor_grpc_stub.RemoteExecutorGrpcStub(channel)
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
      time.sleep(0.1)

  def _get_stub(self):
    with self._lock:
      if self._closed:
        raise RuntimeError("this ExecutionRuntime is closed.")
      if self._stub is None or not self._stub.is_ready:
        self._stop_worker()
        self._start_worker()
      return self._stub

  def _stop_worker(self, timeout_s: float = 10.0) -> None:
    proc, self._process, self._stub = self._process, None, None
    if proc is not None and proc.poll() is None:
      try:
        proc.terminate()
        proc.wait(timeout=timeout_s)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout_s)
      except ProcessLookupError:
        pass
    if self._log_file is not None:
      self._log_file.close()
      self._log_file = None

  # ----------------------------------------------------------------- context
  def start(self) -> "ExecutionRuntime":
    """Starts the worker and installs this runtime as TFF's default context."""
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.backends.native import compiler
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
    from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
    from tensorflow_federated.python.core.impl.execution_contexts import sync_execution_context
    from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
    from tensorflow_federated.python.core.impl.executors import remote_executor
    from tensorflow_federated.python.core.impl.types import placements
    # pylint: enable=g-import-not-at-top
    with self._lock:
      if self._closed:
        raise RuntimeError("an ExecutionRuntime cannot be restarted; make a new one.")
      self._start_worker()

      def stack_fn(cardinalities):
        cardinalities.setdefault(placements.CLIENTS, 0)
        ex = remote_executor.RemoteExecutor(self._get_stub())
        ex.set_cardinalities(cardinalities)
        return ex

      factory = python_executor_stacks.ResourceManagingExecutorFactory(stack_fn)
      # TFF keeps one executor per cohort size in an LRU cache of 10 and drops
      # evicted ones without closing them, so their state stays in the worker:
      # with Poisson sampling (cohort sizes spread over ~25-40 values) worker
      # memory grows without bound, and re-creating executors slows rounds.
      # A larger cache that closes what it evicts keeps both flat (see
      # benchmarks/bench_cohort_variation.py).
      factory._executors = _ClosingLRUCache(  # pylint: disable=protected-access
          self.executor_cache_size)
      context = sync_execution_context.SyncExecutionContext(
          executor_fn=factory,
          compiler_fn=compiler.desugar_and_transform_to_native,
          transform_args=tensorflow_computation.transform_args,
          transform_result=tensorflow_computation.transform_result)
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

  def _on_signal(self, signum, frame):
    self.close()
    previous = self._previous_handlers.get(signum)
    if callable(previous):
      previous(signum, frame)
    elif signum == signal.SIGINT:
      raise KeyboardInterrupt
    else:
      raise SystemExit(128 + signum)

  def close(self) -> None:
    """Stops the worker (by PID) and restores the previous TFF context. Idempotent."""
    with self._lock:
      if self._closed:
        return
      self._closed = True
      self._stop_worker()
      if self._previous_context is not None:
        from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
        context_stack_impl.context_stack.set_default_context(self._previous_context)
        self._previous_context = None
      if threading.current_thread() is threading.main_thread():
        for sig, handler in self._previous_handlers.items():
          if signal.getsignal(sig) == self._on_signal:
            signal.signal(sig, handler)
      self._previous_handlers.clear()
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
