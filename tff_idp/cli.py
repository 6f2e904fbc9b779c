"""What every entry module shares: flag checks, one-line errors, Ctrl-C, output dirs.

* :func:`entry` wraps an absl ``main``: it checks every flag the module
  defined against :data:`RULES` before anything runs, prints toolkit errors
  (:class:`tff_idp.errors.TffIdpError`, ``ValueError``, missing files) as one
  line ``error: <message>`` with exit status 2, prints
  ``interrupted; resume with the same command`` (status 130) on SIGINT and
  ``terminated; ...`` (143) on SIGTERM instead of a traceback, and releases
  the output-directory lock. ``--verbose`` also prints the traceback.
  ``kill -USR1 <pid>`` prints every thread's stack to stderr (for a run
  that seems stuck) and the run goes on.
* :func:`prepare_output_dir` creates the output directory, checks it is
  writable, and takes an exclusive lock on it for the life of the run, so
  a bad ``--output_dir`` fails in a second, before calibration or a worker
  start, and a second run into the same directory is refused.
* :func:`float_list` / :func:`int_list` parse list flags with a message that
  names the flag.

The flag rules are by name, so a name means the same range in every module
(``--rounds`` is a positive integer everywhere). Flags without a rule must
still be finite (floats) and non-negative (integers).
"""
from __future__ import annotations

import dataclasses
import faulthandler
import fcntl
import functools
import math
import os
import signal
import sys
import traceback
from typing import Callable, Optional, Sequence

from absl import app
from absl import flags

from tff_idp import console
from tff_idp import startup_signals
from tff_idp import termination
from tff_idp.errors import OutputDirError
from tff_idp.errors import TffIdpError
from tff_idp.errors import ToolkitValueError

if console.VERBOSE_FLAG not in flags.FLAGS:
  flags.DEFINE_bool(console.VERBOSE_FLAG, False,
                    "Show TensorFlow's log lines and the traceback of errors.")

LOCK_FILE = ".experiment.lock"
INTERRUPTED = "interrupted; resume with the same command"
TERMINATED = "terminated; resume with the same command"


@dataclasses.dataclass(frozen=True)
class Rule:
  """The valid range of a numeric flag (or of each item of a list flag)."""
  kind: str  # "int" | "float"
  low: Optional[float] = None
  low_open: bool = False
  high: Optional[float] = None
  high_open: bool = False
  allow_inf: bool = False
  meaning: str = ""

  def describe(self) -> str:
    parts = []
    if self.low is not None:
      parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
    if self.high is not None:
      parts.append(f"{'<' if self.high_open else '<='} {self.high:g}")
    what = "an integer" if self.kind == "int" else (
        "a number" if self.allow_inf else "a finite number")
    return f"{what} {' and '.join(parts)}".strip() + (" (inf allowed)" if self.allow_inf else "")

  def ok(self, value: float) -> bool:
    if isinstance(value, float) and math.isnan(value):
      return False
    if isinstance(value, float) and math.isinf(value):
      return self.allow_inf and (self.high is None or value < 0) and (
          self.low is None or value > 0)
    if self.low is not None and (value <= self.low if self.low_open else value < self.low):
      return False
    if self.high is not None and (value >= self.high if self.high_open else value > self.high):
      return False
    return True


def _pos_int(meaning: str = "") -> Rule:
  return Rule("int", low=1, meaning=meaning)


def _nonneg_int(meaning: str = "") -> Rule:
  return Rule("int", low=0, meaning=meaning)


def _pos_float(meaning: str = "") -> Rule:
  return Rule("float", low=0, low_open=True, meaning=meaning)


def _unit_interval(meaning: str = "", high_open: bool = False) -> Rule:
  return Rule("float", low=0, low_open=True, high=1, high_open=high_open, meaning=meaning)


