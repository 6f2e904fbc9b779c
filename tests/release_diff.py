"""Comparing two releases field by field (the neighbouring-release tests of issue 48).

A release's files become flat ``{path: value}`` maps; two releases on datasets
that differ in one record may differ only at paths an allow-list names.
"""
import re
from typing import Any, Sequence


def flatten(value: Any, prefix: str = "") -> dict:
  """``{"a/b/0": leaf}`` for nested dicts and lists."""
  if isinstance(value, dict):
    out = {}
    for k, v in value.items():
      out.update(flatten(v, f"{prefix}/{k}" if prefix else str(k)))
    return out
  if isinstance(value, list):
    out = {}
    for i, v in enumerate(value):
      out.update(flatten(v, f"{prefix}/{i}"))
    return out
  return {prefix: value}


def table_cells(lines: Sequence[str]) -> tuple[dict, list]:
  """{"table/<column>#<row>": cell} of every Markdown table in ``lines``; other lines."""
  cells, other, header = {}, [], None
  for line in lines:
    if not line.startswith("|"):
      header = None
      other.append(line)
      continue
    row = [c.strip() for c in line.strip("|").split("|")]
    if header is None:
      header = row
      other.append(line)   # the header itself must be identical
    elif not set(line) <= set("|-: "):
      for name, cell in zip(header, row):
        cells[f"table/{name}#{row[0]}"] = cell
  return cells, other


def allowed(path: str, patterns: Sequence[str]) -> bool:
  """``path`` without its row (``#<row>``: a metrics.csv row, a table's method) allowed?"""
  return any(re.fullmatch(p, re.sub(r"#[^/]*$", "", path)) for p in patterns)


def differences(a: dict, b: dict, what: str, patterns: Sequence[str]) -> list[str]:
  """Paths whose values differ (or exist in one only), outside the allow-list ``patterns``."""
  bad = []
  for path in sorted(set(a) | set(b)):
    if (path in a) != (path in b):
      bad.append(f"{what}: {path} in one release only")
    elif a[path] != b[path] and not allowed(path, patterns):
      bad.append(f"{what}: {path}: {a[path]!r} != {b[path]!r}")
  return bad
