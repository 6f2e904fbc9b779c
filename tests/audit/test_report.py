"""tff_idp/audit/report.py: the audit summary's verdict lines."""
from tff_idp.audit import report


def _row(run, accuracy, epsilon, bound, flagged=False, broken=None):
  group = dict(group=0, target=1.0, bound=bound, epsilon=epsilon, low=0.0, high=epsilon,
               canaries=4, flagged=flagged, verdict="")
  return dict(run=run, mean_accuracy=accuracy, canaries=4, audit=[group], broken_control=broken)


def test_the_summary_says_whether_bounds_held_and_broken_controls_were_caught(monkeypatch):
  monkeypatch.setattr(report, "format_audit_table", lambda rows: "<table>")
  rows = [_row("34-43-23", 0.80, 0.5, 1.0), _row("34-43-23, no canaries", 0.81, 0.0, None),
          _row("34-43-23, BROKEN: no noise", 0.82, 9.0, 1.0, flagged=True, broken="no noise")]
  text = report.format_audit_summary(rows, insecure_reproducible_noise=True)
  assert text.startswith("<table>\n\n| run | accuracy % (mean over seeds) | canaries |")
  assert "| 34-43-23 | 80.00 | 4 |" in text
  assert ("utility effect of the canaries on 34-43-23: -1.00 accuracy points "
          "(identical noise") in text
  assert text.endswith("ε ≤ bound in every group: yes; broken controls flagged: 1 of 1.")
  rows[0]["audit"][0]["epsilon"] = 1.5  # a correct run over its bound
  rows[2]["audit"][0]["flagged"] = False  # a broken control missed
  text = report.format_audit_summary(rows, insecure_reproducible_noise=False)
  assert "part of it is run-to-run noise" in text
  assert text.endswith("every group: NO; broken controls flagged: 0 of 1 (NOT all).")