# One range per flag name, for every module that defines that name.
RULES: dict[str, Rule] = {
    # counts
    "rounds": _pos_int("federated rounds"),
    "local_epochs": _pos_int("local passes over each client's data"),
    "batch_size": _pos_int("examples per client batch"),
    "eval_batch_size": _pos_int("test examples per evaluation batch"),
    "eval_every": _pos_int("rounds or steps between evaluations"),
    "checkpoint_every": _pos_int("rounds between checkpoints"),
    "local_steps": _pos_int("local DP-SGD steps per round"),
    "steps": _pos_int("DP-SGD steps"),
    "num_clients": _pos_int("clients in the federation"),
    "users_per_silo": _pos_int("Synthetic users per silo"),
    "table3_examples": _pos_int("records in the Table 3 subset"),
    "table3_trials": _pos_int("Table 3 trials"),
    "table3_steps": _pos_int("Table 3 DP-SGD steps"),
    "bins": _pos_int("histogram bins"),
    "examples_per_client": _pos_int("examples per client"),
    "train_examples": _nonneg_int("records in the silo (0 = all)"),
    "test_examples": _nonneg_int("test examples (0 = all)"),
    "filter_steps": _nonneg_int("Filter GD steps (0 = --steps)"),
    # rates, sizes and learning rates
    "clients_per_round": _pos_float("expected clients per round"),
    "client_learning_rate": _pos_float("client learning rate"),
    "server_learning_rate": _pos_float("server learning rate"),
    "learning_rate": _pos_float("learning rate"),
    "filter_learning_rate": _pos_float("Filter learning rate"),
    "table3_learning_rate": _pos_float("Table 3 learning rate"),
    "clip_norm": _pos_float("clipping norm"),
    "noise_multiplier": _pos_float("noise multiplier σ"),
    "table3_noise_multiplier": _pos_float("Table 3 noise multiplier"),
    "curve_sigma": _pos_float("σ of the curve"),
    "clipped_count_stddev": _pos_float("σ_b, the noise of the adaptive clip's count"),
    "privacy_free_batch": _pos_float("expected records per local step"),
    "expected_batch": _pos_float("expected batch size"),
    "ino_alpha": _pos_float("Beta(α, β) α"),
    "ino_beta": _pos_float("Beta(α, β) β"),
    "ino_gamma": Rule("float", low=0, meaning="INO tail length γ"),
    "ino_gamma_ratio": Rule("float", low=0, meaning="γ as a fraction of E[Σ q C]"),
    "alpha": Rule("float", low=0, meaning="heterogeneity / concentration α"),
    "beta": Rule("float", low=0, meaning="heterogeneity / concentration β"),
    "max_rate": _unit_interval("cap on a client's sampling rate"),
    "client_rate": _unit_interval("client sampling rate λ"),
    "delta": _unit_interval("target δ", high_open=True),
    # TFF workers
    "port": Rule("int", low=1, high=65535, meaning="TCP port"),
    "internal_port": Rule("int", low=1, high=65535, meaning="TCP port"),
    "max_concurrent_computation_calls": Rule(
        "int", low=-1, meaning="parallel client computations (-1: no limit)"),
    "worker_retries": _nonneg_int("retries of a computation on the workers left"),
    "parallel_clients": _pos_int("clients trained at once in this process"),
    "hidden": Rule("int", low=1, meaning="hidden units"),
    "worker_connect_timeout_s": _pos_float("seconds every worker has to answer"),
    "worker_rpc_timeout_s": _pos_float("deadline of each call to a worker, seconds"),
}

# Items of list flags.
LIST_RULES: dict[str, Rule] = {
    "budgets": Rule("float", low=0, low_open=True, allow_inf=True, meaning="ε per group"),
    "epsilons": Rule("float", low=0, low_open=True, allow_inf=True, meaning="ε per group"),
    "levels": Rule("float", low=0, low_open=True, allow_inf=True, meaning="ε levels"),
    "ratios": Rule("float", low=0, high=1, meaning="group shares"),
    "level_ratios": Rule("float", low=0, high=1, meaning="level shares"),
    "seeds": _nonneg_int("training seeds"),
    "drop_percents": Rule("float", low=0, high=100, high_open=True, meaning="percent dropped"),
    "sigmas": _pos_float("noise multipliers"),
    "curve_rates": _unit_interval("sampling rates"),
}


# List flags whose items must be distinct (issue 33: --seeds=0,0 reported "n=2 seeds, sd 0.00").
UNIQUE_LISTS: dict[str, str] = {"seeds": "seed"}


