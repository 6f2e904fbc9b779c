"""The defaults table of docs/running.md, rendered from each family's one source of defaults.

Each family's command line and Python runner read their defaults from one
dict (issue 34 item 2): IDP-FedAvg :data:`tff_idp.idp_fedavg.config.TRAINING_DEFAULTS`,
rPDP-FL :data:`tff_idp.rpdp.defaults.DEFAULTS`, INO-SGD
:data:`tff_idp.ino_sgd.defaults.DEFAULTS` and APES
:data:`tff_idp.apes.defaults.DEFAULTS`. This module renders them as markdown,
one table per family, between the ``<!-- defaults-table:start -->`` and
``<!-- defaults-table:end -->`` markers of docs/running.md;
``tests/test_defaults_table.py`` fails when the page is out of date. No
TensorFlow. Regenerate with::

  python -m tff_idp.defaults_table --write
"""
from __future__ import annotations

import os
import sys
from typing import Any, Mapping, Optional, Sequence

from tff_idp.apes import defaults as apes_defaults
from tff_idp.idp_fedavg import config as idp_config
from tff_idp.ino_sgd import defaults as ino_defaults
from tff_idp.rpdp import defaults as rpdp_defaults

START = "<!-- defaults-table:start -->"
END = "<!-- defaults-table:end -->"
PAGE = os.path.join("docs", "running.md")

# (title, command line, runner, source, defaults, what a None default means)
FAMILIES: Sequence[tuple[str, str, str, str, Mapping[str, Any], Mapping[str, str]]] = (
    ("IDP-FedAvg", "experiments.idp_fedavg", "run_idp_fedavg",
     "tff_idp.idp_fedavg.config.TRAINING_DEFAULTS", idp_config.TRAINING_DEFAULTS,
     {"clipped_count_stddev": "0.05·c (σ where 0.05·c ≤ σ/2)"}),
    ("rPDP-FL", "experiments.rpdp", "run_rpdp", "tff_idp.rpdp.defaults.DEFAULTS",
     rpdp_defaults.DEFAULTS, {}),
    ("INO-SGD", "experiments.ino_sgd", "run_ino_sgd", "tff_idp.ino_sgd.defaults.DEFAULTS",
     ino_defaults.DEFAULTS, {"expected_batch": "a tenth of the records, at most 1,000"}),
    ("APES / S-APES", "experiments.apes", "run_apes", "tff_idp.apes.defaults.DEFAULTS",
     apes_defaults.DEFAULTS, {"shuffle_delta": "δ/(10·d·T)"}),
)


def _value(value: Any, none_means: Optional[str]) -> str:
  if value is None:
    return none_means or "—"
  if isinstance(value, bool):
    return "true" if value else "false"
  if isinstance(value, float):
    if 0 < abs(value) < 1e-3:  # 1e-4, 2.5e-5: the way the docs write δ
      mantissa, exponent = f"{value:e}".split("e")
      return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"
  if isinstance(value, (list, tuple)):
    return ", ".join(_value(v, None) for v in value)
  return str(value)


def render_family(title: str, command_line: str, runner: str, source: str,
                  defaults: Mapping[str, Any], none_means: Mapping[str, str]) -> str:
  """One family's heading line and markdown table: setting, default."""
  rows = [f"| `{name}` | {_value(value, none_means.get(name))} |"
          for name, value in defaults.items()]
  return "\n".join([f"**{title}**: `{command_line}` flags and `tff_idp.{runner}` arguments, "
                    f"from `{source}`.", "", "| setting | default |", "|---|---|", *rows])


def render() -> str:
  """Every family's table, in the order of :data:`FAMILIES`."""
  return "\n\n".join(render_family(*family) for family in FAMILIES)


def replace_block(page_text: str, table: str) -> str:
  """``page_text`` with the text between the markers replaced by ``table``."""
  if page_text.count(START) != 1 or page_text.count(END) != 1:
    raise ValueError(f"{PAGE} needs one {START} and one {END} marker.")
  head, rest = page_text.split(START)
  _, tail = rest.split(END)
  return f"{head}{START}\n{table}\n{END}{tail}"


def main(argv: Sequence[str]) -> int:
  """``--write`` regenerates the page's block; ``--check`` (default) exits 1 when stale."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = os.path.join(root, PAGE)
  with open(path, encoding="utf-8") as f:
    text = f.read()
  updated = replace_block(text, render())
  if "--write" in argv:
    if updated != text:
      with open(path, "w", encoding="utf-8") as f:
        f.write(updated)
    print(f"{PAGE}: defaults table {'updated' if updated != text else 'up to date'}")
    return 0
  if updated != text:
    print(f"{PAGE}: the defaults table is out of date; run python -m tff_idp.defaults_table "
          "--write", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
