"""Per-module kill rates of the last `make mutation` run (mutmut 3's results in mutants/).

Reads the verdicts mutmut stored beside each mutated file (mutants/<path>.py.meta),
groups them by the modules listed in setup.cfg's [mutmut] only_mutate (the
accounting package is one entry, with a line per file under it), prints the
kill rate of each, and lists every mutant that was not killed with its diff
line. Mutants named in docs/architecture.md's table of equivalent mutants
(section "Mutation testing") are counted apart: they cannot change behaviour.

  python tools/mutation_report.py            # table + survivors
  python tools/mutation_report.py --no-diff  # table + survivor names only

Exit status 0 always: the figure is a report, not a gate (the run is outside CI).
"""
from __future__ import annotations

import argparse
import configparser
import fnmatch
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
ARCH = ROOT / "docs" / "architecture.md"

# mutmut 3's exit-code verdicts (mutmut/stats.py)
KILLED = {1: "killed", 3: "killed"}
TIMEOUT = {36, -24, 24, 152, 255}


def listed_modules() -> list[str]:
  cfg = configparser.ConfigParser()
  cfg.read(ROOT / "setup.cfg")
  return [p for p in cfg.get("mutmut", "only_mutate").split("\n") if p.strip()]


def equivalents() -> dict[str, str]:
  """Mutant name -> reason, from the table in docs/architecture.md."""
  text = ARCH.read_text()
  start = text.find("### Equivalent mutants")
  if start < 0:
    return {}
  section = text[start:]
  end = section.find("\n## ", 1)
  section = section if end < 0 else section[:end]
  out = {}
  for line in section.splitlines():
    m = re.match(r"\|\s*`([^`]+__mutmut_\d+)`\s*\|\s*(.*?)\s*\|\s*$", line)
    if m:
      out[m.group(1)] = m.group(2)
  return out


def verdict(code) -> str:
  if code in KILLED:
    return "killed"
  if code in TIMEOUT:
    return "timeout"
  return {0: "survived", 5: "no tests", 33: "no tests", None: "not checked",
          34: "skipped", -11: "segfault", -9: "segfault"}.get(code, "suspicious")


def diff_line(name: str, path: str) -> str:
  """The mutant's changed lines, from mutmut's own diff (run in the repository root)."""
  from mutmut.mutation.diff_apply import get_diff_for_mutant  # pylint: disable=g-import-not-at-top
  try:
    out = get_diff_for_mutant(name, path=path)
  except Exception as e:  # pylint: disable=broad-except
    return f"(no diff: {e})"
  lines = [l for l in out.splitlines() if l[:1] in "-+" and l[:3] not in ("---", "+++")]
  return " / ".join(" ".join(l.split()) for l in lines)[:240]


def main() -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("--no-diff", action="store_true")
  args = ap.parse_args()
  import os  # pylint: disable=g-import-not-at-top
  os.chdir(ROOT)
  if not MUTANTS.exists():
    print("no mutants/ folder: run `make mutation` first")
    return 0
  patterns = listed_modules()
  equiv = equivalents()
  rows = {}  # module label -> list[(name, verdict)]
  paths = {}  # mutant name -> its source path
  per_file = {}
  for meta in sorted(MUTANTS.rglob("*.py.meta")):
    rel = meta.relative_to(MUTANTS).as_posix()[: -len(".meta")]
    group = next((p for p in patterns if fnmatch.fnmatch(rel, p)), None)
    if group is None:
      continue
    label = group.rstrip("*").rstrip("/") if group.endswith("*") else group
    codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
    items = [(k, verdict(v)) for k, v in codes.items()]
    paths.update({k: rel for k in codes})
    rows.setdefault(label, []).extend(items)
    if group.endswith("*"):
      per_file[rel] = items

  def line(label, items, indent=""):
    n = len(items)
    killed = sum(v in ("killed", "timeout") for _, v in items)
    eq = sum(v not in ("killed", "timeout") and k in equiv for k, v in items)
    left = n - killed - eq
    rate = 100.0 * killed / n if n else 100.0
    rate_eq = 100.0 * killed / (n - eq) if n - eq else 100.0
    flag = "" if rate_eq >= 95.0 else "  < 95%"
    print(f"{indent}{label:<48} {n:6d} {killed:7d} {eq:5d} {left:5d} {rate:7.1f}% {rate_eq:7.1f}%{flag}")
    return n, killed, eq

  print(f"{'module':<48} {'mutants':>6} {'killed':>7} {'equiv':>5} {'left':>5} {'killed%':>8} "
        f"{'excl.eq%':>8}")
  total = [0, 0, 0]
  for label in [p.rstrip("*").rstrip("/") if p.endswith("*") else p for p in patterns]:
    items = rows.get(label, [])
    n, k, e = line(label, items)
    total = [total[0] + n, total[1] + k, total[2] + e]
    for f in sorted(per_file):
      if f.startswith(label + "/") and per_file[f]:
        line(f[len(label) + 1:], per_file[f], indent="    ")
  print(f"{'all listed modules':<48} {total[0]:6d} {total[1]:7d} {total[2]:5d} "
        f"{total[0] - total[1] - total[2]:5d} {100.0 * total[1] / max(total[0], 1):7.1f}% "
        f"{100.0 * total[1] / max(total[0] - total[2], 1):7.1f}%")
  print("\n(timeouts count as killed; 'no tests' and 'suspicious' count as not killed)")

  print("\nNot killed (equivalent ones marked '=' with the reason from docs/architecture.md):")
  for label, items in rows.items():
    for k, v in sorted(items):
      if v in ("killed", "timeout"):
        continue
      mark = "=" if k in equiv else "!"
      extra = f"  [{equiv[k]}]" if k in equiv else ""
      print(f"  {mark} {k}: {v}{extra}")
      if not args.no_diff and k not in equiv:
        print(f"      {diff_line(k, paths[k])}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