def _fail(name: str, value, rule: Rule, item: Optional[str] = None) -> ToolkitValueError:
  what = rule.meaning or "the value"
  if item is not None:
    return ToolkitValueError(f"--{name}={value}: item {item} is out of range; each item "
                             f"({what}) must be {rule.describe()}.")
  return ToolkitValueError(f"--{name}={value}: {what} must be {rule.describe()}.")


def parse_item(name: str, text: str, rule: Rule, full: Optional[str] = None):
  """One list item parsed and range-checked; the error names the flag (``full``: its value)."""
  try:
    value = int(text) if rule.kind == "int" else float(text)
  except ValueError:
    kind = "integers" if rule.kind == "int" else "numbers"
    raise ToolkitValueError(
        f"--{name}: {text!r} is not {'an integer' if rule.kind == 'int' else 'a number'}; "
        f"give comma-separated {kind}, e.g. "
        f"--{name}={'0,1' if rule.kind == 'int' else '1,2,3'}.") from None
  if not rule.ok(value):
    if full is None:
      flag_value = flags.FLAGS[name].value if name in flags.FLAGS else None
      full = ",".join(flag_value) if isinstance(flag_value, list) else text
    raise _fail(name, full, rule, item=text)
  return value


def float_list(name: str) -> list[float]:
  """The list flag ``name`` as floats, checked against :data:`LIST_RULES`."""
  rule = LIST_RULES.get(name, Rule("float"))
  return [parse_item(name, t, rule) for t in (flags.FLAGS[name].value or [])]


def int_list(name: str) -> list[int]:
  """The list flag ``name`` as integers, checked against :data:`LIST_RULES`."""
  rule = LIST_RULES.get(name, Rule("int"))
  return [parse_item(name, t, rule) for t in (flags.FLAGS[name].value or [])]


def values(names: Sequence[str], flag_values: Optional[flags.FlagValues] = None) -> dict:
  """``{name: --name's value}``: the flags a library call takes under their own names."""
  fv = flags.FLAGS if flag_values is None else flag_values
  return {name: fv[name].value for name in names}


_FOREIGN_FLAG_MODULES = ("absl", "tensorflow", "jax", "tensorflow_federated", "google")


def check_flags(flag_values: Optional[flags.FlagValues] = None,
                rules: Optional[dict[str, Rule]] = None) -> None:
  """Checks every numeric flag the toolkit defined against its rule.

  Flags of absl, TensorFlow and other libraries are left alone. Raises
  ToolkitValueError for the first bad one, naming it and its valid range.
  ``rules`` overrides :data:`RULES` for flags whose meaning differs in one
  module (e.g. ``--eval_every=0`` = "at the end only" in ``experiments.ino_sgd``).
  """
  fv = flags.FLAGS if flag_values is None else flag_values
  rules = {**RULES, **(rules or {})}
  names = [f.name for module, module_flags in fv.flags_by_module_dict().items()
           if not module.startswith(_FOREIGN_FLAG_MODULES) for f in module_flags]
  for name in dict.fromkeys(names):
    flag = fv[name]
    value = flag.value
    if value is None:
      continue
    if name in LIST_RULES and isinstance(value, list):
      parsed = [parse_item(name, item, LIST_RULES[name], full=",".join(value))
                for item in value]
      if name in UNIQUE_LISTS and len(set(parsed)) != len(parsed):
        repeated = sorted({str(v) for v in parsed if parsed.count(v) > 1})
        raise ToolkitValueError(
            f"--{name}={','.join(value)}: {', '.join(repeated)} appears more than once; "
            f"give each {UNIQUE_LISTS[name]} once (a repeated seed would count one run as "
            "two in the mean, the sd and the paired t-test).")
      continue
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      continue
    rule = rules.get(name)
    if rule is None:  # unlisted numeric flags: finite and non-negative
      rule = Rule("int", low=0) if isinstance(value, int) else Rule("float")
    if not rule.ok(value):
      raise _fail(name, value, rule)


def refuse_positional(argv: Optional[list]) -> None:
  """Refuses words after the command that are not flags (absl leaves them in ``argv``).

  ``python -m experiments.rpdp rounds=3`` or a flag missing its ``--`` used
  to be ignored silently (issue 33).
  """
  stray = list(argv or [])[1:]
  if stray:
    raise ToolkitValueError(
        f"unexpected argument(s) {' '.join(repr(a) for a in stray)}: this command takes "
        "flags only, written --name=value (see --help).")


