"""How fast a bad flag is refused, per command line, against importing TensorFlow.

Issue 25 item 1: a bad value must give its one line, exit 2, in under 2 s.
Each module is run with a bad flag (median of ``--repeats`` runs) next to
``python -c "import tensorflow_federated"`` (what a refusal cost when the
flags were checked after the import), interleaved in one process so that both
see the same machine load:

  .venv/bin/python -m benchmarks.bench_flag_errors
"""
import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REPEATS = flags.DEFINE_integer("repeats", 3, "Runs per command (the median is reported).")

COMMANDS = {
    "experiments.idp_fedavg --runs=10-20-30": ["-m", "experiments.idp_fedavg", "--runs=10-20-30"],
    "experiments.rpdp --methods=foo": ["-m", "experiments.rpdp", "--methods=foo"],
    "experiments.apes --frameworks=foo": ["-m", "experiments.apes", "--frameworks=foo"],
    "experiments.audit --controls=zz": ["-m", "experiments.audit", "--controls=zz"],
    "experiments.ino_sgd --delta=2": ["-m", "experiments.ino_sgd", "--delta=2"],
    "experiments.centralized --delta=2": ["-m", "experiments.centralized", "--delta=2"],
    "experiments.fmnist --rounds=0": ["-m", "experiments.fmnist", "--rounds=0"],
    "import tensorflow_federated (the old cost)": ["-c", "import tensorflow_federated"],
}


def _seconds(args: list) -> tuple[float, int]:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
  start = time.perf_counter()
  proc = subprocess.run([sys.executable, *args], capture_output=True, env=env, cwd=ROOT,
                        stdin=subprocess.DEVNULL, timeout=300, check=False)
  return time.perf_counter() - start, proc.returncode


def main(argv):
  del argv
  times = {name: [] for name in COMMANDS}
  codes = {}
  for _ in range(_REPEATS.value):
    for name, args in COMMANDS.items():  # interleaved: the same load for every command
      seconds, codes[name] = _seconds(args)
      times[name].append(seconds)
  baseline = statistics.median(times["import tensorflow_federated (the old cost)"])
  print("| command | exit | median s | ÷ TFF import |\n|---|---|---|---|")
  for name, values in times.items():
    median = statistics.median(values)
    print(f"| {name} | {codes[name]} | {median:.2f} | {median / baseline:.2f} |")


if __name__ == "__main__":
  app.run(main)
