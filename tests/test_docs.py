"""The README and docs/ pages: links resolve, anchors exist, the README stays a quick start.

Pure text checks: no TensorFlow import, well under a second.
"""
import glob
import os
import re
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
PAGES = [README] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target ends at whitespace or ")" (an optional title follows).
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE_SPAN = re.compile(r"(`+).*?\1")


def _prose_lines(text):
  """The lines outside fenced code blocks."""
  in_fence = False
  for line in text.split("\n"):
    if _FENCE.match(line.lstrip()):
      in_fence = not in_fence
      continue
    if not in_fence:
      yield line


def slug(heading: str) -> str:
  """GitHub's heading anchor: lowercase, drop punctuation but '-' and '_', spaces to '-'."""
  text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link in a heading: its text
  text = text.lower()
  text = "".join(ch for ch in text if ch.isalnum() or ch in "-_ " or ch.isspace())
  return re.sub(r"\s", "-", text)


def anchors(path):
  """Every anchor a Markdown file defines, with GitHub's -1, -2 suffixes for repeats."""
  seen = {}
  out = set()
  with open(path, encoding="utf-8") as f:
    lines = list(_prose_lines(f.read()))
  for line in lines:
    match = _HEADING.match(line)
    if not match:
      continue
    base = slug(match.group(2))
    n = seen.get(base, 0)
    seen[base] = n + 1
    out.add(base if n == 0 else f"{base}-{n}")
  return out


def links(path):
  """(line number, target) of every Markdown link outside code."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  out = []
  in_fence = False
  for number, line in enumerate(text.split("\n"), 1):
    if _FENCE.match(line.lstrip()):
      in_fence = not in_fence
      continue
    if in_fence:
      continue
    for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
      out.append((number, match.group(1)))
  return out


def _relative(target):
  return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) and not target.startswith("//")


def test_slug_follows_github():
  assert slug("Privacy calibration (SAMPLE, Alg. 1)") == "privacy-calibration-sample-alg-1"
  assert slug("Client computation (`tff_idp.rpdp`)") == "client-computation-tff_idprpdp"
  assert slug("`python -m experiments.rpdp` (rPDP-FL, Fig. 8-style comparison)") == (
      "python--m-experimentsrpdp-rpdp-fl-fig-8-style-comparison")
  assert slug("Default federation: Synthetic(α, β)") == "default-federation-syntheticα-β"


def test_the_docs_exist():
  assert os.path.exists(os.path.join(ROOT, "docs", "README.md"))
  assert len(PAGES) > 2


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_relative_links_resolve(page):
  broken = []
  for number, target in links(page):
    if not _relative(target):
      continue
    path_part, _, fragment = target.partition("#")
    path_part = urllib.parse.unquote(path_part)
    fragment = urllib.parse.unquote(fragment)
    dest = page if not path_part else os.path.normpath(
        os.path.join(os.path.dirname(page), path_part))
    where = f"{os.path.relpath(page, ROOT)}:{number}: {target}"
    if not os.path.exists(dest):
      broken.append(f"{where} (no such file)")
    elif fragment and dest.endswith(".md") and fragment.lower() not in anchors(dest):
      broken.append(f"{where} (no heading with anchor #{fragment})")
  assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: os.path.relpath(p, ROOT))
def test_no_link_or_path_leaves_the_repository(page):
  """Issue 51: docs/ino_sgd.md pointed at ``../../shared/papers/…``, which a clone lacks."""
  with open(page, encoding="utf-8") as f:
    text = f.read()
  escaping = []
  targets = [t for _, t in links(page) if _relative(t)]
  targets += re.findall(r"(?:\.\./)+[\w.\-/]*", text)  # paths in prose and code spans
  for target in targets:
    dest = os.path.normpath(os.path.join(os.path.dirname(page), target.partition("#")[0]))
    if os.path.commonpath([dest, ROOT]) != ROOT or not os.path.exists(dest):
      escaping.append(target)  # outside the clone, or a folder beside it (../shared/...)
  assert not escaping, f"{os.path.relpath(page, ROOT)} points outside the repository: {escaping}"


def test_every_docs_page_is_linked_from_the_readme():
  linked = {os.path.normpath(os.path.join(ROOT, t.partition("#")[0]))
            for _, t in links(README) if _relative(t) and t.partition("#")[0]}
  missing = [os.path.relpath(p, ROOT) for p in PAGES[1:] if p not in linked]
  assert not missing, f"README.md does not link {missing}"


def test_readme_is_a_quick_start():
  size = os.path.getsize(README)
  assert size < 20_000, f"README.md is {size} bytes; move detail into docs/"


def test_readme_has_the_own_data_section():
  with open(README, encoding="utf-8") as f:
    headings = [line.rstrip() for line in _prose_lines(f.read())]
  assert "## Your own data in 10 lines" in headings
