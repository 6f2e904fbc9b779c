"""One ledger interface: every ledger composes DpEvents, recomputed here with dp-accounting."""
import math
import pathlib
import re

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from tff_idp.accounting import events
from tff_idp.accounting.client.ledger import GroupPrivacyLedger
from tff_idp.accounting.ledger import PrivacyLedger
from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.ledger import RecordBudgetAccountant
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.accounting.shuffle.round_ledger import ShuffleRoundLedger

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_three_ledgers_implement_the_one_interface():
  group = GroupPrivacyLedger([2.0, 8.0], [0.05, 0.2], [1.1, 1.1], 1e-5, 50)
  params = TwoStageParams(1.5, 3, 10, 0.5, 1e-5)
  record = RecordBudgetAccountant({"a": np.array([1.0, 4.0])}, {"a": np.array([0.1, 0.3])},
                                  params)
  shuffle = ShuffleRoundLedger(0.1, 2.0, [2.0, 3.0])
  for ledger in (group, record, shuffle):
    assert isinstance(ledger, PrivacyLedger)
    assert all(isinstance(e, dp_accounting.DpEvent) for e in ledger.round_events())


@pytest.mark.parametrize("rounds", [1, 7, 50])
def test_group_ledger_equals_a_fresh_accountant_composing_its_round_events(rounds):
  ledger = GroupPrivacyLedger([2.0, 8.0, math.inf], [0.05, 0.2, 1.0], [1.1, 1.1, 0.0],
                              1e-5, 50)
  for p, event in enumerate(ledger.round_events()[:2]):
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(event, rounds)
    assert ledger.spent(rounds)[p] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
  assert ledger.round_events()[0] == dp_accounting.PoissonSampledDpEvent(
      0.05, dp_accounting.GaussianDpEvent(1.1))


def test_driver_protocol_of_the_group_ledger():
  ledger = GroupPrivacyLedger([2.0], [0.05], [1.1], 1e-5, 2)
  assert ledger.metric_names(["eps2"]) == ["epsilon_eps2"]
  assert ledger.metric_names([]) == ["epsilon_group0"]  # names that do not fit
  ledger.check_budget(2)
  ledger.begin_round()
  ledger.end_round(["c1"])
  assert ledger.metrics(["eps2"], evaluating=False) == {"epsilon_eps2": ledger.spent()[0]}
  ledger.end_round([])
  with pytest.raises(Exception, match="calibrated for 2 rounds"):
    ledger.begin_round()


def test_two_stage_event_at_full_client_rate_is_dp_accountings_own():
  """λ = 1: Thm 1 is τ Poisson-subsampled Gaussians per round; dp-accounting agrees."""
  params = TwoStageParams(noise_multiplier=1.3, local_steps=4, rounds=6, client_rate=1.0,
                          delta=1e-5)
  record = RecordBudgetAccountant({"a": np.array([50.0])}, {"a": np.array([0.2])}, params)
  for _ in range(params.rounds):
    record.begin_round()
    record.end_round(["a"])
  (event,) = record.round_events()
  assert event == events.TwoStageSampledDpEvent(1.0, 0.2, 1.3, 4, "type2")
  acc = rdp_privacy_accountant.RdpAccountant([float(a) for a in rdp_two_stage.ORDERS])
  acc.compose(event.as_dp_accounting_event(), params.rounds)
  assert record.spent()[0] == pytest.approx(acc.get_epsilon(params.delta), rel=1e-6)
  assert events.TwoStageSampledDpEvent(0.5, 0.2, 1.3, 4).as_dp_accounting_event() is None


def test_no_code_reads_an_accountants_private_fields():
  offenders = []
  for path in (ROOT / "tff_idp").rglob("*.py"):
    for n, line in enumerate(path.read_text().splitlines(), 1):
      if re.search(r"\b(acc|accountant)\._[a-z]", line):
        offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
  assert not offenders, offenders
