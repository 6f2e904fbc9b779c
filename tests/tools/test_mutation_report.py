"""tools/mutation_report.py: which mutants count as message-only (set aside, not killed)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "mutation_report", os.path.join(ROOT, "tools", "mutation_report.py"))
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def _diff(removed: str, added: str) -> str:
  return f"--- a\n+++ b\n-{removed}\n+{added}\n"


def test_raise_and_string_continuation_lines_are_messages():
  assert report.is_message_only(_diff('    raise ValueError("x must be > 0")',
                                      '    raise ValueError("XXx must be > 0XX")'))
  assert report.is_message_only(_diff('      "so the noise is too small.")',
                                      '      "XXso the noise is too small.XX")'))


def test_a_tf_assertion_message_keyword_is_a_message_but_its_operands_are_not():
  line = '        weights, 0.0, message="example weights must lie in [0, 1]"),'
  assert report.is_message_only(_diff(line, line.replace('message="', 'message="XX')))
  assert report.is_message_only(_diff(
      "    message=\"a record's clip threshold is too large\"",
      "    message=\"A RECORD'S CLIP THRESHOLD IS TOO LARGE\""))
  # The checked bound changed, the message kept: a behaviour change.
  assert not report.is_message_only(_diff(line, line.replace("0.0", "1.0")))
  assert not report.is_message_only(_diff(line, line.replace("weights, ", "")))
  assert not report.is_message_only(_diff("    return tf.constant(x, tf.float32)",
                                          "    return tf.constant(x, None)"))


def test_a_listed_equivalent_counts_only_while_its_diff_is_the_pinned_one(tmp_path):
  """The equivalents table names mutants by number, and mutmut renumbers a function's
  mutants after an edit above them. A listed mutant counts as equivalent only while its
  diff is the one pinned when the table was reviewed; another diff under the same number
  is 'moved' (counted as left); a listed mutant without a pin is 'unpinned' (still
  equivalent, reported). Bug caught: a renumbered row hiding a real survivor."""
  name = "tff_idp.x.x_f__mutmut_3"
  equiv = {name: "reason"}
  was = _diff("    return a <= b", "    return a < b")
  now = _diff("    q = min(q, 1.0)", "    q = min(q, 2.0)")
  pins = {name: report._short(was)}
  assert report.equivalent_class(name, was, equiv, pins) == "equivalent"
  assert report.equivalent_class(name, now, equiv, pins) == "moved"
  assert report.equivalent_class(name, now, equiv, {}) == "unpinned"
  assert report.equivalent_class("tff_idp.x.x_f__mutmut_4", now, equiv, pins) == ""
  path = tmp_path / "pins.json"
  report.save_pins(pins, path)
  assert report.load_pins(path) == pins
  assert report.load_pins(tmp_path / "none.json") == {}


MUTATED = '''\
def x_clip__mutmut_orig(x, bound: float = 1.0):
  if x > bound:
    raise ValueError("x is over the bound")
  return x

def x_clip__mutmut_1(x, bound: float = 2.0):
  if x > bound:
    raise ValueError("x is over the bound")
  return x

def x_clip__mutmut_2(x, bound: float = 1.0):
  if x > bound:
    raise ValueError("XXx is over the boundXX")
  return x

def x_clip__mutmut_3(x, bound: float = 1.0):
  if x >= bound:
    raise ValueError("x is over the bound")
  return x

class Ledger:
  def xǁLedgerǁspend__mutmut_orig(self, eps=1):
    self.spent += eps
  def xǁLedgerǁspend__mutmut_1(self, eps=1):
    self.spent = eps
  def xǁLedgerǁspend__mutmut_2(self, eps=2):
    self.spent += eps
'''


def test_fast_diffs_show_what_mutmuts_diff_shows(tmp_path):
  """The changed lines under the function's plain name, a method dedented, so that they
  match the pins (which come from mutmut's own diff). Bug caught: a mangled name or a
  method's indentation left in, so no pinned equivalent would ever be skipped."""
  path = tmp_path / "m.py"
  path.write_text(MUTATED)
  diffs = report.fast_diffs(path)
  assert sorted(diffs) == ["x_clip__mutmut_1", "x_clip__mutmut_2", "x_clip__mutmut_3",
                           "xǁLedgerǁspend__mutmut_1", "xǁLedgerǁspend__mutmut_2"]
  assert report._short(diffs["x_clip__mutmut_1"]) == (  # pylint: disable=protected-access
      "-def clip(x, bound: float = 1.0): / +def clip(x, bound: float = 2.0):")
  assert report._short(diffs["xǁLedgerǁspend__mutmut_1"]) == (  # pylint: disable=protected-access
      "- self.spent += eps / + self.spent = eps")
  assert report._short(diffs["xǁLedgerǁspend__mutmut_2"]) == (  # pylint: disable=protected-access
      "-def spend(self, eps=1): / +def spend(self, eps=2):")
  assert report.is_message_only(diffs["x_clip__mutmut_2"])
  assert not report.is_message_only(diffs["x_clip__mutmut_3"])


def test_only_pinned_equivalents_and_message_only_mutants_are_skipped(tmp_path):
  """A listed equivalent whose diff moved, or one without a pin, is run; so is any other
  mutant. Bug caught: skipping every listed mutant (a moved number hides a real bug)."""
  (tmp_path / "pkg").mkdir()
  (tmp_path / "pkg" / "m.py").write_text(MUTATED)
  names = [f"pkg.m.x_clip__mutmut_{i}" for i in (1, 2, 3)] + ["pkg.m.xǁLedgerǁspend__mutmut_1"]
  equiv = {"pkg.m.x_clip__mutmut_1": "a default", "pkg.m.x_clip__mutmut_3": "moved",
           "pkg.m.xǁLedgerǁspend__mutmut_1": "no pin"}
  pins = {"pkg.m.x_clip__mutmut_1": "-def clip(x, bound: float = 1.0): / "
                                    "+def clip(x, bound: float = 2.0):",
          "pkg.m.x_clip__mutmut_3": "-if x > bound: / +if x == bound:"}
  skips = report.reviewed_skips({"pkg/m.py": names}, tmp_path, equiv, pins)
  assert skips == {"pkg.m.x_clip__mutmut_1": "equivalent", "pkg.m.x_clip__mutmut_2": "message"}


KNOWN_SURVIVORS = """### Known survivors

- `accounting/client/sample.py`, 3: ties at exact float equality (`_refine` 14, 42;
  `_rematch` 48), and `ApesLedger.round_account` 35 at δ = 1e-12.
- `accounting/shuffle`: 11 mutants of `reduction.poisson_binomial_count` (1, 48, 50),
  and `fmt22.numeric__mutmut_1`.
"""


def test_a_known_survivor_is_described_by_its_function_and_its_number():
  """The pins of tools/mutation_survivors.json must each be described in the docs: the
  function in backticks, the mutant's number after it in the same bullet. Bug caught: a
  number matched inside another figure (1e-12, 1,025) or in another function's bullet."""
  def described(name):
    return report.described_as_survivor(name, KNOWN_SURVIVORS)
  assert described("tff_idp.accounting.client.sample.x__refine__mutmut_14")
  assert described("tff_idp.accounting.client.sample.x__refine__mutmut_42")
  assert described("tff_idp.accounting.client.sample.x__rematch__mutmut_48")
  assert described("tff_idp.accounting.shuffle.ledger.xǁApesLedgerǁround_account__mutmut_35")
  assert described("tff_idp.accounting.shuffle.reduction.x_poisson_binomial_count__mutmut_48")
  assert described("tff_idp.accounting.shuffle.fmt22.x_numeric__mutmut_1")
  assert not described("tff_idp.accounting.client.sample.x__refine__mutmut_48")  # _rematch's
  assert not described("tff_idp.accounting.client.sample.x__refine__mutmut_4")
  assert not described("tff_idp.accounting.shuffle.ledger.xǁApesLedgerǁround_account__mutmut_12")
  assert not described("tff_idp.accounting.shuffle.ledger.xǁApesLedgerǁround_account__mutmut_1")
  assert not described("tff_idp.accounting.client.sample.x__bracket_solve__mutmut_14")
  assert report.plain_name_and_number(
      "tff_idp.accounting.shuffle.ledger.xǁApesLedgerǁround_account__mutmut_35") == (
          "round_account", 35)


def test_a_pinned_known_survivor_is_skipped_only_while_its_diff_is_the_pinned_one(tmp_path):
  """A known survivor is not re-run (it counts as left either way) while its diff is the
  pinned one. Bug caught: skipping by name alone, so that a renumbered mutant, a new
  survivor under the old number, is never run."""
  (tmp_path / "pkg").mkdir()
  (tmp_path / "pkg" / "m.py").write_text(MUTATED)
  names = [f"pkg.m.x_clip__mutmut_{i}" for i in (1, 3)] + ["pkg.m.xǁLedgerǁspend__mutmut_1"]
  survivors = {"pkg.m.x_clip__mutmut_3": "- if x > bound: / + if x >= bound:",
               "pkg.m.xǁLedgerǁspend__mutmut_1": "- self.spent += eps / + self.spent -= eps"}
  skips = report.reviewed_skips({"pkg/m.py": names}, tmp_path, {}, {}, survivors)
  assert skips == {"pkg.m.x_clip__mutmut_3": "survivor"}


def test_every_pinned_known_survivor_is_described_in_the_docs():
  """A pin lets `make mutation` skip a mutant (it still counts as left), so every pinned
  survivor must have its reason under the docs' "Known survivors", and none may also be
  listed as equivalent (which would stop it counting). Bug caught: a pin added without a
  reason, or a survivor moved to the equivalents table while still pinned."""
  pins = report.load_pins(report.SURVIVOR_PINS)
  assert pins, "tools/mutation_survivors.json is empty"
  undescribed = [name for name in pins if not report.described_as_survivor(name)]
  assert not undescribed
  assert not set(pins) & set(report.equivalents())
