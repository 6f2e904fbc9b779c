"""experiments.cli: flag ranges, one-line errors, interrupts, output-dir checks and locks,
and the quiet console (tff_idp.console)."""
import math
import os
import re
import signal
import subprocess
import sys
import time

from absl import flags
import pytest

from tests import forked_runs
from tff_idp import cli
from tff_idp import console
from tff_idp.errors import OutputDirError
from tff_idp.errors import TffIdpError
from tff_idp.errors import ToolkitValueError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A TensorFlow C++ log line: "2026-11-23 07:56:34.582520: I tensorflow/...".
TF_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] ", re.M)


def _flag_values(**defs) -> flags.FlagValues:
  fv = flags.FlagValues()
  for name, (kind, default) in defs.items():
    getattr(flags, f"DEFINE_{kind}")(name, default, "test flag", flag_values=fv,
                                     module_name="experiments.fake")
  fv(["prog"])
  return fv


@pytest.mark.parametrize("kind,name,value,match", [
    ("integer", "local_epochs", -1, r"--local_epochs=-1: local passes .* integer >= 1"),
    ("integer", "local_epochs", 0, r"--local_epochs=0"),
    ("integer", "batch_size", -4, r"--batch_size=-4"),
    ("integer", "rounds", 0, r"--rounds=0: federated rounds must be an integer >= 1"),
    ("integer", "eval_every", 0, r"--eval_every=0"),
    ("float", "privacy_free_batch", -5.0, r"--privacy_free_batch=-5"),
    ("float", "learning_rate", math.nan, r"--learning_rate=nan: .* finite number > 0"),
    ("float", "client_learning_rate", math.inf, r"--client_learning_rate=inf"),
    ("float", "delta", 1.0, r"--delta=1.0: target δ must be a finite number > 0 and < 1"),
    ("float", "client_rate", 1.5, r"<= 1"),
    ("integer", "some_unlisted_count", -2, r"--some_unlisted_count=-2: .* >= 0"),
    ("float", "some_unlisted_float", math.nan, r"--some_unlisted_float=nan"),
])
def test_numeric_flag_out_of_range_is_named(kind, name, value, match):
  fv = _flag_values(**{name: (kind, value)})
  with pytest.raises(ToolkitValueError, match=match):
    cli.check_flags(fv)


@pytest.mark.parametrize("name,value,match", [
    ("budgets", "abc", r"--budgets: 'abc' is not a number"),
    ("seeds", "0.5", r"--seeds: '0.5' is not an integer"),
    ("seeds", "-1", r"--seeds=-1: item -1 is out of range"),
    ("budgets", "1,0,3", r"--budgets=1,0,3: item 0 is out of range"),
    ("ratios", "0.5,nan", r"item nan is out of range"),
])
def test_list_flag_items_are_parsed_and_checked(name, value, match):
  fv = _flag_values(**{name: ("list", value.split(","))})
  with pytest.raises(ToolkitValueError, match=match):
    cli.check_flags(fv)


def test_values_are_the_named_flags_for_a_call_by_the_same_names():
  fv = _flag_values(rounds=("integer", 3), delta=("float", 1e-4), head=("string", "softmax"))
  assert cli.values(("delta", "rounds"), fv) == {"delta": 1e-4, "rounds": 3}


def test_valid_flags_pass_and_inf_budgets_are_allowed():
  fv = _flag_values(budgets=("list", ["1", "inf"]), seeds=("list", ["0", "3"]),
                    rounds=("integer", 5), delta=("float", 1e-5), alpha=("float", 0.0),
                    num_clients=("integer", None))
  cli.check_flags(fv)


def test_foreign_flags_are_not_checked():
  fv = flags.FlagValues()
  flags.DEFINE_integer("verbosity_like", -1, "absl-style", flag_values=fv,
                       module_name="absl.logging")
  fv(["prog"])
  cli.check_flags(fv)  # absl's -1 defaults are theirs to check


def test_every_module_default_passes_the_rules():
  """The defaults of every entry module are within the shared rules (no false alarms)."""
  modules = ["experiments.idp_fedavg", "experiments.rpdp", "experiments.ino_sgd",
             "experiments.centralized", "experiments.fmnist", "experiments.cifar10"]
  code = ("import importlib, sys; importlib.import_module(sys.argv[1]); "
          "from absl import flags; flags.FLAGS(['x']); "
          "from experiments import cli; cli.check_flags(); print('ok')")
  for module in modules:
    proc = forked_runs.run_code(code, [module], timeout=300, before_tensorflow=True)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (module,
                                                                         proc.stderr[-2000:])


def _wrapped(exc: BaseException):
  def main(argv):
    del argv
    raise exc
  return cli.entry(main)


