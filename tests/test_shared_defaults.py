"""One set of defaults for a family's command line and its Python runner (issue 34 item 2).

Run in a subprocess: importing an experiment module defines its absl flags
in this process's global flag registry.
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Settings the command line has and the runner takes under the same name.
# Not compared: runs and seeds (the command line's paired comparison of six
# run specs over eight seeds; the runner's default is one seed of
# nonprivate / idp / scale), output_dir (a path each chooses), and the
# command line's data flags (the runner takes a split).
IDP_FEDAVG_SHARED = ["budgets", "ratios", "rounds", "clients_per_round", "local_epochs",
                     "batch_size", "client_learning_rate", "server_learning_rate",
                     "client_optimizer", "delta", "accountant", "initial_clip",
                     "clipped_count_stddev", "max_rate", "allow_overrun", "eval_every",
                     "checkpoint_every", "model", "head", "device", "progress",
                     "client_execution", "parallel_clients"]

# rPDP-FL's runner takes None for "the command line's default" (rpdp/defaults.py).
RPDP_SHARED = ["rounds", "local_steps", "client_rate", "noise_multiplier", "clip_norm",
               "learning_rate", "delta", "threat_model", "privacy_free_batch", "eval_every",
               "checkpoint_every", "methods", "estimator", "model", "head", "budget_seed",
               "fresh_budgets_per_seed", "device", "progress", "client_execution",
               "parallel_clients"]

_PROBE = """
import importlib, inspect, json, sys
from absl import flags
module, runner, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
importlib.import_module(module)
from tff_idp import runners
from tff_idp.rpdp import defaults as rpdp_defaults
flags.FLAGS(["x"])
params = inspect.signature(getattr(runners, runner)).parameters
def number_or_text(x):
  try:
    return float(x)
  except (TypeError, ValueError):
    return str(x)
def norm(v):
  if isinstance(v, (list, tuple)):
    return [number_or_text(x) for x in v]
  return v
def runner_default(name):
  value = params[name].default
  if value is None and runner == "run_rpdp":
    value = rpdp_defaults.DEFAULTS.get(name)
  return value
print(json.dumps({n: [norm(flags.FLAGS[n].value), norm(runner_default(n))] for n in names}))
"""


def _compare(module, runner, names):
  proc = subprocess.run([sys.executable, "-c", _PROBE, module, runner, json.dumps(names)],
                        capture_output=True, text=True, timeout=300, cwd=ROOT,
                        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  pairs = json.loads(proc.stdout.strip().splitlines()[-1])
  return {n: v for n, v in pairs.items() if v[0] != v[1]}


def test_idp_fedavg_command_line_and_runner_share_their_defaults():
  """Bug caught: run_idp_fedavg starting adaptive clipping at 0.1 (the CLI: 2.5) with
  one local epoch at lr 0.1 (the CLI: 5 at 0.6), 7-12 points lower on the digits."""
  differ = _compare("experiments.idp_fedavg", "run_idp_fedavg", IDP_FEDAVG_SHARED)
  assert not differ, differ


def test_rpdp_command_line_and_runner_share_their_defaults():
  """rPDP-FL's settings come from rpdp/defaults.py in both entry points."""
  differ = _compare("experiments.rpdp", "run_rpdp", RPDP_SHARED)
  assert not differ, differ