# ----------------------------------------------------------------- output dir
_held_locks: list = []


def refuse_inapplicable(names, why: str,
                        flag_values: Optional[flags.FlagValues] = None) -> None:
  """Raises ``ToolkitValueError`` naming every flag of ``names`` given on the command line.

  For flags that cannot apply to the run at hand (``why`` says why and what to
  do): a flag that is silently ignored would let a user believe it acted.
  """
  fv = flags.FLAGS if flag_values is None else flag_values
  given = [n for n in names if n in fv and fv[n].present]
  if given:
    listed = ", ".join(f"--{n}" for n in given)
    raise ToolkitValueError(f"{listed} cannot apply here: {why}; drop "
                            f"{'it' if len(given) == 1 else 'them'}.")


def _unusable_directory(path: str) -> Optional[str]:
  """Why directory ``path`` (absolute) cannot hold new files, or None when it can."""
  if os.path.exists(path):
    if not os.path.isdir(path):
      return f"{path} exists and is not a directory"
    if not os.access(path, os.W_OK | os.X_OK):
      return f"{path} is not writable"
    return None
  parent = os.path.dirname(path)
  while parent and not os.path.exists(parent):
    parent = os.path.dirname(parent)
  if parent and not os.path.isdir(parent):
    return f"{path} cannot be created: {parent} is a file, not a directory"
  if parent and not os.access(parent, os.W_OK | os.X_OK):
    return f"{path} cannot be created: {parent} is not writable"
  return None


def check_output_dir(path: Optional[str], flag: str = "output_dir") -> None:
  """The data-free part of :func:`prepare_output_dir`: refuses, creating nothing, a ``path``
  that is a file, lies under a file, or cannot be written (issue 33: these used to be
  refused only after TensorFlow had loaded, 15-26 s in).
  """
  if path is None:
    return
  if not path:
    raise OutputDirError(f"--{flag} is empty; give a directory for the results.")
  path = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
  reason = _unusable_directory(path)
  if reason is not None:
    raise OutputDirError(f"--{flag}={reason}; choose another directory"
                         f"{' or fix its permissions' if 'writable' in reason else ''}.")


def check_output_file(path: Optional[str], flag: str = "out") -> None:
  """Refuses, creating nothing, an output file ``path`` that is a directory or whose
  directory cannot be created or written (issue 33: ``datasets.plot --out=`` under a
  file or in an unwritable directory ended in a traceback after the plot was drawn).
  """
  if path is None:
    return
  if not path:
    raise OutputDirError(f"--{flag} is empty; give a file to write.")
  path = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
  if os.path.isdir(path):
    raise OutputDirError(f"--{flag}={path} is a directory; give a file name, e.g. "
                         f"{os.path.join(path, 'figure.png')}.")
  if os.path.exists(path) and not os.access(path, os.W_OK):
    raise OutputDirError(f"--{flag}={path} is not writable; choose another file or fix "
                         "its permissions.")
  reason = _unusable_directory(os.path.dirname(path))
  if reason is not None:
    raise OutputDirError(f"--{flag}={path}: its directory {reason}; choose another place.")


# The --dataset values that name no directory: the embedded federation, a
# built-in builder (datasets/specs.py) or a TFDS dataset.
NAMED_DATASETS = ("synthetic", "fmnist", "cifar10", "svhn")


def check_dataset_flag(value: Optional[str], flag: str = "dataset") -> None:
  """Refuses, before TensorFlow loads, a ``--dataset`` path that does not exist (issue 33)."""
  if not value or value in NAMED_DATASETS or value.startswith("tfds:"):
    return
  path = os.path.expanduser(value)
  if not os.path.exists(path):
    raise ToolkitValueError(
        f"--{flag}={value}: no such split directory. Give a directory written by "
        "datasets.from_arrays(...).save(dir) or python -m datasets.build, tfds:<name>, or "
        f"one of {', '.join(NAMED_DATASETS)}.")
  if not os.path.isdir(path):
    raise ToolkitValueError(f"--{flag}={value} is a file; give a split directory.")


