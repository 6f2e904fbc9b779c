"""Running TFF computations on a fleet of remote ``worker_binary`` processes.

A fleet is a list of ``host:port`` addresses, each a stock TFF
``worker_binary`` (start one per machine with ``python -m tff_idp.execution.worker``).
The fleet runs on TFF's own distributed runtime, nothing home-made:

* one :class:`AsyncExecutionContext` per worker, talking TFF's remote-executor
  gRPC protocol through :class:`DeadlineStub`;
* TFF's :class:`MergeableCompExecutionContext` on top: a computation is
  compiled to ``MergeableCompForm`` (client work and the aggregation's
  accumulate/merge up to the merge, then the server part), each worker runs
  ``up_to_merge`` on its share of the cohort, the partial aggregates are
  merged, and ``after_merge`` (the server update, where the DP aggregator adds
  its noise) runs **once**, on the merged sum. Noise is never added per worker.

What this module adds to TFF's pieces:

* **Deadlines and names.** Every gRPC call has a deadline (``rpc_timeout_s``);
  any failure raises :class:`WorkerError` naming the worker. TFF would retry
  "retryable" gRPC errors (UNAVAILABLE, ...) forever, so a dead worker would
  hang the run; these errors are not retryable here.
* **Start-up check.** :func:`connect` waits for every worker at once and names
  each one that does not answer within ``connect_timeout_s``.
* **Parallel subrounds.** TFF's ``RemoteExecutor`` makes blocking gRPC calls
  inside the event loop, which would run the workers' subrounds one after
  another; each worker gets its own event-loop thread here.
* **Optional retries** (:class:`FleetContext`, ``retries``): a round that fails
  on a worker is run again, with the same arguments, on the workers left. This
  releases nothing twice: a failed round returns no result (the server part
  runs only after every partial sum has arrived), and the DP noise is a
  stateless function of the aggregator's state and round number, so the rerun
  adds the same noise to the same cohort's sum (up to float summation order).
* **TLS.** :class:`TlsConfig` gives the channels TLS (and mutual TLS) credentials.

A worker executes whatever computation it is sent: never expose one to an
untrusted network.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import re
import threading
import time
from typing import Callable, Optional, Sequence

import grpc

from tff_idp.errors import ComputationRefusedError
from tff_idp.errors import TffIdpError

_LOG = logging.getLogger(__name__)

DEFAULT_CONNECT_TIMEOUT_S = 30.0
DEFAULT_RPC_TIMEOUT_S = 600.0
GRPC_OPTIONS = [  # messages up to 2 GB (model weights, client datasets)
    ("grpc.max_message_length", 2 * 1000 * 1000 * 1000),
    ("grpc.max_receive_message_length", 2 * 1000 * 1000 * 1000),
    ("grpc.max_send_message_length", 2 * 1000 * 1000 * 1000),
]


_ASSERTION = re.compile(r"assertion failed: \[(?P<message>[^\]]*)\]")


def refusal_of(error: BaseException) -> Optional[ComputationRefusedError]:
  """The check a TFF computation failed in the worker, from its gRPC error; else None.

  A ``tf.debugging.assert_*`` (or an ``InvalidArgumentError``) inside a
  computation reaches the caller as ``_InactiveRpcError`` with status
  ``INTERNAL`` and the TensorFlow message in its details (issue 51). This
  turns it into one line led by the check's own message; any other gRPC
  error (a worker gone, a deadline) is not a refusal and gives None.
  """
  if not isinstance(error, grpc.Call) or error.code() not in (
      grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT):
    return None
  detail = " ".join((error.details() or "").split())
  found = _ASSERTION.search(detail)
  if found is None and "InvalidArgument" not in detail:
    return None
  detail = detail.replace("Failed to run computation: ", "")
  lead = f"{found.group('message')} " if found else ""
  return ComputationRefusedError(
      f"a TFF computation refused its input: {lead}(TensorFlow: {detail[:300]})")


class WorkerError(TffIdpError, RuntimeError):
  """A worker of the fleet failed, did not answer in time, or cannot be reached.

  Attributes:
    address: the worker's ``host:port`` (a comma-separated list at start-up).
  """

  def __init__(self, address: str, message: str):
    super().__init__(message)
    self.address = address


@dataclasses.dataclass(frozen=True)
class TlsConfig:
  """TLS credentials for the channels to the workers (PEM file paths).

  Attributes:
    ca_path: CA certificate(s) that signed the workers' certificates.
    cert_path / key_path: this client's certificate and key, for mutual TLS
      (both or neither).
    server_name: overrides the name checked against the workers' certificates
      (e.g. when connecting by IP address).
  """
  ca_path: str
  cert_path: Optional[str] = None
  key_path: Optional[str] = None
  server_name: Optional[str] = None

  def __post_init__(self):
    if (self.cert_path is None) != (self.key_path is None):
      raise ValueError("mutual TLS needs both a client certificate and its key "
                       "(--worker_tls_cert and --worker_tls_key), or neither.")

  def credentials(self) -> grpc.ChannelCredentials:
    def read(path: Optional[str]) -> Optional[bytes]:
      if path is None:
        return None
      try:
        with open(path, "rb") as f:
          return f.read()
      except OSError as e:
        raise ValueError(f"cannot read TLS file {path}: {e.strerror}") from e
    return grpc.ssl_channel_credentials(root_certificates=read(self.ca_path),
                                        private_key=read(self.key_path),
                                        certificate_chain=read(self.cert_path))


def parse_addresses(spec: Sequence[str] | str) -> list[str]:
  """``"h1:p1,h2:p2"`` (or a list) -> validated ``host:port`` strings."""
  items = spec.split(",") if isinstance(spec, str) else list(spec)
  addresses = [a.strip() for a in items if a.strip()]
  if not addresses:
    raise ValueError("no worker address given; pass host:port[,host:port...].")
  for address in addresses:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
      raise ValueError(f"worker address {address!r} is not host:port (e.g. "
                       "localhost:8000 or 10.0.0.2:8000).")
  if len(set(addresses)) != len(addresses):
    raise ValueError(f"worker addresses repeat: {addresses}; each worker once.")
  return addresses


def open_channel(address: str, tls: Optional[TlsConfig] = None) -> grpc.Channel:
  if tls is None:
    return grpc.insecure_channel(address, GRPC_OPTIONS)
  options = list(GRPC_OPTIONS)
  if tls.server_name:
    options.append(("grpc.ssl_target_name_override", tls.server_name))
  return grpc.secure_channel(address, tls.credentials(), options)


def wait_until_ready(channels: dict[str, grpc.Channel], timeout_s: float) -> None:
  """Waits for all channels at once; names every worker not ready in time."""
  futures = {a: grpc.channel_ready_future(ch) for a, ch in channels.items()}
  deadline = time.monotonic() + timeout_s
  missing = []
  for address, future in futures.items():
    try:  # all connect at once: together they wait at most timeout_s
      future.result(timeout=max(0.01, deadline - time.monotonic()))
    except grpc.FutureTimeoutError:
      future.cancel()
      missing.append(address)
  if missing:
    raise WorkerError(
        ",".join(missing),
        f"TFF worker(s) {', '.join(missing)} did not answer within the "
        "connect timeout; start them with `python -m tff_idp.execution.worker --port=P` "
        "on their hosts, check host:port, firewalls and TLS settings.")


def _deadline_stub_class():
  """Defined lazily: the base class lives in TensorFlow Federated."""
  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.proto.v0 import executor_pb2
  from tensorflow_federated.proto.v0 import executor_pb2_grpc
  from tensorflow_federated.python.core.impl.executors import remote_executor_stub
  # pylint: enable=g-import-not-at-top

  class DeadlineStub(remote_executor_stub.RemoteExecutorStub):
    """TFF's remote-executor stub with a deadline on every call and named errors."""

    def __init__(self, address: str, channel: grpc.Channel, rpc_timeout_s: float):
      self.address = address
      self._channel = channel
      self._stub = executor_pb2_grpc.ExecutorGroupStub(channel)
      self._timeout = rpc_timeout_s

    def _call(self, name: str, request):
      try:
        return getattr(self._stub, name)(request, timeout=self._timeout)
      except ValueError as e:  # the runtime closed the channel (run ending)
        raise WorkerError(self.address, f"TFF worker {self.address}: {e}") from None
      except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else None
        detail = e.details() if isinstance(e, grpc.Call) else str(e)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
          why = f"did not answer {name} within {self._timeout:g} s"
        else:
          why = f"failed on {name}: {code.name if code else 'error'}: {detail}"
        raise WorkerError(self.address, f"TFF worker {self.address} {why}. The "
                          "round was not released; rerun the same command to "
                          "resume from the last checkpoint.") from None

    def get_executor(self, request):
      return self._call("GetExecutor", request)

    def create_value(self, request):
      return self._call("CreateValue", request)

    def create_struct(self, request):
      return self._call("CreateStruct", request)

    def create_call(self, request):
      return self._call("CreateCall", request)

    def create_selection(self, request):
      return self._call("CreateSelection", request)

    def compute(self, request):
      return self._call("Compute", request)

    def _release(self, name: str, request, response_type):
      """Freeing worker memory is best effort: a failure here must not mask the
      error that caused the clean-up (or fail a round whose result is in)."""
      try:
        return self._call(name, request)
      except WorkerError as e:
        _LOG.debug("%s", e)
        return response_type()

    def dispose(self, request):
      return self._release("Dispose", request, executor_pb2.DisposeResponse)

    def dispose_executor(self, request):
      return self._release("DisposeExecutor", request, executor_pb2.DisposeExecutorResponse)

    @property
    def is_ready(self) -> bool:
      return True

  return DeadlineStub


