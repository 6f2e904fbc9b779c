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


def test_a_ctrl_c_is_remembered_and_raised_again():
  """Issue 33: a Ctrl-C swallowed on the way (e.g. in a gc callback) is raised at the next check."""
  from tff_idp import cli  # pylint: disable=g-import-not-at-top
  termination.reset()
  try:
    with pytest.raises(KeyboardInterrupt):
      cli._on_sigint(2, None)  # pylint: disable=protected-access
    assert termination.interrupted() and not termination.requested()
    with pytest.raises(KeyboardInterrupt):
      termination.check()
  finally:
    termination.reset()
  termination.check()


def test_the_cli_reports_a_swallowed_ctrl_c_as_interrupted(capsys):
  """A main that swallows the KeyboardInterrupt of a real SIGINT still ends with 130.

  Bug caught: a SIGINT whose exception was dropped let the run exit 0 (2 of
  23 Ctrl-Cs in the issue's run).
  """
  import os  # pylint: disable=g-import-not-at-top
  import signal  # pylint: disable=g-import-not-at-top
  from tff_idp import cli  # pylint: disable=g-import-not-at-top

  def main(argv):
    del argv
    try:
      os.kill(os.getpid(), signal.SIGINT)
      for _ in range(100_000):  # the handler runs at the next bytecode boundary
        pass
    except KeyboardInterrupt:
      pass  # what a gc callback or a library's broad except does
    return 0

  termination.reset()
  # Python's own Ctrl-C handler, as in a command line (a pytest-xdist worker ignores SIGINT).
  outer = signal.signal(signal.SIGINT, signal.default_int_handler)
  try:
    assert cli.entry(main)([]) == 130
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
  finally:
    signal.signal(signal.SIGINT, outer)
    termination.reset()
  assert cli.INTERRUPTED in capsys.readouterr().err
