"""Every `python -m <module>` in the docs, deploy files and Makefile names a real module.

Modules moved in the family restructuring (issue 22); a stale command in a doc
or a service file would only fail on a user's machine.
"""
import importlib.util
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
_MODULE = re.compile(r"""(?:-m\s+|"-m",\s*")((?:tff_idp|datasets|experiments|benchmarks|tests)"""
                     r"""(?:\.\w+)*)""")


def _references():
  files = [ROOT / "README.md", ROOT / "Makefile", *sorted((ROOT / "docs").glob("*.md")),
           *sorted(p for p in (ROOT / "deploy").rglob("*") if p.is_file())]
  for path in files:
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
      for module in _MODULE.findall(line):
        yield f"{path.relative_to(ROOT)}:{n}", module


def test_every_module_command_resolves():
  refs = list(_references())
  assert len(refs) > 20  # the scan itself works
  missing = [f"{where}: {module}" for where, module in refs
             if importlib.util.find_spec(module) is None]
  assert not missing, missing