def prepare_output_dir(path: str, flag: str = "output_dir") -> str:
  """Creates ``path``, checks it is writable and locks it for this process.

  Returns the normalised path. Raises OutputDirError naming the flag when it
  cannot be created or written, or when another run holds its lock.
  """
  if not path:
    raise OutputDirError(f"--{flag} is empty; give a directory for the results.")
  path = os.path.normpath(os.path.expanduser(path))
  if os.path.exists(path) and not os.path.isdir(path):
    raise OutputDirError(f"--{flag}={path} exists and is not a directory.")
  try:
    os.makedirs(path, exist_ok=True)
  except OSError as e:
    raise OutputDirError(f"--{flag}={path}: cannot create it ({e.strerror}); choose a "
                         "writable directory.") from None
  if not os.path.isdir(path):
    raise OutputDirError(f"--{flag}={path} exists and is not a directory.")
  lock_path = os.path.join(path, LOCK_FILE)
  try:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
  except OSError as e:
    raise OutputDirError(f"--{flag}={path} is not writable ({e.strerror}); choose "
                         "another directory or fix its permissions.") from None
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    try:
      holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
    finally:
      os.close(fd)
    raise OutputDirError(
        f"--{flag}={path} is in use by another run (pid {holder}); two runs writing one "
        "directory would interleave their metrics and checkpoints. Wait for it, or give "
        "this run another directory.") from None
  os.ftruncate(fd, 0)
  os.pwrite(fd, str(os.getpid()).encode(), 0)
  _held_locks.append(fd)
  return path


def release_output_dirs() -> None:
  """Releases every lock :func:`prepare_output_dir` took (closing releases flock)."""
  while _held_locks:
    os.close(_held_locks.pop())


# ----------------------------------------------------------------- entry
_Terminated = termination.Terminated  # raised by the SIGTERM handler so cleanup runs


def _on_sigterm(signum, frame):
  del signum, frame
  termination.request()  # remembered, in case the exception lands where it is dropped
  raise _Terminated()


def _on_sigint(signum, frame):
  del signum, frame
  termination.request_interrupt()  # remembered, as a SIGTERM is
  raise KeyboardInterrupt()


def _unset(signum: int) -> bool:
  """Whether nobody but Python (or the start-up handler, :mod:`startup_signals`) handles it."""
  handler = signal.getsignal(signum)
  default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
  return handler in (default, None) or startup_signals.is_installed(handler)


def _exit_quietly_on_more_signals(code: int) -> None:
  """After the one line is printed, a second signal ends the exit at once, silently.

  Issue 50: a Ctrl-C during the teardown that follows the line (TFF's exit
  hook, TensorFlow's destructors) raised a second ``KeyboardInterrupt`` and
  the process died with -2 instead of 130.
  """
  try:
    for signum in (signal.SIGINT, signal.SIGTERM):
      signal.signal(signum, lambda *_: os._exit(code))  # pylint: disable=protected-access
  except ValueError:  # not the main thread
    pass


def _verbose() -> bool:
  try:
    return bool(flags.FLAGS[console.VERBOSE_FLAG].value)
  except (KeyError, flags.UnparsedFlagAccessError):
    return console.verbose_requested()


EXPECTED_ERRORS = (TffIdpError, ValueError, FileNotFoundError, NotADirectoryError,
                   PermissionError)


HELP_ARGS = ("--help", "-h", "-help", "--helpshort", "-helpshort", "-?")
HELPFULL_ARGS = ("--helpfull", "-helpfull")
_PROJECT_PREFIXES = ("experiments.", "tff_idp.", "datasets.", "benchmarks.")


def _main_module_names() -> set:
  """The names absl may file the running module's flags under."""
  main = sys.modules.get("__main__")
  spec = getattr(main, "__spec__", None)
  return {name for name in (sys.argv[0] if sys.argv else None, "__main__",
                            getattr(spec, "name", None)) if name}


