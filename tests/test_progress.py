"""tff_idp/progress.py: a bar on a terminal, plain lines (no carriage return) in a log."""
import io

import tqdm

from tff_idp import progress


class _Terminal(io.StringIO):
  def isatty(self):
    return True


def test_a_log_gets_about_ten_plain_lines_and_the_last_one_at_close():
  log = io.StringIO()
  bar = progress.progress(100, desc="seed0", unit="round", stream=log)
  assert isinstance(bar, progress.PlainProgress)
  for n in range(100):
    bar.set_postfix({"acc": f"{n / 100:.2f}"})  # as the round driver does, then the count
    bar.update(1)
  bar.close()
  bar.close()  # twice: one last line only
  text = log.getvalue()
  assert "\r" not in text
  lines = text.splitlines()
  assert len(lines) == 10, lines
  assert lines[0].startswith("seed0: 10/100 rounds, acc=0.09, ")
  assert lines[-1].startswith("seed0: 100/100 rounds, acc=0.99, ")


def test_a_resumed_count_starts_where_it_left_off_and_a_short_run_prints_at_close():
  log = io.StringIO()
  bar = progress.progress(3, desc="", unit="step", initial=1, stream=log)
  bar.update(1)
  bar.update(1)
  bar.close()
  assert log.getvalue().splitlines()[-1].startswith("3/3 steps, ")


def test_a_terminal_gets_tqdm_and_disabled_progress_prints_nothing():
  terminal = _Terminal()
  bar = progress.progress(5, desc="x", stream=terminal)
  assert isinstance(bar, tqdm.tqdm)
  bar.close()
  quiet = io.StringIO()
  off = progress.progress(5, enabled=False, stream=quiet)
  off.update(5)
  off.set_postfix({"a": 1})
  off.close()
  assert quiet.getvalue() == ""
