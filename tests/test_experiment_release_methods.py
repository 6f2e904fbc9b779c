"""Under ``--release_only`` the default method and run lists hold nothing without noise.

rPDP-FL's PrivacyFree and IDP-FedAvg's ``nonprivate`` run spec train without
noise: no ledger accounts for their models or accuracies, so a release must
not hold them (issue 48). Given explicitly they are refused
(tests/test_flags_before_tensorflow.py); left to the default they are left
out, and outside ``--release_only`` the defaults keep them. Each case parses
the flags and runs the module's own checks in a fresh interpreter (absl's
registry is per process), without TensorFlow. Bug caught: a default release
that trains and reports PrivacyFree or ``nonprivate``.
"""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# module, the expression of the checked list (after its flags are parsed), non-private entry
CASES = [
    ("experiments.rpdp", "module.check()['methods']", "privacy_free"),
    ("experiments.idp_fedavg", "module.training_config().runs", "nonprivate"),
    ("experiments.cifar10", "presets.resolved_flags(module.PRESET)['runs']", "nonprivate"),
]

_DRIVER = """
import importlib, json, sys
from absl import flags
from experiments import presets
module = importlib.import_module(sys.argv[1])
out = {}
for args in ([], ["--release_only"]):
  flags.FLAGS.unparse_flags()
  flags.FLAGS([sys.argv[1], "--output_dir=/tmp/unused", *args])
  out[" ".join(args)] = eval(sys.argv[2])
out["tensorflow"] = any(m.startswith("tensorflow") for m in sys.modules)
print(json.dumps(out))
"""


@pytest.mark.parametrize("module,expression,non_private", CASES, ids=[c[0] for c in CASES])
def test_release_only_default_leaves_the_non_private_entry_out(module, expression,
                                                                 non_private):
  proc = subprocess.run(
      [sys.executable, "-c", _DRIVER, module, expression], capture_output=True, text=True,
      timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = json.loads(proc.stdout.strip().splitlines()[-1])
  assert non_private in out[""]                    # outside release mode: the default
  released = out["--release_only"]
  assert non_private not in released
  assert released == [m for m in out[""] if m != non_private]
  assert not out["tensorflow"]


@pytest.mark.parametrize("methods,audit,message", [
    (["ours", "privacy_free"], None, "drop it from methods"),
    (["ours"], object(), "audit without release_only"),
])
def test_the_library_refuses_them_in_release_mode_too(methods, audit, message):
  """``tff_idp.rpdp.runs.run(release_only=True)`` (the experiments' library entry) refuses
  PrivacyFree and a canary audit (a second training on the records) before any work."""
  from tff_idp.rpdp import runs  # pylint: disable=g-import-not-at-top  (TensorFlow)
  with pytest.raises(ValueError, match=message):
    runs.run(None, {}, None, methods, [0], "/nonexistent", 1.0, 0.1, 8.0, 0, 0, False,
             release_only=True, audit=audit)