def help_text(flag_values: Optional[flags.FlagValues] = None, full: bool = False) -> str:
  """``--help``: the module's own flags, then the shared ones; ``--helpfull``: every flag.

  Each flag with its one-line help and default, grouped by the module that
  defines it (absl's format); the module's docstring comes first.
  """
  fv = flags.FLAGS if flag_values is None else flag_values
  main = sys.modules.get("__main__")
  spec = getattr(main, "__spec__", None)
  command = (f"python -m {spec.name}" if getattr(spec, "name", None)
             else os.path.basename(sys.argv[0]) if sys.argv else "python")
  doc = (getattr(main, "__doc__", None) or "").strip()
  lines = [f"usage: {command} [--flag=value ...]"]
  if doc:
    lines += ["", doc.split("\n\n")[0]]
  by_module = fv.flags_by_module_dict()
  # The command's own flags are its module's key flags: those it defines and
  # those it adopts (``flags.adopt_module_key_flags``, as the presets do).
  own = [m for m in _main_module_names() if fv.get_key_flags_for_module(m)]
  own_names = {f.name for m in own for f in fv.get_key_flags_for_module(m)}
  shared = sorted(m for m in by_module if m not in own and m.startswith(_PROJECT_PREFIXES)
                  and not {f.name for f in by_module[m]} <= own_names)
  listed: set = set()  # each flag once (issue 51: the command's own were listed twice)

  def section(module: str) -> str:
    key_flags = (fv.get_key_flags_for_module(module) if module in own
                 else by_module.get(module, []))
    fresh = [f for f in key_flags if f.name not in listed]
    listed.update(f.name for f in fresh)
    if not fresh:
      return ""
    name = (getattr(spec, "name", None) if module in own else None) or module
    rendered: list = []
    fv._render_module_flags(name, fresh, rendered)  # pylint: disable=protected-access
    return "\n".join(rendered).strip()

  groups = [("flags of this command", own), ("shared flags", shared)]
  if full:
    groups.append(("every other flag", sorted(m for m in by_module
                                              if m not in own and m not in shared)))
  for title, modules in groups:
    parts = [part for part in (section(m) for m in modules) if part]
    if parts:
      lines += ["", f"{title}:", ""] + parts
  if not full:
    lines += ["", "--helpfull lists every flag, absl's and TensorFlow's included."]
  return "\n".join(lines)


def _exit_on_help(argv: list, fv: flags.FlagValues) -> None:
  """Prints the help and exits 0 when the command line asks for it (before any other check)."""
  args = list(argv[1:])
  if "--" in args:
    args = args[:args.index("--")]
  if any(a in HELPFULL_ARGS for a in args):
    print(help_text(fv, full=True), flush=True)
    sys.exit(0)
  if any(a in HELP_ARGS or a in ("--help=true", "--helpshort=true") for a in args):
    print(help_text(fv), flush=True)
    sys.exit(0)


def parse_flags(argv: list, flag_values: Optional[flags.FlagValues] = None) -> list:
  """absl's flag parsing with the toolkit's rule: one ``error:`` line and exit status 2.

  Pass it to ``app.run(main, flags_parser=parse_flags)``. absl's own parser
  prints "FATAL Flags parsing error" and the usage hint and exits 1 for an
  unknown enum value (``--accountant=foo``), a malformed number
  (``--rounds=1e9``) or an unknown flag. ``--help`` / ``-h`` / ``--helpshort``
  print :func:`help_text` (the module's own flags, then the shared ones) and
  ``--helpfull`` every flag, with exit status 0, before anything else runs.
  """
  fv = flags.FLAGS if flag_values is None else flag_values
  _exit_on_help(argv, fv)
  try:
    return fv(argv)
  except flags.Error as e:
    message = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "invalid literal for int()" in message:
      message += " (an integer is expected, e.g. --rounds=20)"
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def entry(main: Optional[Callable[[list], Optional[int]]] = None, *,
          rules: Optional[dict[str, Rule]] = None):
  """Decorates an absl ``main``: checks flags, one-line errors, clean interrupts.

  Use as ``@entry`` or, to override a flag's range for one module,
  ``@entry(rules={"eval_every": Rule("int", low=0, meaning=...)})``.
  """
  if main is None:
    return functools.partial(entry, rules=rules)

  @functools.wraps(main)
  def wrapped(argv) -> int:
    if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
      try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
      except (OSError, ValueError):
        pass  # stderr is not a real file (e.g. captured): no stack dumps
    previous = None
    if _unset(signal.SIGTERM):
      previous = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_int = None
    if _unset(signal.SIGINT):
      previous_int = signal.signal(signal.SIGINT, _on_sigint)
    try:
      try:
        refuse_positional(argv)
        check_flags(rules=rules)
        code = main(argv) or 0
        termination.check()  # a SIGTERM or Ctrl-C whose exception was dropped on the way
        return code
      except BaseException:
        if termination.requested():  # any error while SIGTERM tears the run down
          raise _Terminated() from None
        if termination.interrupted():  # any error while Ctrl-C tears the run down
          raise KeyboardInterrupt() from None
        raise
    except EXPECTED_ERRORS as e:
      if _verbose():
        traceback.print_exc()
      message = str(e) or type(e).__name__
      if isinstance(e, (FileNotFoundError, PermissionError)) and e.filename and \
          e.filename not in message:
        message = f"{message}: {e.filename}"
      print(f"error: {message}", file=sys.stderr, flush=True)
      return 2
    except KeyboardInterrupt:
      print(f"\n{INTERRUPTED}", file=sys.stderr, flush=True)
      return 130
    except _Terminated:
      print(f"\n{TERMINATED}", file=sys.stderr, flush=True)
      return 143
    finally:
      release_output_dirs()
      if previous is not None:
        signal.signal(signal.SIGTERM, previous)
      if previous_int is not None:
        signal.signal(signal.SIGINT, previous_int)

  wrapped.flag_rules = rules
  return wrapped


