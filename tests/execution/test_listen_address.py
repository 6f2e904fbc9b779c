"""tff_idp/execution/listen_address.py: every TFF worker the toolkit starts listens on loopback
unless told otherwise (issue 50), checked on the sockets the kernel reports, not on our flags."""
import ipaddress
import os
import stat

import pytest

from tff_idp.execution import listen_address as listen
from tff_idp.execution import runtime


def listening_addresses(port: int) -> list[ipaddress._BaseAddress]:
  """The local addresses of the TCP sockets in LISTEN state on ``port`` (/proc/net/tcp, tcp6)."""
  found = []
  for table in ("tcp", "tcp6"):
    with open(f"/proc/net/{table}") as f:
      rows = f.read().splitlines()[1:]
    for row in rows:
      fields = row.split()
      host, hex_port = fields[1].split(":")
      if int(hex_port, 16) != port or fields[3] != "0A":  # 0A: LISTEN
        continue
      raw = bytes.fromhex(host)  # 32-bit words in host (little-endian) order
      found.append(ipaddress.ip_address(
          b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))))
  return found


def reachable_only_from_here(address: ipaddress._BaseAddress) -> bool:
  mapped = getattr(address, "ipv4_mapped", None)
  return (mapped or address).is_loopback


@pytest.fixture(name="cache")
def fixture_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  monkeypatch.delenv(listen.LISTEN_ENV, raising=False)
  return tmp_path / "tff_idp"


@pytest.mark.parametrize("address,expect_loopback", [
    (None, True), ("::1", True), ("0.0.0.0", False)])
def test_the_local_worker_listens_on_loopback_unless_told_otherwise(cache, address,
                                                                     expect_loopback):
  """Bug caught: TFF's worker_binary listened on [::] (every interface) on every TFF run.

  ``0.0.0.0`` is the control: the same check sees the wildcard socket there.
  """
  rt = runtime.ExecutionRuntime(listen_address=address, install_signal_handlers=False)
  try:
    rt.launch_worker()
    sockets = listening_addresses(rt.port)
  finally:
    rt.close()
  assert sockets, f"nothing listens on the worker's port {rt.port}"
  assert all(reachable_only_from_here(a) for a in sockets) == expect_loopback, sockets
  if address == "::1":
    assert sockets == [ipaddress.ip_address("::1")]


def test_the_library_is_this_users_own_and_a_planted_one_is_refused(cache):
  path = listen.shim_path()
  assert os.path.dirname(path) == str(cache)
  assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
  assert listen.shim_path() == path  # built once
  os.chmod(path, 0o777)  # writable by others: someone could swap it
  with pytest.raises(RuntimeError, match="not this user's own file"):
    listen.shim_path()


def test_without_a_compiler_the_error_says_what_to_do(cache, monkeypatch):
  monkeypatch.setenv("CC", "")
  monkeypatch.setattr(listen.shutil, "which", lambda name: None)
  with pytest.raises(RuntimeError, match=f"needs a C compiler.*{listen.LISTEN_ENV}=0.0.0.0"):
    listen.shim_path()


def test_the_environment_rewrites_wildcard_binds_to_the_address_asked_for(cache):
  env = listen.worker_env("127.0.0.1", preload="/opt/jemalloc.so")
  assert env["LD_PRELOAD"] == listen.shim_path() + ":/opt/jemalloc.so"
  assert (env[listen.BIND_V4_ENV], env[listen.BIND_V6_ENV]) == ("127.0.0.1", "::ffff:127.0.0.1")
  env = listen.worker_env("::1")
  assert (env[listen.BIND_V4_ENV], env[listen.BIND_V6_ENV]) == ("127.0.0.1", "::1")
  env = listen.worker_env("2001:db8::5")  # an IPv4 socket gets no address at all
  assert (env[listen.BIND_V4_ENV], env[listen.BIND_V6_ENV]) == ("none", "2001:db8::5")
  assert listen.worker_env("0.0.0.0") == {} and listen.worker_env("::") == {}


def test_the_default_comes_from_the_environment(cache, monkeypatch):
  assert listen.default_address() == "127.0.0.1"
  monkeypatch.setenv(listen.LISTEN_ENV, "0.0.0.0")
  assert listen.default_address() == "0.0.0.0"
  monkeypatch.setenv(listen.LISTEN_ENV, "somehost")
  with pytest.raises(ValueError, match=f"--{listen.LISTEN_ENV}=somehost: give an IP address"):
    listen.default_address()


@pytest.mark.parametrize("address,tls,insecure,refused", [
    ("127.0.0.1", False, False, False), ("localhost", False, False, False),
    ("::1", False, False, False), ("0.0.0.0", False, False, True),
    ("10.1.2.3", False, False, True), ("0.0.0.0", True, False, False),
    ("0.0.0.0", False, True, False), ("[::]", False, False, True)])
def test_a_worker_reachable_from_other_machines_needs_tls_or_the_insecure_flag(
    address, tls, insecure, refused):
  if refused:
    with pytest.raises(ValueError, match="--tls_cert and --tls_key.*--insecure_plaintext"):
      listen.check_worker_address(address, tls, insecure)
  else:
    assert listen.check_worker_address(address, tls, insecure) == listen.parse(address)


def test_targets_put_ipv6_in_brackets_and_dial_loopback_for_every_interface():
  assert listen.connect_target("0.0.0.0", 8000) == "127.0.0.1:8000"
  assert listen.connect_target("::", 8000) == "127.0.0.1:8000"
  assert listen.connect_target("::1", 8000) == "[::1]:8000"
  assert listen.bind_target("::", 9) == "[::]:9"
  assert listen.bind_target("localhost", 9) == "127.0.0.1:9"
  with pytest.raises(ValueError, match="--listen_address=host.example: give an IP address"):
    listen.parse("host.example")