def _own_loop_context_class():
  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.common_libs import async_utils
  from tensorflow_federated.python.core.impl.context_stack import context_base
  # pylint: enable=g-import-not-at-top

  class OwnLoopContext(context_base.AsyncContext):
    """Runs an async context's invocations on a dedicated event-loop thread.

    TFF's RemoteExecutor blocks its event loop on every gRPC call; with one
    loop per worker, the workers' subrounds run in parallel.
    """

    def __init__(self, inner, address: str):
      self._inner = inner
      self.address = address
      self._runner = async_utils.AsyncThreadRunner()
      self.arg_filter: Optional[Callable] = None  # (comp, arg) -> arg

    async def invoke(self, comp, arg):
      if self.arg_filter is not None:
        arg = self.arg_filter(comp, arg)
      return await self._runner.await_coro_and_return_result(
          self._inner.invoke(comp, arg))

  return OwnLoopContext


class FleetContext:
  """TFF's mergeable-comp context over a fleet, with optional round retries.

  Built by :func:`connect`; installed as TFF's default context by
  :class:`tff_idp.execution.runtime.ExecutionRuntime`.
  """

  def __init__(self, addresses: Sequence[str], make_worker_context: Callable,
               retries: int = 0, wait_fn: Optional[Callable] = None):
    if retries < 0:
      raise ValueError("worker_retries must be >= 0.")
    self.addresses = list(addresses)
    self.retries = int(retries)
    self._make_worker_context = make_worker_context
    self._worker_contexts = {a: make_worker_context(a) for a in self.addresses}
    self._server_only_after_merge: dict[int, tuple] = {}
    for context in self._worker_contexts.values():
      if hasattr(context, "arg_filter"):
        context.arg_filter = self._drop_client_values_after_merge
    self._live = list(self.addresses)
    self._wait_fn = wait_fn
    self._lock = threading.Lock()
    self.retried_rounds = 0
    # Set once a round has failed for good or the runtime closes: from then on
    # the subrounds still in flight only end in errors nobody will read.
    self.stopping = False
    for context in self._worker_contexts.values():
      runner = getattr(context, "_runner", None)
      if runner is not None:
        runner._event_loop.set_exception_handler(self._on_task_error)  # pylint: disable=protected-access
    self._context = self._build()

  def close(self) -> None:
    """Marks the fleet as stopping (no waiting: it runs on the signal path too)."""
    self.stopping = True

  def _on_task_error(self, loop, context: dict) -> None:
    """asyncio's handler for the fleet's event loops.

    After one worker fails a round, the other workers' subrounds still end (in
    error once the run closes its channels, or while the interpreter tears
    their modules down at exit); the round's error is already raised, so
    asyncio's "Task exception was never retrieved" for them is noise (issue 33:
    102 lines after one SIGTERM'd worker).
    """
    if self.stopping or isinstance(context.get("exception"), WorkerError):
      _LOG.debug("after the fleet stopped: %s", context.get("message"))
      return
    loop.default_exception_handler(context)

  @property
  def live_workers(self) -> list[str]:
    return list(self._live)

  def _build(self):
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.backends.native import mergeable_comp_compiler
    from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context as mcec
    # pylint: enable=g-import-not-at-top
    context = mcec.MergeableCompExecutionContext(
        async_contexts=[self._worker_contexts[a] for a in self._live],
        compiler_fn=_compile_or_explain(mergeable_comp_compiler.compile_to_mergeable_comp_form,
                                        self._register_after_merge))
    loop = context._async_runner._event_loop  # pylint: disable=protected-access
    loop.set_exception_handler(self._on_task_error)
    if self._wait_fn is not None:
      context._async_runner = _WatchedRunner(context._async_runner, self._wait_fn)  # pylint: disable=protected-access
    return context

  def _register_after_merge(self, form) -> None:
    """Remembers ``after_merge`` computations whose result has no CLIENTS part.

    TFF passes ``after_merge`` the round's whole original argument, client
    datasets included, so they would be shipped to a worker twice. Without
    aggregations (MergeableCompForm forbids them there) nothing CLIENTS-placed
    can reach a SERVER-placed result, so for such an ``after_merge`` the
    CLIENTS-placed inputs are replaced by empty lists: same result, data
    shipped once (see ``benchmarks/bench_workers.py``).
    """
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.core.impl.types import placements
    from tensorflow_federated.python.core.impl.types import type_analysis
    # pylint: enable=g-import-not-at-top
    after = form.after_merge
    param = form.up_to_merge.type_signature.parameter
    if param is None:
      return

    def not_at_clients(t) -> bool:
      return not (getattr(t, "placement", None) is placements.CLIENTS and not t.all_equal)

    if type_analysis.contains_only(after.type_signature.result, not_at_clients):
      self._server_only_after_merge[id(after)] = (after, param)

  def _drop_client_values_after_merge(self, comp, arg):
    entry = self._server_only_after_merge.get(id(comp))
    if entry is None or entry[0] is not comp:
      return arg
    # pylint: disable=g-import-not-at-top
    from tensorflow_federated.python.common_libs import structure
    # pylint: enable=g-import-not-at-top
    original, merged = structure.to_elements(arg)
    return structure.Struct.unnamed(_without_client_values(original[1], entry[1]),
                                    merged[1])

  def invoke(self, comp, arg):
    attempt = 0
    while True:
      try:
        return self._context.invoke(comp, arg)
      except WorkerError as e:
        with self._lock:
          if attempt >= self.retries or e.address not in self._live or len(self._live) == 1:
            self.stopping = True
            raise
          attempt += 1
          self._live.remove(e.address)
          self.retried_rounds += 1
          _LOG.warning(
              "worker %s failed (%s); retrying the computation on %d worker(s) "
              "left (%d of %d retries). The failed attempt released nothing; the "
              "retry adds the same noise (a function of the round's state).",
              e.address, e, len(self._live), attempt, self.retries)
          self._context = self._build()