@pytest.mark.parametrize("exc", [
    TffIdpError("the checkpoint in /x was made by a run with other parameters"),
    ToolkitValueError("--rounds=0: bad"),
    ValueError("plain value error"),
    FileNotFoundError(2, "No such file or directory", "/data/missing.npz"),
])
def test_toolkit_errors_print_one_line_and_exit_2(exc, capsys):
  assert _wrapped(exc)([]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and err.count("\n") == 1, err
  assert "Traceback" not in err


def test_flag_parsing_errors_are_one_line_with_exit_2(capsys):
  """absl's own parse errors (bad enum, malformed number, unknown flag) follow the rule."""
  fv = flags.FlagValues()
  flags.DEFINE_enum("accountant", "rdp", ["rdp", "pld"], "test flag", flag_values=fv)
  flags.DEFINE_integer("rounds", 20, "test flag", flag_values=fv)
  for arg, match in (("--accountant=foo", "--accountant"), ("--rounds=1e9", "an integer is "
                                                                           "expected")):
    with pytest.raises(SystemExit) as e:
      cli.parse_flags(["prog", arg], fv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and match in err[0], err
  assert cli.parse_flags(["prog", "--rounds=3"], fv) == ["prog"] and fv.rounds == 3


ENUM_AND_NUMBER_CASES = [
    ("experiments.idp_fedavg", "--accountant=foo", "--accountant"),
    ("experiments.rpdp", "--model=foo", "--model"),
    ("experiments.apes", "--device=tpu", "--device"),
    ("experiments.idp_fedavg", "--rounds=1e9", "an integer is expected"),
    ("tff_idp.idp_fedavg.calibrate", "--no_such_flag=1", "no_such_flag"),
]


def test_modules_turn_absl_parse_errors_into_one_line_and_exit_2(tmp_path):
  for i, (module, arg, match) in enumerate(ENUM_AND_NUMBER_CASES):
    output = [f"--output_dir={tmp_path / str(i)}"] if module.startswith("experiments") else []
    proc = forked_runs.run_module(module, [arg, *output], timeout=300, before_tensorflow=True)
    err = proc.stderr
    lines = [l for l in err.strip().splitlines() if not TF_LOG_LINE.match(l)]
    assert proc.returncode == 2, (module, arg, err[-2000:])
    assert lines[-1].startswith("error: ") and match in lines[-1], (module, arg, lines)
    assert "FATAL" not in err and "helpshort" not in err, (module, arg, err[-2000:])


def test_keyboard_interrupt_prints_one_line_and_exits_130(capsys):
  assert _wrapped(KeyboardInterrupt())([]) == 130
  assert capsys.readouterr().err.strip() == cli.INTERRUPTED


def test_bugs_still_raise_with_a_traceback():
  with pytest.raises(ZeroDivisionError):
    _wrapped(ZeroDivisionError("a bug, not a bad input"))([])


def test_output_dir_is_created_locked_and_released(tmp_path):
  out = str(tmp_path / "run") + "/"
  path = cli.prepare_output_dir(out)
  assert path == str(tmp_path / "run") and os.path.isdir(path)
  with open(os.path.join(path, cli.LOCK_FILE)) as f:
    assert f.read() == str(os.getpid())
  # flock is per open file description: a second open in this process conflicts,
  # exactly as a second run would.
  with pytest.raises(OutputDirError, match=rf"in use by another run \(pid {os.getpid()}\)"):
    cli.prepare_output_dir(str(tmp_path / "run"))
  cli.release_output_dirs()
  assert cli.prepare_output_dir(path) == path
  cli.release_output_dirs()


def test_second_process_is_refused_while_the_first_holds_the_dir(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, "-c", "import sys, time; from experiments import cli; "
       "cli.prepare_output_dir(sys.argv[1]); print('held', flush=True); time.sleep(60)",
       str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
      env=dict(os.environ, PYTHONPATH=ROOT))
  try:
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(OutputDirError, match=f"pid {holder.pid}"):
      cli.prepare_output_dir(str(tmp_path))
  finally:
    holder.kill()
    holder.wait()
  assert cli.prepare_output_dir(str(tmp_path))  # the lock died with its holder
  cli.release_output_dirs()


def test_unusable_output_dir_fails_before_anything_runs(tmp_path):
  blocker = tmp_path / "a_file"
  blocker.write_text("x")
  with pytest.raises(OutputDirError, match="--output_dir=.*cannot create it"):
    cli.prepare_output_dir(str(blocker / "sub"))
  with pytest.raises(OutputDirError, match="is not a directory"):
    cli.prepare_output_dir(str(blocker))
  with pytest.raises(OutputDirError, match="empty"):
    cli.prepare_output_dir("")


def test_verbose_is_recognised_in_every_spelling():
  assert console.verbose_requested(["m", "--verbose"])
  assert console.verbose_requested(["m", "--verbose=true"])
  assert not console.verbose_requested(["m", "--verbose=false"])
  assert not console.verbose_requested(["m", "--noverbose"])
  assert not console.verbose_requested(["m", "--", "--verbose"])


def _clean_env() -> dict:
  env = {k: v for k, v in os.environ.items()
         if k not in ("TF_CPP_MIN_LOG_LEVEL", console.VERBOSE_ENV)}
  return dict(env, PYTHONPATH=ROOT)


def test_verbose_brings_tensorflow_logs_back():
  code = "import sys; import experiments; import tensorflow"
  quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env=_clean_env(), timeout=300)
  loud = subprocess.run([sys.executable, "-c", code, "--verbose"], capture_output=True,
                        text=True, cwd=ROOT, env=_clean_env(), timeout=300)
  assert quiet.returncode == 0 and loud.returncode == 0
  assert not TF_LOG_LINE.search(quiet.stderr), quiet.stderr
  assert TF_LOG_LINE.search(loud.stderr), loud.stderr


@pytest.mark.slow
def test_short_run_is_quiet_and_sigint_ends_in_one_line(tmp_path):
  """A real run prints no TensorFlow log line; SIGUSR1 prints stacks and the run goes
  on; Ctrl-C then gives one line and exit 130."""
  out = tmp_path / "run"
  proc = subprocess.Popen(
      [sys.executable, "-m", "experiments.idp_fedavg", "--runs=nonprivate", "--seeds=0",
       "--rounds=500", "--num_clients=60", "--clients_per_round=5", "--eval_every=1",
       "--checkpoint_every=1", "--progress=false", f"--output_dir={out}"],
      cwd=ROOT, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  metrics = out / "nonprivate" / "seed0" / "metrics.csv"
  deadline = time.time() + 240
  try:
    while time.time() < deadline and proc.poll() is None:
      if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
        break
      time.sleep(0.5)
    assert proc.poll() is None, proc.communicate()
    if not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
      proc.kill()
      pytest.fail(f"no 2 rounds within 240 s: {proc.communicate()[1][-3000:]}")
    proc.send_signal(signal.SIGUSR1)  # prints stacks; the run goes on
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    try:
      stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
      proc.send_signal(signal.SIGUSR1)  # faulthandler: every thread's stack
      time.sleep(3)
      proc.kill()
      stdout, stderr = proc.communicate(timeout=30)
      pytest.fail(f"no exit 120 s after SIGINT; stacks:\n{stderr[-6000:]}")
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 130, (proc.returncode, stderr[-3000:])
  assert stderr.strip().splitlines()[-1] == cli.INTERRUPTED, stderr[-3000:]
  assert "Traceback" not in stderr, stderr[-3000:]
  assert "most recent call first" in stderr, stderr[-3000:]  # the SIGUSR1 stacks
  assert not TF_LOG_LINE.search(stdout + stderr), (stdout + stderr)[-3000:]
  assert "Starting new session" not in stderr


def test_sigterm_during_set_up_ends_in_one_line_within_seconds(tmp_path):
  """SIGTERM after the run started its worker but before the first round: the
  "terminated; resume with the same command" line, exit 143, in seconds (it was a bare
  143 with no line: the runtime's handler lost the CLI's handler it should chain to)."""
  out = tmp_path / "run"
  proc = subprocess.Popen(
      [sys.executable, "-m", "experiments.idp_fedavg", "--runs=nonprivate,idp", "--seeds=0",
       "--rounds=50", "--progress=false", f"--output_dir={out}"],
      cwd=ROOT, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    line = proc.stdout.readline()  # "federation: ..." comes right before the worker starts
    assert line.startswith("federation:"), line
    time.sleep(1.0)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
  finally:
    if proc.poll() is None:
      proc.kill()
  assert proc.returncode == 143, (proc.returncode, stderr[-3000:])
  assert stderr.strip().splitlines()[-1] == cli.TERMINATED, stderr[-3000:]


LIBRARY_USE = """
import numpy as np
import datasets
from tff_idp import models
split = datasets.from_arrays(np.random.default_rng(0).normal(size=(40, 3)), np.arange(40) % 2,
                             partition="iid", num_clients=2)
train = split.train_client_data()
list(train.create_tf_dataset_for_client(train.client_ids[0]).take(1))
models.build_logistic_regression(3, 2)
print("ok")
"""


@pytest.mark.parametrize("user_level, loud", [(None, False), ("0", True)])
def test_library_use_is_quiet_unless_the_user_set_the_level(user_level, loud):
  env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",
                                                         console.VERBOSE_ENV)}
  env["PYTHONPATH"] = ROOT
  if user_level is not None:
    env["TF_CPP_MIN_LOG_LEVEL"] = user_level
  proc = subprocess.run([sys.executable, "-c", LIBRARY_USE], capture_output=True, text=True,
                        timeout=300, env=env, cwd=ROOT, stdin=subprocess.DEVNULL)
  assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
  tf_lines = TF_LOG_LINE.findall(proc.stderr)
  assert bool(tf_lines) == loud, proc.stderr[-3000:]




# SIGTERM/SIGINT during the imports and while TensorFlow loads: tests/test_signal_harness.py
# (phases "imports" and "tensorflow", recognised from /proc instead of a delay).
