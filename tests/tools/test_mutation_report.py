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
