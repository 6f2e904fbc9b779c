"""Per-module kill rates of the last `make mutation` run (mutmut 3's results in mutants/).

Reads the verdicts mutmut stored beside each mutated file (mutants/<path>.py.meta),
groups them by the modules listed in setup.cfg's [mutmut] only_mutate (the
accounting package is one entry, with a line per file under it), prints the
kill rate of each, and lists every mutant that was not killed with its diff
line. Mutants named in docs/architecture.md's table of equivalent mutants
(section "Mutation testing") are counted apart: they cannot change behaviour.

mutmut numbers a function's mutants in order, so an edit above a listed mutant
gives its number to another mutant. Each listed mutant's diff is therefore pinned
in tools/mutation_equivalents.json (its changed lines, as the report prints them):
a listed mutant whose current diff differs from its pin counts as left, under
"moved", until the table is corrected and the pin rewritten.

  python tools/mutation_report.py            # table + survivors
  python tools/mutation_report.py --no-diff  # table + survivor names only
  python tools/mutation_report.py --equivalents  # + each equivalent's diff and reason
  python tools/mutation_report.py --pin-equivalents  # after reviewing the table: pin
      # the current diff of every listed mutant in mutants/ (others' pins are kept)

Exit status 0 always: the figure is a report, not a gate (the run is outside CI).
"""
from __future__ import annotations

import argparse
import ast
import configparser
import difflib
import fnmatch
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "mutants"
ARCH = ROOT / "docs" / "architecture.md"
PINS = ROOT / "tools" / "mutation_equivalents.json"
SURVIVOR_PINS = ROOT / "tools" / "mutation_survivors.json"

# mutmut 3's exit-code verdicts (mutmut/stats.py)
KILLED = {1: "killed", 3: "killed"}
TIMEOUT = {36, -24, 24, 152, 255}


def listed_modules() -> list[str]:
  cfg = configparser.ConfigParser()
  cfg.read(ROOT / "setup.cfg")
  return [p for p in cfg.get("mutmut", "only_mutate").split("\n") if p.strip()]


def equivalents() -> dict[str, str]:
  """Mutant name -> reason, from the table in docs/architecture.md."""
  section = _section("Equivalent mutants")
  out = {}
  for line in section.splitlines():
    m = re.match(r"\|\s*`([^`]+__mutmut_\d+)`\s*\|\s*(.*?)\s*\|\s*$", line)
    if m:
      out[m.group(1)] = m.group(2)
  return out


def _section(title: str) -> str:
  """The text of one ``### title`` section of docs/architecture.md."""
  text = ARCH.read_text()
  start = text.find(f"### {title}")
  if start < 0:
    return ""
  section = text[start:]
  ends = [i for i in (section.find("\n## ", 1), section.find("\n### ", 1)) if i > 0]
  return section[:min(ends)] if ends else section


def plain_name_and_number(name: str) -> tuple[str, int]:
  """``pkg.mod.xǁClassǁmethod__mutmut_7`` -> ('method', 7); ``pkg.mod.x_f__mutmut_3`` -> ('f', 3)."""
  base, _, number = name.rpartition("__mutmut_")
  leaf = base.rpartition(".")[-1]
  plain = leaf.rpartition("\u01c1")[-1] if "\u01c1" in leaf else leaf[len("x_"):]
  return plain, int(number)


# A backticked name followed by mutant numbers (`_rematch` 48; `poisson_binomial_count` (1, 48)).
_NUMBERED_NAME = re.compile(r"`[\w.]+`\s+\(?\d")


