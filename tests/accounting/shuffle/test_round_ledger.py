"""The APES round ledger behind the round driver (the one PrivacyLedger interface)."""
import dp_accounting
import pytest

from tff_idp.accounting.events import ShuffledLdpDpEvent
from tff_idp.accounting.ledger import PrivacyLedger
from tff_idp.accounting.shuffle.round_ledger import ShuffleRoundLedger


def test_round_accountant_reads_the_planned_ledger_and_resumes():
  acc = ShuffleRoundLedger(0.1, 2.0, [2.0, 3.0, 3.7])
  acc.begin_round()
  acc.end_round(["a"])
  assert acc.metrics() == {"eps_c_round": 0.1, "eps_uc_round": 2.0, "eps_uc_total": 2.0}
  state = acc.get_state()
  other = ShuffleRoundLedger(0.1, 2.0, [2.0, 3.0, 3.7])
  other.set_state(state)
  other.end_round([])
  other.end_round([])
  assert other.metrics()["eps_uc_total"] == 3.7
  with pytest.raises(RuntimeError, match="planned for 3 rounds"):
    other.begin_round()


def test_round_ledger_is_a_privacy_ledger_and_reports_its_event():
  event = ShuffledLdpDpEvent((1.0, 2.0, 4.0), dimensions=7850, kept_coordinates=50,
                             selection="random")
  ledger = ShuffleRoundLedger(0.1, 2.0, [2.0], event)
  assert isinstance(ledger, PrivacyLedger) and isinstance(event, dp_accounting.DpEvent)
  assert ledger.round_events() == [event]
  assert ledger.metric_names() == ["eps_c_round", "eps_uc_round", "eps_uc_total"]
  assert not ledger.metrics_depend_on_sampling  # release columns


def test_round_ledger_edges():
  """Before any round the cumulative ε is 0; each finished round reads the next planned
  value; the last planned round may begin, one more may not; a checkpoint without state
  restarts at round 0; without an event a round releases nothing.

  Catches: a ledger that refuses its last planned round or allows one more (overrun of
  the planned budget), reports round t's total at round t−1, or resumes from a wrong round.
  """
  acc = ShuffleRoundLedger(0.1, 2.0, [2.0, 3.0])
  assert acc.rounds == 0 and acc.metrics()["eps_uc_total"] == 0.0
  assert acc.get_state() == {"rounds": 0} and acc.round_events() == []
  acc.begin_round()
  acc.end_round(["a", "b"])
  assert acc.metrics(("g",), False)["eps_uc_total"] == 2.0
  acc.begin_round()  # the second (last) planned round
  acc.end_round([])
  assert acc.metrics()["eps_uc_total"] == 3.0 and acc.get_state() == {"rounds": 2}
  with pytest.raises(RuntimeError, match="round 3 would exceed"):
    acc.begin_round()
  acc.set_state(None)
  assert acc.rounds == 0 and acc.metrics()["eps_uc_total"] == 0.0
  acc.set_state({})
  assert acc.rounds == 0
  acc.set_state({"rounds": 1.0})
  assert acc.rounds == 1 and isinstance(acc.rounds, int)
  assert acc.metrics()["eps_uc_total"] == 2.0
  assert acc.metric_names(("g1", "g2")) == list(ShuffleRoundLedger.METRIC_NAMES)
  one = ShuffleRoundLedger("0.5", 1, (4,))
  assert (one.eps_c_round, one.eps_uc_round, one.cumulative) == (0.5, 1.0, [4.0])
  assert isinstance(one.eps_uc_round, float) and isinstance(one.cumulative[0], float)
