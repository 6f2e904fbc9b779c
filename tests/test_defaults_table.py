"""docs/running.md's defaults table is the one source of each family's defaults, rendered."""
import os

import pytest

from tff_idp import defaults_table
from tff_idp.apes import defaults as apes_defaults
from tff_idp.idp_fedavg import config as idp_config
from tff_idp.ino_sgd import defaults as ino_defaults
from tff_idp.rpdp import defaults as rpdp_defaults

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _page() -> str:
  with open(os.path.join(ROOT, defaults_table.PAGE), encoding="utf-8") as f:
    return f.read()


def test_the_docs_table_is_up_to_date_with_the_sources():
  """Fails after a default changes until `python -m tff_idp.defaults_table --write` runs."""
  page = _page()
  assert defaults_table.replace_block(page, defaults_table.render()) == page, (
      "docs/running.md's defaults table is out of date: run "
      "python -m tff_idp.defaults_table --write")
  assert defaults_table.main([]) == 0


def test_every_family_and_every_default_is_in_the_table():
  block = _page().split(defaults_table.START)[1].split(defaults_table.END)[0]
  for source in (idp_config.TRAINING_DEFAULTS, rpdp_defaults.DEFAULTS, ino_defaults.DEFAULTS,
                 apes_defaults.DEFAULTS):
    for name in source:
      assert f"| `{name}` |" in block, name
  assert "| `learning_rate` | 8 |" in block and "| `delta` | 1e-5 |" in block  # INO-SGD


def test_a_changed_default_changes_the_rendered_table(monkeypatch):
  before = defaults_table.render()
  monkeypatch.setitem(ino_defaults.DEFAULTS, "learning_rate", 4.0)
  after = defaults_table.render()
  assert after != before and "| `learning_rate` | 4 |" in after
  assert defaults_table.replace_block(_page(), after) != _page()


def test_values_render_as_the_docs_write_them():
  assert defaults_table._value(1e-4, None) == "1e-4"
  assert defaults_table._value(2.5e-5, None) == "2.5e-5"
  assert defaults_table._value(0.6, None) == "0.6"
  assert defaults_table._value((1.0, 2.0), None) == "1, 2"
  assert defaults_table._value(None, "δ/(10·d·T)") == "δ/(10·d·T)"
  assert defaults_table._value(False, None) == "false"


def test_markers_are_required():
  with pytest.raises(ValueError, match="marker"):
    defaults_table.replace_block("no markers here", "table")
