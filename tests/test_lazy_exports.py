"""tff_idp.lazy_exports: a package's names load their module on first use only."""
import subprocess
import sys
import types

import pytest

from tff_idp import lazy_exports


def test_a_name_loads_its_module_once_and_unknown_names_fail(monkeypatch):
  package = types.ModuleType("fake_package")
  monkeypatch.setitem(sys.modules, "fake_package", package)
  getattr_ = lazy_exports.getattr_for("fake_package", {"sqrt": "math"})
  assert getattr_("sqrt")(9.0) == 3.0
  assert package.sqrt(16.0) == 4.0  # cached on the package
  with pytest.raises(AttributeError, match="'fake_package' has no attribute 'cos'"):
    getattr_("cos")


def test_family_packages_import_no_tensorflow_until_a_name_is_used():
  code = ("import sys, tff_idp.rpdp, tff_idp.apes, tff_idp.rpdp.defaults; "
          "before = 'tensorflow' in sys.modules; tff_idp.apes.MECHANISMS; "
          "print(before, 'tensorflow' in sys.modules)")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=300)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split() == ["False", "True"]
