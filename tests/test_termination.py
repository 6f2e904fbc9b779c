"""tff_idp.termination: a SIGTERM is remembered, so a dropped exception is raised again."""
import pytest

from tff_idp import termination


def test_a_request_is_raised_again_at_the_next_check():
  termination.reset()
  termination.check()  # nothing requested: no-op
  termination.request()
  try:
    assert termination.requested()
    with pytest.raises(termination.Terminated):
      termination.check()
    with pytest.raises(termination.Terminated):  # every later check too
      termination.check()
  finally:
    termination.reset()
  assert not termination.requested()


def test_the_cli_handler_records_the_request_before_raising():
  from tff_idp import cli  # pylint: disable=g-import-not-at-top
  termination.reset()
  try:
    with pytest.raises(termination.Terminated):
      cli._on_sigterm(15, None)  # pylint: disable=protected-access
    assert termination.requested()
  finally:
    termination.reset()


def test_a_dropped_terminated_is_not_reported_but_other_errors_are(monkeypatch):
  import sys  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top
  reported = []
  monkeypatch.setattr(sys, "unraisablehook", reported.append)
  termination.reset()
  try:
    termination.request()
    for error in (termination.Terminated(), ValueError("other")):
      sys.unraisablehook(types.SimpleNamespace(exc_type=type(error), exc_value=error,
                                               exc_traceback=None, err_msg=None, object=None))
    assert [type(r.exc_value) for r in reported] == [ValueError]
  finally:
    termination.reset()
  assert sys.unraisablehook == reported.append  # the user's hook is back
