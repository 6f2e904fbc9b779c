"""The public API of tff_idp (docs/api.md): every name resolves, lazily."""
import os
import re
import subprocess
import sys

import tff_idp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_public_name_resolves_to_its_module():
  for name in tff_idp.__all__:
    value = getattr(tff_idp, name)
    assert value.__module__.startswith("tff_idp."), (name, value.__module__)


def test_importing_the_package_and_accounting_pulls_in_no_tensorflow():
  code = ("import sys, tff_idp, tff_idp.accounting, tff_idp.accounting.record.plan; "
          "tff_idp.get_noise; "
          "print(any(m.split('.')[0] in ('tensorflow', 'tensorflow_federated') "
          "for m in sys.modules))")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        cwd=ROOT, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip() == "False"


def test_docs_api_lists_exactly_the_public_names():
  with open(os.path.join(ROOT, "docs", "api.md")) as f:
    listed = set(re.findall(r"^\| `(\w+)` \|", f.read(), re.M))
  assert listed == set(tff_idp.__all__)


def test_an_unknown_name_is_an_attribute_error():
  try:
    tff_idp.no_such_name  # pylint: disable=pointless-statement
  except AttributeError as e:
    assert "no_such_name" in str(e)
  else:
    raise AssertionError("expected AttributeError")


def test_readme_examples_use_only_the_public_api():
  with open(os.path.join(ROOT, "README.md")) as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
  assert blocks
  for block in blocks:
    for line in block.splitlines():
      if re.match(r"\s*(from|import)\s+tff_idp", line):
        assert re.match(r"\s*import tff_idp\s*$", line), line
