"""Where a TFF ``worker_binary`` listens: loopback unless told otherwise (issue 50).

TFF 0.87's ``worker_binary`` has one network flag, ``--port``, and listens on
``[::]:port``: every interface of the machine. Anyone who can reach the port
can run TensorFlow computations on it, with no authentication. That holds for
the fleet worker (``python -m tff_idp.execution.worker``) and for the private
worker every TFF run starts on a free port.

The toolkit starts every ``worker_binary`` with a tiny preload library
(:data:`SHIM_SOURCE`, about 30 lines of C, built once per user with the system
C compiler into ``~/.cache/tff_idp``). It rewrites the binary's wildcard
``bind()`` to the one address asked for: ``127.0.0.1`` by default (an IPv6
socket binds ``::ffff:127.0.0.1``), so only this machine can connect. A bind to
any other address is passed through unchanged.

``0.0.0.0`` or ``::`` keep TFF's own behaviour (every interface), and no
library is preloaded. The fleet worker's command line asks for TLS or an
explicitly insecure flag before it listens anywhere but loopback
(:func:`check_worker_address`). Without a C compiler, the error says so. The
environment variable :data:`LISTEN_ENV` sets the local worker's address for
every run, e.g. ``0.0.0.0`` where no compiler can be installed.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile
from typing import Optional

LOOPBACK = "127.0.0.1"
ALL_INTERFACES = ("0.0.0.0", "::")
LISTEN_ENV = "TFF_IDP_WORKER_LISTEN"
"""Environment variable: the local worker's listen address (default :data:`LOOPBACK`)."""

BIND_V4_ENV, BIND_V6_ENV = "TFF_IDP_BIND_V4", "TFF_IDP_BIND_V6"

SHIM_SOURCE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

/* tff_idp: a wildcard bind() goes to $TFF_IDP_BIND_V4 / $TFF_IDP_BIND_V6 instead. */
typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
  static bind_fn real_bind = 0;
  if (!real_bind) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
  if (addr && addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 copy = *(const struct sockaddr_in6 *)addr;
    const char *to = getenv("TFF_IDP_BIND_V6");
    if (to && IN6_IS_ADDR_UNSPECIFIED(&copy.sin6_addr)) {
      if (inet_pton(AF_INET6, to, &copy.sin6_addr) != 1) { errno = EADDRNOTAVAIL; return -1; }
      return real_bind(fd, (const struct sockaddr *)&copy, sizeof copy);
    }
  } else if (addr && addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    struct sockaddr_in copy = *(const struct sockaddr_in *)addr;
    const char *to = getenv("TFF_IDP_BIND_V4");
    if (to && copy.sin_addr.s_addr == htonl(INADDR_ANY)) {
      if (inet_pton(AF_INET, to, &copy.sin_addr) != 1) { errno = EADDRNOTAVAIL; return -1; }
      return real_bind(fd, (const struct sockaddr *)&copy, sizeof copy);
    }
  }
  return real_bind(fd, addr, len);
}
"""


def parse(address: str, flag: str = "listen_address") -> str:
  """The IP address ``address`` names, as text (``localhost`` is ``127.0.0.1``).

  Raises ValueError naming ``--flag`` for a host name or anything not an IP address.
  """
  text = str(address).strip().strip("[]")
  if text == "localhost":
    return LOOPBACK
  try:
    return str(ipaddress.ip_address(text))
  except ValueError:
    raise ValueError(f"--{flag}={address}: give an IP address of this machine (e.g. "
                     f"{LOOPBACK}, the default; 0.0.0.0 for every interface).") from None


def is_loopback(address: str) -> bool:
  """Whether only this machine can reach ``address``."""
  return ipaddress.ip_address(parse(address)).is_loopback


def is_all_interfaces(address: str) -> bool:
  return parse(address) in ALL_INTERFACES


def default_address() -> str:
  """The local worker's address: :data:`LISTEN_ENV` if set, else loopback."""
  return parse(os.environ.get(LISTEN_ENV) or LOOPBACK, LISTEN_ENV)


def connect_target(address: str, port: int) -> str:
  """``host:port`` a client on this machine dials to reach a worker listening on ``address``."""
  ip = parse(address)
  if ip in ALL_INTERFACES:
    ip = LOOPBACK
  return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def bind_target(address: str, port: int) -> str:
  """``host:port`` for a gRPC server (in this process) to listen on ``address``."""
  ip = parse(address)
  return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def check_worker_address(address: str, tls: bool, insecure_plaintext: bool) -> str:
  """The fleet worker's ``--listen_address``, refused off loopback without TLS or the flag."""
  ip = parse(address)
  if not ipaddress.ip_address(ip).is_loopback and not tls and not insecure_plaintext:
    raise ValueError(
        f"--listen_address={address} lets other machines run computations on this worker "
        "over plaintext gRPC, with no authentication: serve TLS (--tls_cert and --tls_key, "
        "--tls_client_ca for client certificates), or pass --insecure_plaintext to accept "
        "that on a network you trust.")
  return ip


def _cache_dir() -> pathlib.Path:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return pathlib.Path(base) / "tff_idp"


def shim_path() -> str:
  """The preload library, built with the C compiler on first use (RuntimeError without one).

  It lives in a folder only this user can write (0700); a library there that
  another user owns, or that others can write, is refused.
  """
  digest = hashlib.sha256(SHIM_SOURCE.encode()).hexdigest()[:16]
  folder = _cache_dir()
  path = folder / f"bind_address-{digest}.so"
  if not path.exists():
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
      raise RuntimeError(
          "the TFF worker listens on loopback only through a small preload library "
          "(tff_idp/execution/listen_address.py) that needs a C compiler, and none was "
          f"found: install one (e.g. apt-get install gcc), or set {LISTEN_ENV}=0.0.0.0 to "
          "let the worker listen on every interface.")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
      source = pathlib.Path(scratch) / "bind_address.c"
      source.write_text(SHIM_SOURCE)
      built = pathlib.Path(scratch) / "bind_address.so"
      result = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(built),
                               str(source), "-ldl"], capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, check=False)
      if result.returncode != 0:
        raise RuntimeError(f"building the worker's loopback library with {compiler} failed: "
                           f"{result.stderr.strip()[-500:]}")
      os.replace(built, path)  # atomic: two runs building at once both end with a whole file
  info = path.stat()
  if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
    raise RuntimeError(f"{path} is not this user's own file (owner or write permissions); "
                       "delete it and run again.")
  return str(path)


def worker_env(address: str, preload: Optional[str] = None) -> dict:
  """Environment for a ``worker_binary`` that should listen on ``address`` only.

  ``preload``: the ``LD_PRELOAD`` already set for the worker (kept after the
  library). Every interface (``0.0.0.0``, ``::``) needs no library: ``{}``.
  """
  ip = parse(address)
  if ip in ALL_INTERFACES:
    return {}
  parsed = ipaddress.ip_address(ip)
  if parsed.version == 4:
    v4, v6 = ip, f"::ffff:{ip}"
  else:
    mapped = parsed.ipv4_mapped
    # An IPv4 socket gets loopback for ::1, and no other address for an IPv6 one.
    v4 = str(mapped) if mapped else (LOOPBACK if parsed.is_loopback else "none")
    v6 = ip
  shim = shim_path()
  return {"LD_PRELOAD": shim + (f":{preload}" if preload else ""),
          BIND_V4_ENV: v4, BIND_V6_ENV: v6}
