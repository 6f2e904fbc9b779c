"""``python -m tff_idp.execution.worker``: one TFF worker for a fleet, in the foreground.

Starts and supervises TFF's stock ``worker_binary`` (the remote-executor gRPC
service of TFF's distributed runtime) and serves until SIGINT/SIGTERM:

  python -m tff_idp.execution.worker --port=8000                     # CPU
  python -m tff_idp.execution.worker --port=8000 --device=gpu --max_concurrent_computation_calls=4

Then, on the machine that drives the experiment:

  python -m experiments.idp_fedavg --workers=host1:8000,host2:8000

* It prints where it listens once the worker answers, and its PID.
* SIGINT/SIGTERM stop the worker (by PID) and exit 130/143; the worker also
  dies with this process if it is killed (PR_SET_PDEATHSIG), so no child is
  ever left behind. If the worker exits by itself, so does this, with its code.
* It listens on ``--listen_address``, ``127.0.0.1`` by default: only this
  machine can reach it (the stock binary listens on every interface; see
  :mod:`tff_idp.execution.listen_address`). Any other address needs TLS, or
  ``--insecure_plaintext`` to accept plaintext on a network you trust.
* ``--tls_cert``/``--tls_key`` (optionally ``--tls_client_ca`` for mutual TLS):
  the stock worker speaks plaintext gRPC only, so this process serves TLS on
  ``--listen_address:--port`` and forwards each call, unchanged, to the worker
  on ``127.0.0.1:--internal_port`` (a free one by default), which only this
  machine can reach.

**Security.** A worker executes whatever TFF computation it is sent, i.e.
arbitrary TensorFlow graphs with file and network ops: never expose one to
an untrusted network. Plaintext is for loopback and trusted clusters.
"""
from __future__ import annotations

import errno
import signal
import socket
import sys
import threading
import time
from typing import Optional

from tff_idp import console

console.quiet_tensorflow()

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position
import grpc  # pylint: disable=g-import-not-at-top,wrong-import-position

from tff_idp import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from tff_idp.execution import listen_address as listen  # pylint: disable=g-import-not-at-top,wrong-import-position
from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top,wrong-import-position

_PORT = flags.DEFINE_integer("port", None, "Port the fleet connects to.")
_DEVICE = flags.DEFINE_enum("device", "cpu", ["cpu", "gpu"], "Device of the worker.")
_GPU_IDS = flags.DEFINE_list("gpu_ids", None, "GPUs the worker may use (default all).")
_MAX_CALLS = flags.DEFINE_integer(
    "max_concurrent_computation_calls", -1,
    "Client computations the worker runs in parallel (-1: no limit).")
_LOG_PATH = flags.DEFINE_string("log_path", None,
                                "Append the worker binary's own log here (default: discard).")
_TLS_CERT = flags.DEFINE_string("tls_cert", None, "PEM certificate: serve TLS on --port.")
_TLS_KEY = flags.DEFINE_string("tls_key", None, "PEM private key of --tls_cert.")
_TLS_CLIENT_CA = flags.DEFINE_string(
    "tls_client_ca", None, "PEM CA: require client certificates it signed (mutual TLS).")
_LISTEN_ADDRESS = flags.DEFINE_string(
    "listen_address", listen.LOOPBACK,
    "IP address to listen on. The default, loopback, is reachable from this machine only; "
    "any other (0.0.0.0: every interface) needs --tls_cert/--tls_key or --insecure_plaintext.")
_INSECURE_PLAINTEXT = flags.DEFINE_bool(
    "insecure_plaintext", False,
    "Serve plaintext gRPC on a --listen_address other machines can reach: anyone who can "
    "reach it can run computations here, unauthenticated. For trusted networks only.")
_INTERNAL_PORT = flags.DEFINE_integer(
    "internal_port", None, "With TLS: the plaintext worker's port (default: a free one).")


