"""The layering contracts of docs/architecture.md hold (import-linter, setup.cfg).

grimp builds the import graph from the source, function-level imports
included, so a cycle or a forbidden import cannot hide inside a function.
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_import_linter_contracts_are_kept():
  lint = os.path.join(os.path.dirname(sys.executable), "lint-imports")
  proc = subprocess.run([lint, "--config", os.path.join(ROOT, "setup.cfg"), "--no-cache"],
                        capture_output=True, text=True, cwd=ROOT, timeout=300,
                        env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
  assert "0 broken" in proc.stdout


def test_the_contracts_cover_the_design_rules():
  """A contract that silently disappeared from setup.cfg would pass trivially."""
  with open(os.path.join(ROOT, "setup.cfg")) as f:
    text = f.read()
  for contract in ("library-is-self-contained", "datasets-leaves", "families-independent",
                   "engine-is-family-agnostic", "audit-is-a-plug-in",
                   "accounting-without-tensorflow", "no-package-cycles"):
    assert f"[importlinter:contract:{contract}]" in text, contract


def test_families_and_engine_load_no_audit_code():
  """Importing every family and the engine loads no module of tff_idp.audit."""
  code = ("import sys, importlib\n"
          "for m in ['tff_idp.engine.driver', 'tff_idp.engine.plugins',\n"
          "          'tff_idp.idp_fedavg.runs', 'tff_idp.idp_fedavg.process',\n"
          "          'tff_idp.rpdp.runs', 'tff_idp.rpdp.dp_sgd', 'tff_idp.apes.runs',\n"
          "          'tff_idp.ino_sgd.importance', 'tff_idp.centralized.trainer']:\n"
          "  importlib.import_module(m)\n"
          "print(sorted(m for m in sys.modules if m.startswith('tff_idp.audit')))\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        cwd=ROOT, timeout=300,
                        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.strip().splitlines()[-1] == "[]"
