"""Runs an experiment's ``main()`` for many bad flag sets in ONE process.

The process is forked from one without TensorFlow (``tests/forked_runs.py``).
One fresh absl flag registry and one process start for all cases keeps
the "bad flags fail fast with advice" tests at a few seconds in all.
"""
import json

from tests import forked_runs

_DRIVER = """
import contextlib, io, json, sys
from absl import flags
import importlib
module = importlib.import_module(sys.argv[1])
base = json.loads(sys.argv[2])
results = []
for args in json.loads(sys.argv[3]):
  flags.FLAGS.unparse_flags()
  flags.FLAGS([sys.argv[1]] + base + args)
  err = io.StringIO()
  with contextlib.redirect_stderr(err):
    rc = module.main([])
  results.append({"rc": rc, "stderr": err.getvalue()})
results.append({"tensorflow_imported": any(m.startswith("tensorflow") for m in sys.modules)})
print(json.dumps(results))
"""


def run_bad_flags(module: str, base_args: list, cases: list, timeout: int = 300) -> list:
  """``[{"rc", "stderr"}, …]`` per case, then ``{"tensorflow_imported": bool}``."""
  proc = forked_runs.run_code(_DRIVER, [module, json.dumps(base_args), json.dumps(cases)],
                              timeout=timeout, before_tensorflow=True)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_fails_with_advice(result: dict, pattern: str) -> None:
  """One bad-flag case exited 2 with an ``error: …`` line matching ``pattern``."""
  import re  # pylint: disable=g-import-not-at-top
  assert result["rc"] == 2, result
  assert result["stderr"].startswith("error: "), result
  assert re.search(pattern, result["stderr"]), result["stderr"]