def _read(path: str, what: str) -> bytes:
  try:
    with open(path, "rb") as f:
      return f.read()
  except OSError as e:
    raise ValueError(f"cannot read {what} {path}: {e.strerror}") from e


class TlsForwarder:
  """A TLS gRPC server on ``port`` that forwards every call to a plaintext worker.

  Calls are forwarded as opaque bytes (no re-serialization), with the
  caller's remaining deadline; the worker's status codes come back unchanged.
  """

  def __init__(self, port: int, target: str, cert: bytes, key: bytes,
               client_ca: Optional[bytes] = None, max_workers: int = 16,
               address: str = listen.LOOPBACK):
    from concurrent import futures  # pylint: disable=g-import-not-at-top
    self._channel = grpc.insecure_channel(target, runtime.fleet.GRPC_OPTIONS)
    self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers),
                               options=runtime.fleet.GRPC_OPTIONS)
    self._server.add_generic_rpc_handlers((self._Handler(self._channel),))
    credentials = grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca,
        require_client_auth=client_ca is not None)
    if self._server.add_secure_port(listen.bind_target(address, port), credentials) == 0:
      raise ValueError(f"cannot listen on {listen.bind_target(address, port)} (port in use, "
                       "or not an address of this machine?).")

  class _Handler(grpc.GenericRpcHandler):

    def __init__(self, channel):
      self._channel = channel

    def service(self, handler_call_details):
      call = self._channel.unary_unary(handler_call_details.method)

      def forward(request: bytes, context):
        try:
          return call(request, timeout=context.time_remaining())
        except grpc.RpcError as e:
          context.abort(e.code(), e.details())

      return grpc.unary_unary_rpc_method_handler(forward)

  def start(self) -> None:
    self._server.start()

  def stop(self) -> None:
    self._server.stop(grace=None)
    self._channel.close()


class _Stop(BaseException):
  """Raised by the SIGINT/SIGTERM handler: stop the worker, exit 128 + signal."""

  def __init__(self, signum: int):
    super().__init__(signum)
    self.code = 128 + signum


def _raise_stop(signum, frame):
  del frame
  raise _Stop(signum)


def serve(port: int, device: str = "cpu", gpu_ids=None, max_concurrent_computation_calls: int = -1,
          log_path: Optional[str] = None, tls_cert: Optional[str] = None,
          tls_key: Optional[str] = None, tls_client_ca: Optional[str] = None,
          internal_port: Optional[int] = None, announce=print,
          listen_address: str = listen.LOOPBACK, insecure_plaintext: bool = False) -> int:
  """Runs one worker until it exits (its code) or a signal ends this process.

  It listens on ``listen_address`` only (loopback by default); another address
  needs TLS or ``insecure_plaintext`` (:func:`listen_address.check_worker_address`).
  """
  if (tls_cert is None) != (tls_key is None):
    raise ValueError("TLS needs both --tls_cert and --tls_key.")
  if tls_client_ca is not None and tls_cert is None:
    raise ValueError("--tls_client_ca needs --tls_cert and --tls_key.")
  tls = tls_cert is not None
  address = listen.check_worker_address(listen_address, tls, insecure_plaintext)
  if tls:
    cert, key = _read(tls_cert, "--tls_cert"), _read(tls_key, "--tls_key")
    client_ca = _read(tls_client_ca, "--tls_client_ca") if tls_client_ca else None
  worker_port = internal_port if tls and internal_port else (None if tls else port)
  # Behind TLS the plaintext worker listens on loopback, where only the forwarder reaches it.
  rt = runtime.ExecutionRuntime(device=device, gpu_ids=gpu_ids, log_path=log_path,
                                max_concurrent_computation_calls=max_concurrent_computation_calls,
                                install_signal_handlers=False, port=worker_port,
                                listen_address=listen.LOOPBACK if tls else address)
  forwarder = None
  previous = {}
  if threading.current_thread() is threading.main_thread():
    for sig in (signal.SIGINT, signal.SIGTERM):
      previous[sig] = signal.signal(sig, _raise_stop)
  try:
    proc = rt.launch_worker()
    if tls:
      forwarder = TlsForwarder(port, listen.connect_target(listen.LOOPBACK, rt.port), cert,
                               key, client_ca, address=address)
      forwarder.start()
      announce(f"TFF worker (pid {proc.pid}) serving TLS{' with client certificates' if client_ca else ''} "
               f"on {listen.bind_target(address, port)}, forwarding to plaintext "
               f"{listen.connect_target(listen.LOOPBACK, rt.port)} (loopback only); "
               "Ctrl-C stops it.", flush=True)
    elif listen.is_loopback(address):
      announce(f"TFF worker (pid {proc.pid}) listening on {listen.bind_target(address, port)} "
               "(loopback: this machine only); Ctrl-C stops it.", flush=True)
    else:
      announce(f"TFF worker (pid {proc.pid}) listening on {listen.bind_target(address, port)} "
               "(--insecure_plaintext: unauthenticated gRPC, anyone who reaches it can run "
               "computations here); Ctrl-C stops it.", flush=True)
    while proc.poll() is None:
      time.sleep(0.5)
    print(f"error: the TFF worker (pid {proc.pid}) exited with code {proc.returncode}"
          f"{'; see ' + log_path if log_path else ''}.", file=sys.stderr, flush=True)
    return 1
  except _Stop as stop:
    print(f"TFF worker stopped ({signal.Signals(stop.code - 128).name}).", file=sys.stderr,
          flush=True)
    return stop.code
  finally:
    if forwarder is not None:
      forwarder.stop()
    rt.close()
    for sig, handler in previous.items():
      signal.signal(sig, handler)


