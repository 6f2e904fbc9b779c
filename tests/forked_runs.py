"""Command-line runs for the tests, forked from a process that loaded TensorFlow (issue 52).

A test that runs ``python -m experiments.<module> …`` to check what a user
gets pays TensorFlow's import (about 5 s of CPU on 2 cores) before the run
does anything. :func:`run_module` runs the same command in a fresh process
forked from a *server* process that imported TensorFlow once (and nothing that
starts threads: TFF, whose import starts an event-loop thread, is imported by
each run, as by a user's process). The run is still its own process: its own
flags, modules, signal handlers, TFF workers, exit status and output, as
``python -m`` gives them (``runpy``, ``sys.argv``, ``sys.path[0]`` = the
working directory). What it cannot show, and so stays a real interpreter
start (``subprocess``): anything about the import itself (what is loaded
before a flag is refused, log levels set before TensorFlow loads, the start-up
time) and signals sent from outside at a moment of the run.

A run that must refuse before TensorFlow loads (``before_tensorflow=True``) forks
from a second server that never imported it, and reports the TensorFlow modules
it loaded, as ``python -X importtime`` would list them.

One server of each kind per test process (a pytest-xdist worker), started on
first use; ``TFF_IDP_TEST_FORK=0`` runs every call as a plain subprocess instead.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What each kind of server imports before it forks runs. "tensorflow": the imports every
# run would pay; none of them starts a thread (TFF's does: each run imports it). "bare":
# nothing of TensorFlow, for runs that must show they refuse before it loads.
_PRELOADS = {
    "tensorflow": "import tensorflow, tensorflow_privacy, scipy.stats, matplotlib, absl.app",
    "bare": ("import numpy, scipy.stats, scipy.special, scipy.optimize, dp_accounting, absl.app, "
             "absl.flags, tqdm, asyncio, unittest, attr"),
}
_TENSORFLOW_MODULE = r"(tensorflow|tensorflow_federated|keras)(\.|$)"

_SERVER = r"""
import json, os, re, runpy, sys, traceback
exec(sys.argv[2])
reply = os.fdopen(int(sys.argv[1]), "w", buffering=1)
tensorflow_module = re.compile(sys.argv[3])
for line in sys.stdin:
  request = json.loads(line)
  pid = os.fork()
  if pid == 0:
    code = 1
    try:
      os.chdir(request["cwd"])
      os.environ.clear()
      os.environ.update(request["env"])
      for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                              (1, request["stdout"], os.O_WRONLY | os.O_TRUNC),
                              (2, request["stderr"], os.O_WRONLY | os.O_TRUNC)):
        target = os.open(path, flags)
        os.dup2(target, fd)
        os.close(target)
      reply.close()
      sys.stdin = open(0, closefd=False)
      try:
        if request["module"] is not None:  # python -m module args
          sys.argv = [request["module"]] + request["args"]
          sys.path[0] = request["cwd"]
          runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:  # python -c code args
          sys.argv = ["-c"] + request["args"]
          sys.path[0] = ""
          exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__"})
        code = 0
      except SystemExit as stop:
        if stop.code is None:
          code = 0
        elif isinstance(stop.code, int):
          code = stop.code
        else:
          print(stop.code, file=sys.stderr)
          code = 1
      except BaseException:  # a traceback, as the interpreter prints it
        traceback.print_exc()
        code = 1
    finally:
      try:
        # As the interpreter ends: wait for non-daemon threads, run atexit, flush.
        import atexit, threading
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        if request["modules"]:  # which TensorFlow modules the run loaded
          with open(request["modules"], "w") as f:
            json.dump(sorted(m for m in sys.modules if tensorflow_module.match(m)), f)
      finally:
        os._exit(code)
  reply.write(json.dumps({"pid": pid}) + "\n")
  _, status = os.waitpid(pid, 0)
  reply.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
