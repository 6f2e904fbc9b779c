"""tff_idp/audit/controls.py: the audit's broken controls and its table of runs."""
import pytest

from tff_idp.audit import controls


def test_the_runs_in_table_order_with_the_same_canaries_per_group():
  runs = controls.plan_audit_runs(12, ["q8", "nonoise"], utility_baseline=True)
  assert [(label, spec, k) for label, spec, k, _ in runs] == [
      ("uniform strict (100-0-0)", "100-0-0", 4), ("34-43-23", "34-43-23", 12),
      ("34-43-23, BROKEN: q×8 strict", "34-43-23", 12),
      ("34-43-23, BROKEN: no noise", "34-43-23", 12), ("34-43-23, no canaries", "34-43-23", 0)]
  assert runs[2][3] is controls.CONTROLS["q×8"] and runs[0][3] is None
  assert controls.plan_audit_runs(2, [], utility_baseline=False)[0][2] == 2  # at least 2
  assert len(controls.plan_audit_runs(6, [], utility_baseline=False)) == 2


def test_unknown_control_names_are_refused_listing_the_choices():
  controls.check_control_names(["noise4", "q8", "nonoise"])
  with pytest.raises(ValueError, match=r"--controls: unknown \['zz'\]; choose from "
                     r"\['noise4', 'nonoise', 'q8'\]"):
    controls.check_control_names(["q8", "zz"])
