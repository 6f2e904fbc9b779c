"""The layering contracts of docs/architecture.md hold (import-linter, setup.cfg).

grimp builds the import graph from the source, function-level imports
included, so a cycle or a forbidden import cannot hide inside a function.
"""
import ast
import os
import pathlib
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


SCRIPT_FOLDERS = ("tff_idp", "experiments", "datasets", "tools", "benchmarks")
"""Every folder of Python in the tree; tools/ scripts import each other by bare name."""


def _module_graph(root: pathlib.Path) -> dict[str, set[str]]:
  """Module -> the tree's modules it imports, at any depth (function-level imports included)."""
  paths = {}
  for folder in SCRIPT_FOLDERS:
    for path in (root / folder).rglob("*.py"):
      parts = list(path.relative_to(root).with_suffix("").parts)
      parts = parts[:-1] if parts[-1] == "__init__" else parts
      paths[parts[-1] if folder == "tools" else ".".join(parts)] = path

  def resolve(name: str):
    while name and name not in paths:
      name = name.rpartition(".")[0]
    return name or None

  graph = {}
  for module, path in paths.items():
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        imported.update(resolve(alias.name) for alias in node.names)
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          parts = package.split(".")[:len(package.split(".")) - node.level + 1]
          base = ".".join(parts + ([node.module] if node.module else []))
        imported.update(resolve(f"{base}.{alias.name}") or resolve(base) for alias in node.names)
    graph[module] = imported - {None, module}
  return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for other in graph[node]:
      if other not in index:
        visit(other)
        low[node] = min(low[node], low[other])
      elif other in on_stack:
        low[node] = min(low[node], index[other])
    if low[node] == index[node]:
      component = []
      while not component or component[-1] != node:
        component.append(stack.pop())
        on_stack.discard(component[-1])
      if len(component) > 1:
        found.append(sorted(component))

  for node in graph:
    if node not in index:
      visit(node)
  return found


def test_no_import_circle_anywhere_in_the_tree():
  graph = _module_graph(pathlib.Path(ROOT))
  assert "mutmut_run" in graph and "tff_idp.engine.sampling" in graph
  assert _circles(graph) == []


def test_the_circle_check_sees_a_function_level_import_between_scripts(tmp_path):
  (tmp_path / "tools").mkdir()
  (tmp_path / "tools" / "a.py").write_text("import b\n")
  (tmp_path / "tools" / "b.py").write_text("def f():\n  import a\n")
  (tmp_path / "tools" / "c.py").write_text("import a\n")
  assert _circles(_module_graph(tmp_path)) == [["a", "b"]]