def described_as_survivor(name: str, section: "str | None" = None) -> bool:
  """Whether a bullet of the docs' "Known survivors" names the mutant: its function in
  backticks (alone, or as ``Class.function`` / ``module.function``), and its number as a
  word after that, before the next backticked name followed by numbers (``_refine`` 14, 42;
  ``reduction.poisson_binomial_count`` (1, 48))."""
  section = _section("Known survivors") if section is None else section
  plain, number = plain_name_and_number(name)
  bullets = re.split(r"\n(?=- )", section)
  quoted = re.compile(r"`(?:[\w.]+\.)?" + re.escape(plain) + r"(?:__mutmut_(\d+))?`")
  for bullet in bullets:
    for m in quoted.finditer(bullet):
      if m.group(1) is not None:  # `module.function__mutmut_N`
        if int(m.group(1)) == number:
          return True
        continue
      rest = bullet[m.end():]
      other = _NUMBERED_NAME.search(rest)  # the next function's own numbers end the span
      if re.search(rf"(?<![\w.,\-\u2212/+]){number}(?!\w|[.,]\d)",
                   rest[:other.start()] if other else rest):
        return True
  return False


def load_pins(path: pathlib.Path = PINS) -> dict[str, str]:
  """Listed mutant name -> its changed lines when the table was last reviewed."""
  return json.loads(path.read_text()) if path.exists() else {}


def save_pins(pins: dict[str, str], path: pathlib.Path = PINS) -> None:
  path.write_text(json.dumps(dict(sorted(pins.items())), indent=1, ensure_ascii=False) + "\n")


def equivalent_class(name: str, diff: str, equiv: dict[str, str], pins: dict[str, str]
                     ) -> str:
  """How a surviving mutant counts: 'equivalent' if listed and its diff matches the pin
  (or it has no pin yet: 'unpinned'), 'moved' if listed but its diff is no longer the
  pinned one (the number now names another mutant), else ''."""
  if name not in equiv:
    return ""
  if name not in pins:
    return "unpinned"
  return "equivalent" if _short(diff) == pins[name] else "moved"


def verdict(code) -> str:
  if code in KILLED:
    return "killed"
  if code in TIMEOUT:
    return "timeout"
  return {0: "survived", 5: "no tests", 33: "no tests", None: "not checked",
          34: "skipped", -11: "segfault", -9: "segfault"}.get(code, "suspicious")


# A mutant whose changed source line is a raise statement, a logging/warnings
# call, or a line holding only a string literal (a message continued over
# lines) changes what an error or log message says, not what the code does.
# Such mutants are counted apart as "message" (docs/architecture.md, "Mutation
# testing"), as mutmut's own `# pragma: no mutate` would do line by line.
_MESSAGE_LINE = re.compile(
    r"^\s*(raise\b|logging\.\w+\(|logger\.\w+\(|warnings\.warn\()"
    r"|^\s*(rf|fr|f|r)?(\"[^\"]*\"|'[^']*')\s*[,)]*\s*(\)\s*)*$")


# A ``message=`` keyword's string literal (TF assertions: ``tf.debugging.assert_*(x, y,
# message="...")``): a mutant whose removed and added lines differ only there changes the
# error's text, not the check.
_MESSAGE_KEYWORD = re.compile(r"""message=(rf|fr|f|r)?("[^"]*"|'[^']*')""")


def _without_message_keyword(line: str) -> str:
  return _MESSAGE_KEYWORD.sub("message=_", line)


def is_message_only(diff: str) -> bool:
  lines = diff.splitlines()
  removed = [l[1:] for l in lines if l.startswith("-") and not l.startswith("---")]
  added = [l[1:] for l in lines if l.startswith("+") and not l.startswith("+++")]
  if not removed:
    return False
  if all(_MESSAGE_LINE.search(l) for l in removed):
    return True
  return ([_without_message_keyword(l) for l in removed]
          == [_without_message_keyword(l) for l in added])


def _diff(name: str, path: str) -> str:
  from mutmut.mutation.diff_apply import get_diff_for_mutant  # pylint: disable=g-import-not-at-top
  try:
    return get_diff_for_mutant(name, path=path)
  except Exception as e:  # pylint: disable=broad-except
    return f"(no diff: {e})"