def _without_client_values(value, type_spec):
  """``value`` with every non-all-equal CLIENTS-placed part replaced by ``[]``."""
  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.common_libs import structure
  from tensorflow_federated.python.core.impl.types import computation_types
  from tensorflow_federated.python.core.impl.types import placements
  # pylint: enable=g-import-not-at-top
  if isinstance(type_spec, computation_types.StructType):
    elements = structure.iter_elements(structure.from_container(value))
    return structure.Struct([
        (name, _without_client_values(v, t)) for (_, v), (name, t) in
        zip(elements, structure.iter_elements(type_spec))])
  if (isinstance(type_spec, computation_types.FederatedType)
      and type_spec.placement is placements.CLIENTS and not type_spec.all_equal):
    return []
  return value


def _compile_or_explain(compile_fn, on_compiled: Optional[Callable] = None):
  """Wraps the mergeable-form compiler so a refusal names the computation."""

  def compile_mergeable(comp):
    try:
      form = compile_fn(comp)
      if on_compiled is not None:
        on_compiled(form)
      return form
    except NotMergeableError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      raise NotMergeableError(
          f"TFF computation {comp.type_signature} cannot run on a fleet: it cannot "
          "be compiled to MergeableCompForm (client work, then one layer of "
          f"aggregations, then server work): {type(e).__name__}: {e}") from e

  return compile_mergeable


class NotMergeableError(TffIdpError, ValueError):
  """A computation has aggregations that depend on other aggregations."""


class _WatchedRunner:
  """Wraps an ``AsyncThreadRunner`` so a blocked caller still handles signals."""

  def __init__(self, inner, wait_fn: Callable):
    self._inner = inner
    self._wait_fn = wait_fn

  def run_coro_and_return_result(self, coro):
    future = asyncio.run_coroutine_threadsafe(coro, self._inner._event_loop)  # pylint: disable=protected-access
    return self._wait_fn(future)

  def __getattr__(self, name):
    return getattr(self._inner, name)


def wait_interruptibly(future: concurrent.futures.Future, poll_s: float,
                       watchdog: Optional[Callable[[], None]] = None):
  """``future.result()`` that wakes every ``poll_s`` (signals) and runs ``watchdog``."""
  try:
    while True:
      done, _ = concurrent.futures.wait([future], timeout=poll_s)
      if done:
        return future.result()
      if watchdog is not None:
        watchdog()
  except BaseException:
    future.cancel()
    raise
