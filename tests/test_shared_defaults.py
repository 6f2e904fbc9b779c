"""One set of defaults for a family's command line and its Python runner (issue 34 item 2).

Run in a subprocess: importing an experiment module defines its absl flags
in this process's global flag registry.
"""
import json
import os

from tests import forked_runs

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
  proc = forked_runs.run_code(_PROBE, [module, runner, json.dumps(names)], timeout=300)
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


# INO-SGD and APES: the command line's *effective* default of every setting
# (a flag left at None takes the default preset's value, as parse_config /
# check resolve it), against the runner's default of the same name. Every
# flag of the module (and of experiments.privacy_flags) and every runner
# argument must be listed here, shared or one-sided with its reason, so a new
# flag or argument without its twin fails the test too.
INO_SGD_SHARED = ["budgets", "methods", "drop_percents", "seeds", "steps", "expected_batch",
                  "learning_rate", "clip_norm", "mechanism", "delta", "ino_gamma_ratio",
                  "ino_alpha", "ino_beta", "model", "eval_every", "train_examples",
                  "test_examples", "data_seed", "budget_seed", "progress", "release_only"]
INO_SGD_CLI_ONLY = {
    "preset": "the preset's data and owners; the runner takes a split",
    "epsilons": "the preset owners' ε; the runner's budgets (compared) say both",
    "class_budgets": "owners by class: the runner's budgets ('0-4:0.1,5-9:1' syntax)",
    "record_distribution": "per-record budgets: the runner's budgets (a distribution name)",
    "dataset": "the data: the runner's split", "data_dir": "the data: the runner's split",
    "split_dir": "the data: the runner's split", "output_dir": "a path each chooses",
    "insecure_reproducible_noise": "a debugging mode the runner does not offer (NOT PRIVATE)",
}
INO_SGD_RUNNER_ONLY = {"split": "the data", "output_dir": "required"}

APES_SHARED = ["frameworks", "distribution", "epsilon_seed", "rounds", "local_epochs",
               "batch_size", "client_learning_rate", "proximal_strength", "clip",
               "keep_fraction", "bound", "shuffle_delta", "delta", "seed", "eval_every",
               "checkpoint_every", "device", "progress", "restart",
               "insecure_reproducible_noise", "client_execution"]
APES_CLI_ONLY = {
    "preset": "the users: datasets.shuffle_users builds them, the runner takes them",
    "data_dir": "the users", "users": "the users", "samples_per_user": "the users",
    "data_seed": "the users", "output_dir": "a path each chooses",
    "parallel_clients": "shared with IDP-FedAvg's flags; APES refuses it (no per-user "
                        "in-process execution)",
}
# Not listed: experiments.worker_flags (--workers, ...), the TFF runtime the command line
# enters; run_apes runs in yours with own_runtime=False.
APES_RUNNER_ONLY = {"users": "the data (built from the command line's data flags)",
                    "output_dir": "required", "own_runtime": "library: reuse your runtime",
                    "details": "extra summary.json entries (the command line's flags)"}

_EFFECTIVE_PROBE = """
import importlib, inspect, json, sys
from absl import flags
module, runner, argv = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
mod = importlib.import_module(module)
from tff_idp import runners
flags.FLAGS(["x", *argv])
own = {f.name for m in (module, "experiments.privacy_flags")
       for f in flags.FLAGS.flags_by_module_dict().get(m, [])}
own |= {f.name for f in flags.FLAGS.flags_by_module_dict().get("experiments.worker_flags", [])
        if f.name in ("client_execution", "parallel_clients") and module == "experiments.apes"}
def norm(v):
  if isinstance(v, (list, tuple)):
    out = []
    for x in v:
      try:
        out.append(float(x))
      except (TypeError, ValueError):
        out.append(str(x))
    return out
  return v
effective = {n: flags.FLAGS[n].value for n in own}
if module == "experiments.ino_sgd":
  cfg = mod.parse_config()
  effective.update({k: cfg[k] for k in cfg if k in effective})
  effective["budgets"] = ",".join(f"{o}:{e:g}" for o, e in zip(cfg["owner_names"],
                                                                  cfg["epsilons"]))
else:
  users, rounds, training = mod.check()
  effective.update(rounds=rounds, **{k: getattr(training, k) for k in (
      "local_epochs", "batch_size", "client_learning_rate", "proximal_strength", "clip",
      "keep_fraction")})
params = {n: p.default for n, p in inspect.signature(getattr(runners, runner)).parameters.items()}
params = {n: (None if v is inspect.Parameter.empty else v) for n, v in params.items()}
print(json.dumps({"flags": sorted(own),
                  "cli": {n: norm(v) for n, v in effective.items()},
                  "runner": {n: norm(v) for n, v in params.items()}}, default=str))
"""


def _effective(module, runner, argv=()):
  proc = forked_runs.run_code(_EFFECTIVE_PROBE, [module, runner, json.dumps(list(argv))],
                              timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_family(probe, shared, cli_only, runner_only):
  flags_, runner = set(probe["flags"]), set(probe["runner"])
  assert flags_ - set(shared) - set(cli_only) == set(), "flags without a runner argument"
  assert runner - set(shared) - set(runner_only) == set(), "arguments without a flag"
  assert set(shared) <= flags_ | {"budgets"} and set(shared) <= runner
  return {n: (probe["cli"][n], probe["runner"][n]) for n in shared
          if probe["cli"][n] != probe["runner"][n]}


def test_ino_sgd_command_line_and_runner_share_their_defaults():
  """Bug caught: run_ino_sgd trained at η = 1 with one seed while the command line's
  embedded default (which --dataset also used) trained at η = 8 over five seeds, and
  --dataset kept only the embedded preset's 20,000 records of your split."""
  probe = _effective("experiments.ino_sgd", "run_ino_sgd", ["--dataset=your/split"])
  differ = _check_family(probe, INO_SGD_SHARED, INO_SGD_CLI_ONLY, INO_SGD_RUNNER_ONLY)
  assert not differ, differ


def test_ino_sgd_embedded_preset_is_the_defaults_on_the_embedded_data():
  """Without --dataset the preset's hyperparameters are the same defaults (only its data
  sizes are the embedded data's own)."""
  probe = _effective("experiments.ino_sgd", "run_ino_sgd")
  differ = _check_family(probe, INO_SGD_SHARED, INO_SGD_CLI_ONLY, INO_SGD_RUNNER_ONLY)
  assert set(differ) == {"train_examples", "test_examples"}, differ


def test_apes_command_line_and_runner_share_their_defaults():
  """APES had no runner; run_apes and the flags both read tff_idp/apes/defaults.py."""
  probe = _effective("experiments.apes", "run_apes")
  differ = _check_family(probe, APES_SHARED, APES_CLI_ONLY, APES_RUNNER_ONLY)
  assert not differ, differ
