"""tests/forked_runs.py gives what ``subprocess.run([python, -m|-c, ...])`` gives (issue 52)."""
import os
import subprocess

import pytest

from tests import forked_runs

_CODE = """
import os, sys
print("out", sys.argv[1:], os.getcwd(), os.environ.get("FORKED_PROBE"))
print("err line", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("code", [0, 2, 130])
def test_exit_status_output_arguments_cwd_and_env_reach_the_caller(code, tmp_path):
  env = dict(os.environ, FORKED_PROBE="yes")
  proc = forked_runs.run_code(_CODE, [str(code), "x"], env=env, cwd=tmp_path)
  assert proc.returncode == code
  assert proc.stdout == f"out ['{code}', 'x'] {tmp_path} yes\n"
  assert proc.stderr == "err line\n"


def test_an_uncaught_exception_is_a_traceback_and_exit_1():
  proc = forked_runs.run_code("raise ValueError('boom')")
  assert proc.returncode == 1
  assert proc.stderr.startswith("Traceback") and "ValueError: boom" in proc.stderr


def test_a_module_runs_as_main_with_its_flags():
  proc = forked_runs.run_module("experiments.idp_fedavg", ["--rounds=0"])
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines() == [
      "error: --rounds=0: federated rounds must be an integer >= 1."]


def test_a_run_past_its_timeout_is_killed_and_the_next_run_works():
  with pytest.raises(subprocess.TimeoutExpired):
    forked_runs.run_code("import time; time.sleep(60)", timeout=1)
  assert forked_runs.run_code("print('next')").stdout == "next\n"


def test_each_run_is_a_fresh_process():
  first = forked_runs.run_code("import os, sys; sys.modules['marker'] = 1; print(os.getpid())")
  second = forked_runs.run_code("import os, sys; print(os.getpid(), 'marker' in sys.modules)")
  assert first.stdout.split()[0] != second.stdout.split()[0]
  assert second.stdout.split()[1] == "False"


@pytest.mark.parametrize("args", [["--rounds=0"], ["--help"]])
def test_a_run_before_tensorflow_equals_the_interpreters_and_lists_what_it_loaded(args,
                                                                                monkeypatch):
  """The forked refusal (and help) equals ``python -X importtime -m`` 's, loaded modules too."""
  forked = forked_runs.run_module("experiments.idp_fedavg", args, before_tensorflow=True)
  monkeypatch.setenv("TFF_IDP_TEST_FORK", "0")
  real = forked_runs.run_module("experiments.idp_fedavg", args, before_tensorflow=True)
  assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout,
                                                               real.stderr)
  assert forked.tensorflow_modules == real.tensorflow_modules == []


@pytest.mark.parametrize("fork", ["1", "0"])
def test_the_tensorflow_modules_a_run_loaded_are_listed(fork, monkeypatch):
  monkeypatch.setenv("TFF_IDP_TEST_FORK", fork)
  proc = forked_runs.run_module("tff_idp.accounting.fast_rdp", [], before_tensorflow=True)
  assert proc.returncode == 0 and proc.tensorflow_modules == [], proc.stderr
  proc = forked_runs.run_module("tensorflow.python.platform.build_info", [],
                                before_tensorflow=True)
  assert "tensorflow" in proc.tensorflow_modules, proc.stderr[-2000:]


@pytest.mark.parametrize("fork", ["1", "0"])
def test_atexit_handlers_and_threads_end_the_run_as_in_an_interpreter(fork, monkeypatch):
  monkeypatch.setenv("TFF_IDP_TEST_FORK", fork)
  code = ("import atexit, sys, threading, time\n"
          "atexit.register(lambda: print('atexit ran'))\n"
          "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
          "sys.exit(3)\n")
  proc = forked_runs.run_code(code)
  assert proc.returncode == 3
  assert proc.stdout == "thread done\natexit ran\n"
