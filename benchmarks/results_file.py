"""Where a benchmark's results go: printed as its table, then written as JSON."""
from __future__ import annotations

import json
import os


def report(res: dict, table_text: str, path: str) -> dict:
  """Prints ``table_text`` and the load average at the end, writes ``res`` to ``path``."""
  print(table_text)
  print(f"load average at end: {res['load_end']}")
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w") as f:
    json.dump(res, f, indent=1)
  return res