def launch(main: Callable[[list], Optional[int]],
           check: Optional[Callable[[], object]] = None,
           import_tensorflow: bool = True) -> None:
  """The ``if __name__ == "__main__":`` of an experiment module: bad flags fail before TensorFlow.

  Parses the command line (:func:`parse_flags`: absl's errors as one line,
  exit 2), checks every numeric flag (:func:`check_flags`, with the rules
  ``@entry`` gave ``main``) and runs ``check``, the module's own flag checks
  (they import no TensorFlow); a bad value prints one ``error:`` line and
  exits 2, in about a second. Only then is TensorFlow imported, before
  ``app.run`` hands control to ``main``: imported inside ``app.run`` (TF
  2.14.1 / Keras 2.14), ``tf.keras.Input`` yields graph tensors and every
  Sequential model fails with "Output tensors of a Sequential model must be
  the output of a TensorFlow `Layer`". Commands that never train
  (``datasets.plot``) pass ``import_tensorflow=False``.
  """
  remaining = parse_flags(sys.argv)
  try:
    refuse_positional(remaining)
    check_flags(rules=getattr(main, "flag_rules", None))
    if "output_dir" in flags.FLAGS:
      check_output_dir(flags.FLAGS["output_dir"].value)
    if "dataset" in flags.FLAGS:
      check_dataset_flag(flags.FLAGS["dataset"].value)
    if check is not None:
      check()
  except EXPECTED_ERRORS as e:
    print(f"error: {str(e) or type(e).__name__}", file=sys.stderr, flush=True)
    sys.exit(2)
  # The import takes seconds: SIGTERM/SIGINT meanwhile get the same one line as later on,
  # and both are remembered (a Ctrl-C that TF's gc callback swallows is raised again).
  if _unset(signal.SIGTERM):
    signal.signal(signal.SIGTERM, _on_sigterm)  # kept: ``entry`` and the runtime chain to it
  if _unset(signal.SIGINT):
    signal.signal(signal.SIGINT, _on_sigint)
  if not import_tensorflow:
    _run_to_exit(main)
    return
  try:
    import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
    termination.check()  # a signal whose exception a callback dropped during the import
  except KeyboardInterrupt:
    print(f"\n{INTERRUPTED}", file=sys.stderr, flush=True)
    _exit_quietly_on_more_signals(130)
    sys.exit(130)
  except _Terminated:
    print(f"\n{TERMINATED}", file=sys.stderr, flush=True)
    _exit_quietly_on_more_signals(143)
    sys.exit(143)
  _run_to_exit(main)


def _run_to_exit(main: Callable[[list], Optional[int]]) -> None:
  """``app.run(main)``; after an interrupted run's one line, more signals end the exit silently."""
  try:
    app.run(main, flags_parser=parse_flags)
  except SystemExit as e:
    if e.code in (130, 143):
      _exit_quietly_on_more_signals(e.code)
    raise
