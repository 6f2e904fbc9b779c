"""RecordDpDataSource is made from its record plan and spends its rounds once (issue 48).

The plan (``make_record_plan``, rPDP-FL Alg. 3 line 2) carries the rates q_ij,
λ and T (``plan.params``): the source takes all three, refuses a ``rounds`` or
``client_rate`` that disagrees, and refuses the round past T, whichever
iterator asks, naming the Theorem 1 ε the worst-off record would reach. Five
clients of 10 records, no TFF computation.
"""
import re

import numpy as np
import pytest

import tff_idp
from tff_idp.accounting.record import rdp_two_stage
from tff_idp.errors import ToolkitValueError
from tff_idp.rpdp.program_data import RecordDpDataSource

BUDGETS = np.array([1.0, 2.0, 4.0, 8.0, 8.0, 2.0, 2.0, 4.0, 1.0, 8.0])


@pytest.fixture(name="plan", scope="module")
def plan_fixture():
  params = tff_idp.TwoStageParams(noise_multiplier=1.0, local_steps=2, rounds=3,
                                  client_rate=0.6, delta=1e-5)
  return tff_idp.make_record_plan("ours", {f"c{i}": BUDGETS for i in range(5)}, params,
                                  clip_norm=1.0)


def clients(num=5, examples=10, seed=0):
  rng = np.random.default_rng(seed)
  return {f"c{i}": (rng.normal(size=(examples, 3)).astype(np.float32),
                    rng.integers(0, 2, examples).astype(np.int32)) for i in range(num)}


def test_the_plan_gives_the_source_its_rates_lambda_and_rounds(plan):
  source = RecordDpDataSource.from_plan(clients(), plan, batch_size=4)
  assert source.rounds == 3 and source.clients_per_round == 3          # λ·N = 0.6·5
  it = source.iterator()
  for i, cid in enumerate(plan.rates):
    np.testing.assert_allclose(it.arrays(i)["q"], plan.rates[cid], rtol=1e-6)
  # A list in the plan's client order is the same source.
  listed = RecordDpDataSource(list(clients().values()), plan)
  np.testing.assert_allclose(listed.iterator().arrays(4)["q"], it.arrays(4)["q"])


def test_a_source_cannot_disagree_with_its_plan(plan):
  data = clients()
  with pytest.raises(ToolkitValueError, match=r"rounds=10 disagrees with the record plan "
                     r"\(T=3 rounds, λ=0.6, δ=1e-05\)"):
    RecordDpDataSource(data, plan, rounds=10)
  with pytest.raises(ToolkitValueError, match="client_rate=0.5 disagrees"):
    RecordDpDataSource(data, plan, client_rate=0.5)
  with pytest.raises(ToolkitValueError, match="rounds=None disagrees"):
    RecordDpDataSource(data, plan, rounds=None)
  with pytest.raises(ToolkitValueError, match="give the clients it was made for"):
    RecordDpDataSource.from_plan(clients(4), plan)
  with pytest.raises(ToolkitValueError, match="plan must be a RecordPlan"):
    RecordDpDataSource.from_plan(data, [np.full(10, 0.5)] * 5)
  with pytest.raises(ToolkitValueError, match="give client_rate"):
    RecordDpDataSource(list(data.values()), [np.full(10, 0.5)] * 5, rounds=3)
  assert RecordDpDataSource(data, plan, rounds=3, client_rate=0.6).rounds == 3


def test_a_second_iterator_is_refused_past_t_naming_the_records_epsilon(plan):
  """Round T+1 of the source, from a second iterator (a second train_model), is refused
  with the worst-off record's ε at T+1 rounds (Theorem 1), over its budget."""
  source = RecordDpDataSource.from_plan(clients(), plan)
  first = source.iterator()
  for _ in range(3):
    first.select(3)
  with pytest.raises(ToolkitValueError) as refusal:
    source.iterator().select(3)
  message = str(refusal.value)
  assert "no fresh budget" in message and "round 4 would spend ε=" in message, message
  spent, budget = map(float, re.search(r"ε=([\d.]+) at δ=1e-05 on a record with budget "
                                      r"ε=([\d.]+)", message).groups())
  worst = max(rdp_two_stage.epsilon(q, plan.params.with_rounds(4)) / b
              for q, b in zip(plan.rates["c0"], BUDGETS) if q > 0)
  assert spent / budget == pytest.approx(worst, rel=5e-3) and worst > 1
  restored = type(first).from_bytes(first.to_bytes())
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    restored.select(3)