def fast_diffs(mutated_file: pathlib.Path) -> dict[str, str]:
  """Every mutant's diff in one file of mutants/ (generated name -> unified diff).

  mutmut's own diff re-parses two functions with libcst per mutant (~0.1-0.4 s
  each, 20 minutes for the whole list); here the file is parsed once with
  ``ast`` and each mutant's function is diffed, as text, against its
  ``__mutmut_orig`` copy, both under the original name. The changed lines are
  the ones mutmut's diff shows (``tools/mutmut_run.py`` uses them only to decide
  what to skip, and the report still classifies with mutmut's diff).
  """
  source = mutated_file.read_text()
  lines = source.splitlines()
  tree = ast.parse(source)
  nodes = [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]
  functions = {}
  for node in nodes:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "__mutmut_" in node.name:
      functions[node.name] = [line[node.col_offset:] for line in
                              lines[node.lineno - 1:node.end_lineno]]  # a method dedented
  diffs = {}
  for name, body in functions.items():
    base, _, tag = name.rpartition("__mutmut_")
    original = functions.get(base + "__mutmut_orig")
    if tag == "orig" or original is None:
      continue
    plain = base.rpartition("\u01c1")[-1] if "\u01c1" in base else base[len("x_"):]
    before = [original[0].replace(base + "__mutmut_orig", plain, 1), *original[1:]]
    after = [body[0].replace(name, plain, 1), *body[1:]]
    diffs[name] = "\n".join(difflib.unified_diff(before, after, lineterm=""))
  return diffs


def reviewed_skips(mutated_files: dict[str, list[str]], mutants_root: pathlib.Path = MUTANTS,
                   equiv: "dict[str, str] | None" = None,
                   pins: "dict[str, str] | None" = None,
                   survivors: "dict[str, str] | None" = None) -> dict[str, str]:
  """The mutants a full run need not test: mutant name -> 'equivalent', 'message' or
  'survivor'.

  ``mutated_files``: source path (as under mutants/) -> its mutants' names. A
  mutant is skipped when it is listed as equivalent and its diff is exactly
  the pinned, reviewed one, when it only changes a message (neither counts
  either way), or when it is a known survivor (described under "Known
  survivors", pinned in tools/mutation_survivors.json) whose diff is exactly
  the pinned one: it counts as left, as it would if it were run and survived.
  Anything else, a moved or unpinned equivalent included, is run.
  """
  equiv = equivalents() if equiv is None else equiv
  pins = load_pins() if pins is None else pins
  survivors = load_pins(SURVIVOR_PINS) if survivors is None else survivors
  skips = {}
  for path, names in mutated_files.items():
    diffs = fast_diffs(mutants_root / path)
    for name in names:
      diff = diffs.get(name.rpartition(".")[-1])
      if diff is None:
        continue
      if name in equiv and pins.get(name) == _short(diff):
        skips[name] = "equivalent"
      elif is_message_only(diff):
        skips[name] = "message"
      elif survivors.get(name) == _short(diff):
        skips[name] = "survivor"
  return skips


def _cache_parsed_modules():
  """mutmut re-parses the mutated module for every diff: parse each file once."""
  import functools  # pylint: disable=g-import-not-at-top
  from mutmut.mutation import diff_apply  # pylint: disable=g-import-not-at-top
  diff_apply.read_mutants_module = functools.lru_cache(maxsize=None)(diff_apply.read_mutants_module)


def _short(out: str) -> str:
  """The mutant's changed lines on one line."""
  lines = [l for l in out.splitlines() if l[:1] in "-+" and l[:3] not in ("---", "+++")]
  return " / ".join(" ".join(l.split()) for l in lines)[:240]