"""


class _Server:
  """The forking server of this test process (module docstring)."""

  def __init__(self, kind: str):
    read_end, write_end = os.pipe()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    self.kind = kind
    self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(write_end), _PRELOADS[kind],
                                  _TENSORFLOW_MODULE],
                                 stdin=subprocess.PIPE, text=True, cwd=ROOT, env=env,
                                 pass_fds=(write_end,), stdout=subprocess.DEVNULL)
    os.close(write_end)
    self.replies = os.fdopen(read_end, "r")
    self.lock = threading.Lock()

  def _reply(self, timeout: Optional[float]) -> Optional[dict]:
    ready, _, _ = select.select([self.replies], [], [], timeout)
    if not ready:
      return None
    line = self.replies.readline()
    if not line:
      raise RuntimeError("the forking server of tests/forked_runs.py ended")
    return json.loads(line)

  def run(self, module: Optional[str], code: Optional[str], args: Sequence[str], env: dict,
          cwd: str, timeout: float) -> subprocess.CompletedProcess:
    with self.lock, tempfile.TemporaryDirectory(prefix="forked_run_") as scratch:
      out, err = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
      for path in (out, err):
        open(path, "w").close()
      modules = os.path.join(scratch, "modules.json") if self.kind == "bare" else ""
      request = dict(module=module, code=code, args=list(args), env=env, cwd=cwd, stdout=out,
                     stderr=err, modules=modules)
      self.proc.stdin.write(json.dumps(request) + "\n")
      self.proc.stdin.flush()
      pid = self._reply(60)["pid"]
      done = self._reply(timeout)
      if done is None:
        os.kill(pid, signal.SIGKILL)
        self._reply(60)
        raise subprocess.TimeoutExpired([module or "-c", *args], timeout)
      with open(out) as f_out, open(err) as f_err:
        proc = subprocess.CompletedProcess([module or "-c", *args], done["returncode"],
                                           f_out.read(), f_err.read())
      if modules:
        with open(modules) as f:
          proc.tensorflow_modules = json.load(f)
      return proc

  def close(self) -> None:
    if self.proc.poll() is None:
      self.proc.stdin.close()
      try:
        self.proc.wait(timeout=30)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()
    self.replies.close()


_servers: dict = {}


def _the_server(kind: str) -> _Server:
  server = _servers.get(kind)
  if server is None or server.proc.poll() is not None:
    server = _servers[kind] = _Server(kind)
    atexit.register(server.close)
  return server


def run_module(module: str, args: Sequence[str], *, env: Optional[dict] = None,
               cwd: str = ROOT, timeout: float = 600,
               before_tensorflow: bool = False) -> subprocess.CompletedProcess:
  """``python -m module *args`` (stdin empty), as ``subprocess.run`` captures it (text).

  ``env``: the run's whole environment (default: this process's, with
  ``PYTHONPATH`` at the repository and ``TF_CPP_MIN_LOG_LEVEL=3``, as the
  server imported TensorFlow under).

  ``before_tensorflow``: fork from a server without TensorFlow, and give the
  result a ``tensorflow_modules`` attribute: the TensorFlow, TFF and Keras
  modules loaded when the run ended (``[]`` for a command that finished, or
  refused its flags, before loading them).
  """
  return _run(module, None, args, env, cwd, timeout, "bare" if before_tensorflow
              else "tensorflow")


def run_code(code: str, args: Sequence[str] = (), *, env: Optional[dict] = None,
             cwd: str = ROOT, timeout: float = 600,
             before_tensorflow: bool = False) -> subprocess.CompletedProcess:
  """``python -c code *args`` (stdin empty), as :func:`run_module` runs a module."""
  return _run(None, code, args, env, cwd, timeout, "bare" if before_tensorflow
              else "tensorflow")


def _run(module: Optional[str], code: Optional[str], args: Sequence[str], env: Optional[dict],
         cwd: str, timeout: float, kind: str) -> subprocess.CompletedProcess:
  env = dict(env if env is not None else os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  log = os.environ.get("TFF_IDP_SPAWN_LOG")  # tests/conftest.py: what the suite starts
  if log:
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    with open(log, "a") as f:
      f.write(f"{test}\tforked {module or '-c'} {' '.join(args)[:80]}\n")
  if os.environ.get("TFF_IDP_TEST_FORK", "1") == "0":
    command = ["-m", module] if module is not None else ["-c", code]
    importtime = ["-X", "importtime"] if kind == "bare" else []
    proc = subprocess.run([sys.executable, *importtime, *command, *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(cwd),
                          stdin=subprocess.DEVNULL)
    if kind == "bare":  # the modules from -X importtime's lines, which leave stderr
      lines = proc.stderr.splitlines(keepends=True)
      imported = [l.rsplit("|", 1)[-1].strip() for l in lines if l.startswith("import time:")]
      proc.stderr = "".join(l for l in lines if not l.startswith("import time:"))
      proc.tensorflow_modules = sorted(m for m in imported if re.match(_TENSORFLOW_MODULE, m))
    return proc
  return _the_server(kind).run(module, code, args, env, str(cwd), timeout)
