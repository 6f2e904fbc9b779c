"""Every flag an experiment module defines is documented on its page (issue 25, item 16).

Each module is imported in its own subprocess (importing one defines its flags in absl's
global registry) and its flags are read from ``flags_by_module_dict``; the page must
mention each as ``--name``. The fleet's TLS and timeout flags are documented once, in
docs/fleet.md, so a page needs only ``--workers`` of them.
"""
import json
import os

import pytest

from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = {
    "experiments.idp_fedavg": "docs/idp_fedavg.md",
    "experiments.fmnist": "docs/idp_fedavg.md",
    "experiments.rpdp": "docs/rpdp.md",
    "experiments.centralized": "docs/rpdp.md",
    "experiments.apes": "docs/apes.md",
    "experiments.audit": "docs/audit.md",
    "experiments.ino_sgd": "docs/ino_sgd.md",
}
FLEET_ONLY = {"worker_connect_timeout_s", "worker_retries", "worker_rpc_timeout_s",
              "worker_tls_ca", "worker_tls_cert", "worker_tls_key", "worker_tls_server_name"}
DUMP = ("import importlib, json, sys; from absl import flags; importlib.import_module(sys.argv[1]); "
        "print(json.dumps({m: sorted(f.name for f in fl) for m, fl in "
        "flags.FLAGS.flags_by_module_dict().items() if m.startswith('experiments')}))")


@pytest.fixture(scope="module")
def module_flags():
  out = {}
  for module in PAGES:  # a fresh process each: importing a module defines its flags
    proc = forked_runs.run_code(DUMP, [module], timeout=300, before_tensorflow=True)
    stdout = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    out[module] = sorted({n for names in json.loads(stdout.strip().splitlines()[-1]).values()
                          for n in names} - FLEET_ONLY)
  return out


@pytest.mark.parametrize("module", sorted(PAGES))
def test_every_flag_is_on_the_modules_page(module, module_flags):
  page = open(os.path.join(ROOT, PAGES[module])).read()
  missing = [name for name in module_flags[module] if f"--{name}" not in page]
  assert not missing, f"{PAGES[module]} does not document {module}'s " + ", ".join(
      f"--{n}" for n in missing)