def main() -> int:
  ap = argparse.ArgumentParser()
  ap.add_argument("--no-diff", action="store_true", help="survivor names without their diff")
  ap.add_argument("--messages", action="store_true",
                  help="also list the mutants counted as message-only, with their diff")
  ap.add_argument("--equivalents", action="store_true",
                  help="also list every mutant counted as equivalent with its current diff "
                       "beside the table's reason, to re-check the table after an edit")
  ap.add_argument("--pin-equivalents", action="store_true",
                  help=f"write each listed mutant's current diff to {PINS.name} (after "
                       "reviewing the table against --equivalents)")
  ap.add_argument("--pin-survivors", action="store_true",
                  help=f"write the current diff of each left mutant that the docs' 'Known "
                       f"survivors' describe to {SURVIVOR_PINS.name}: a run without names "
                       "then skips it while its diff stays the pinned one (it counts as left)")
  args = ap.parse_args()
  import os  # pylint: disable=g-import-not-at-top
  os.chdir(ROOT)
  if not MUTANTS.exists():
    print("no mutants/ folder: run `make mutation` first")
    return 0
  _cache_parsed_modules()
  patterns = listed_modules()
  equiv = equivalents()
  pins = load_pins()
  survivor_pins = load_pins(SURVIVOR_PINS)
  survivor_text = _section("Known survivors")
  groups = {}  # label -> list of (file, name, verdict, class)
  stale = []  # listed as equivalent, yet killed: the table's number points elsewhere now
  moved = []  # listed as equivalent, but the diff differs from its pin
  unpinned = []
  for meta in sorted(MUTANTS.rglob("*.py.meta")):
    rel = meta.relative_to(MUTANTS).as_posix()[: -len(".meta")]
    group = next((p for p in patterns if fnmatch.fnmatch(rel, p)), None)
    if group is None:
      continue
    label = group[:-2] if group.endswith("/*") else group
    codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
    for name, code in sorted(codes.items()):
      v = verdict(code)
      listed_diff = _diff(name, rel) if name in equiv else ""
      if args.pin_equivalents and name in equiv:  # whatever the verdict: a fresh
        pins[name] = _short(listed_diff)          # generation's mutants are unchecked
      if v in ("killed", "timeout"):
        cls, diff = "killed", ""
        if name in equiv:
          stale.append(name)
      elif v == "not checked":  # the run was stopped before this mutant
        cls, diff = "unchecked", ""
      elif name in equiv:
        diff = listed_diff
        how = equivalent_class(name, diff, equiv, pins)
        if how == "moved":
          moved.append((name, diff))
          cls = "left"
        else:
          cls = "equivalent"
          if how == "unpinned":
            unpinned.append(name)
      else:
        diff = _diff(name, rel)
        cls = "message" if is_message_only(diff) else "left"
      groups.setdefault(label, []).append((rel, name, v, cls, diff))

  def line(label, items, indent=""):
    count = {c: sum(1 for i in items if i[3] == c)
             for c in ("killed", "message", "equivalent", "left", "unchecked")}
    n = len(items)
    scored = n - count["message"] - count["equivalent"] - count["unchecked"]
    rate = 100.0 * count["killed"] / scored if scored else 100.0
    flag = "" if rate >= 95.0 else "  < 95%"
    print(f"{indent}{label:<{48 - len(indent)}} {n:7d} {count['unchecked']:9d} {count['killed']:7d} "
          f"{count['message']:7d} {count['equivalent']:5d} {count['left']:5d} {rate:7.1f}%{flag}")
    return [n, count["killed"], count["message"], count["equivalent"], count["left"],
            count["unchecked"]]

  print(f"{'module':<48} {'mutants':>7} {'unchecked':>9} {'killed':>7} {'message':>7} {'equiv':>5} "
        f"{'left':>5} {'kill rate':>8}")
  total = [0] * 6
  for pattern in patterns:
    label = pattern[:-2] if pattern.endswith("/*") else pattern
    items = groups.get(label, [])
    total = [a + b for a, b in zip(total, line(label, items))]
    if pattern.endswith("/*"):
      for f in sorted({i[0] for i in items}):
        line(f[len(label) + 1:], [i for i in items if i[0] == f], indent="    ")
  scored = total[0] - total[2] - total[3] - total[5]
  print(f"{'all listed modules':<48} {total[0]:7d} {total[5]:9d} {total[1]:7d} {total[2]:7d} "
        f"{total[3]:5d} {total[4]:5d} {100.0 * total[1] / max(scored, 1):7.1f}%")
  print("\nkill rate = killed / (mutants - unchecked - message - equivalent); 'unchecked': the")
  print("run was stopped before testing it (0 after a complete run). Timeouts count as killed;")
  print("'no tests' (no mirrored test calls the function) and 'suspicious' count as left.")
  print("message: the mutant only changes an error or log message (see _MESSAGE_LINE);")
  print("equivalent: listed in docs/architecture.md with the reason.")
  skipped = sum(1 for items in groups.values() for i in items if i[2] == "skipped")
  if skipped:
    print(f"{skipped} of them were not run (mutmut's 'skipped'): reviewed equivalents and known")
    print("survivors whose diff is the pinned one (a known survivor counts as left), and")
    print("message-only mutants (MUTATION_RECHECK_REVIEWED=1 runs them).")

  print("\nLeft (not killed, not message-only, not listed as equivalent); 'known': described")
  print("under the docs' \"Known survivors\" with its diff pinned (skipped: not re-run):")
  new_survivors, undescribed, killed_pins = [], [], []
  for label, items in groups.items():
    for rel, name, v, cls, diff in items:
      if name in survivor_pins and cls == "killed":
        killed_pins.append(name)
      if cls != "left" and not (args.messages and cls == "message"):
        continue
      tag = " (message)" if cls == "message" else ""
      if cls == "left":
        described = described_as_survivor(name, survivor_text)
        if described and survivor_pins.get(name) == _short(diff):
          tag = " (known)"
        elif name in survivor_pins and not described:
          undescribed.append(name)
        else:
          new_survivors.append(name)
        if args.pin_survivors and described:
          survivor_pins[name] = _short(diff)
      print(f"  {name}: {v}{tag}")
      if not args.no_diff:
        print(f"      {_short(diff)}")
  if new_survivors:
    print(f"\n{len(new_survivors)} left without a review: kill each with a test, or describe it "
          "under \"Known survivors\" (or list it as equivalent) and pin it "
          "(--pin-survivors / --pin-equivalents).")
  if undescribed:
    print("\nPinned as known survivors but not described under \"Known survivors\" (counted "
          "as left; describe them or remove their pins):")
    for name in undescribed:
      print(f"  {name}")
  if killed_pins:
    print("\nPinned as known survivors but killed in this run: remove their pins and their "
          "entries under \"Known survivors\":")
    for name in killed_pins:
      print(f"  {name}")
  if args.pin_survivors:
    save_pins(survivor_pins, SURVIVOR_PINS)
    print(f"\npinned the diffs of the described survivors in {SURVIVOR_PINS.relative_to(ROOT)}")
  if args.equivalents:
    print("\nCounted as equivalent (the current diff, then the table's reason):")
    for items in groups.values():
      for _, name, _, cls, diff in items:
        if cls == "equivalent":
          print(f"  {name}\n      {_short(diff)}\n      reason: {equiv[name]}")
  if args.pin_equivalents:
    save_pins(pins)
    print(f"\npinned the diffs of the listed mutants of this run in {PINS.relative_to(ROOT)}")
  if moved:
    print("\nMoved (listed as equivalent, but the diff is not the pinned one: the number now")
    print("names another mutant; counted as left). Correct the table, then --pin-equivalents:")
    for name, diff in moved:
      print(f"  {name}\n      now:    {_short(diff)}\n      pinned: {pins[name]}")
  if unpinned:
    print(f"\nListed as equivalent without a pinned diff ({len(unpinned)}; counted as "
          "equivalent): review them with --equivalents, then --pin-equivalents.")
  if stale:
    print("\nListed as equivalent but killed: mutmut numbers a function's mutants in order, so")
    print("an edit above a listed mutant moves its number and the entry now names another")
    print("mutant. Find the listed diff's new number and correct the table:")
    for name in stale:
      print(f"  {name}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