def check_port_free(port: int, flag: str = "port") -> None:
  """Refuses a port another process listens on, before the worker starts (issue 33).

  The TFF worker binary exits with code 0 at start-up when its port is
  taken, which surfaced as a 27-line RuntimeError after 19 s.
  """
  for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
    try:
      sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
      continue  # this address family is not available here
    try:
      # SO_REUSEADDR: a port left in TIME_WAIT is free to listen on; only a listener refuses.
      sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      sock.bind((host, port))
    except OSError as e:
      if e.errno == errno.EADDRINUSE:
        raise ValueError(f"--{flag}={port} is already in use by another process; choose a "
                         "free port (or stop the process holding it).") from None
    finally:
      sock.close()


def check_log_path(path: str) -> None:
  """Refuses a --log_path the worker cannot append to, naming the flag (issue 50)."""
  try:
    with open(path, "ab"):
      pass
  except OSError as e:
    raise ValueError(f"--log_path={path}: cannot write it ({e.strerror}); give a file in a "
                     "writable directory.") from None


@cli.entry
def main(argv) -> int:
  if len(argv) > 1:
    raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
  if _PORT.value is None:
    raise ValueError("--port is required: the port the fleet connects to, e.g. --port=8000.")
  listen.check_worker_address(_LISTEN_ADDRESS.value, _TLS_CERT.value is not None,
                              _INSECURE_PLAINTEXT.value)
  check_port_free(_PORT.value)
  if _LOG_PATH.value:
    check_log_path(_LOG_PATH.value)
  if _INTERNAL_PORT.value:
    check_port_free(_INTERNAL_PORT.value, "internal_port")
  return serve(_PORT.value, _DEVICE.value,
               [int(i) for i in _GPU_IDS.value] if _GPU_IDS.value else None,
               _MAX_CALLS.value, _LOG_PATH.value, _TLS_CERT.value, _TLS_KEY.value,
               _TLS_CLIENT_CA.value, _INTERNAL_PORT.value,
               listen_address=_LISTEN_ADDRESS.value,
               insecure_plaintext=_INSECURE_PLAINTEXT.value)


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
