"""RecordDpDataSource is made from its record plan and spends its rounds once (issue 48).

The plan (``make_record_plan``, rPDP-FL Alg. 3 line 2) carries the rates q_ij,
λ and T (``plan.params``): the source takes all three, refuses a ``rounds`` or
``client_rate`` that disagrees, and refuses the round past T, whichever
iterator asks, naming the Theorem 1 ε the worst-off record would reach. Five
clients of 10 records, no TFF computation.
"""
import dataclasses
import logging
import re
import warnings

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


def records_of(dataset):
  return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


def test_each_selected_client_gets_its_records_rates_and_round_seed(plan):
  """A client's input: its records in batches of batch_size with their rates q_ij (float32)
  and its seed of the round on every record; the same insecure_seed gives the same cohorts
  and seeds (debug mode), another one others, and every round draws fresh seeds."""
  data = clients()
  source = RecordDpDataSource.from_plan(data, plan, batch_size=4, insecure_seed=3)
  it = source.iterator()
  assert it.options["batch_size"] == 4
  assert all(it.arrays(i)["q"].dtype == np.float32 for i in range(5))
  first = it.select(3)
  assert first
  seeds = []
  for dataset in first:
    got = records_of(dataset)
    assert [len(b["y"]) for b in got] == [4, 4, 2]
    assert [list(b) for b in got] == [["x", "y", "q", "seed"]] * 3
    seed = np.concatenate([b["seed"] for b in got])
    assert (seed == seed[0]).all()
    seeds.append(tuple(seed[0]))
    x = np.concatenate([b["x"] for b in got])
    (cid,) = [c for c, (cx, _) in data.items() if np.array_equal(cx, x)]
    np.testing.assert_allclose(np.concatenate([b["q"] for b in got]), plan.rates[cid],
                               rtol=1e-6)
  assert len(set(seeds)) == len(seeds)

  def round_seeds(select):
    return [tuple(records_of(d)[0]["seed"][0]) for d in select]
  again = RecordDpDataSource.from_plan(clients(), plan, batch_size=4, insecure_seed=3)
  assert round_seeds(again.iterator().select(3)) == seeds
  other = RecordDpDataSource(clients(), plan, batch_size=4, insecure_seed=4)
  assert round_seeds(other.iterator().select(3)) != seeds
  bare = RecordDpDataSource(list(clients().values()), [np.full(10, 0.5)] * 5,
                            client_rate=0.6, rounds=3, batch_size=4, insecure_seed=3)
  assert round_seeds(bare.iterator().select(3)) == seeds
  assert not set(round_seeds(it.select(3))) & set(seeds)


def test_batch_size_default_and_refusals(plan):
  assert RecordDpDataSource.from_plan(clients(), plan).iterator().options["batch_size"] == 512
  assert RecordDpDataSource(clients(), plan).iterator().options["batch_size"] == 512
  one = RecordDpDataSource(clients(), plan, batch_size=1).iterator()
  assert one.options["batch_size"] == 1
  for bad in (0, -1, True, 2.5):
    with pytest.raises(ToolkitValueError, match=rf"^batch_size={bad!r} must be an integer"):
      RecordDpDataSource(clients(), plan, batch_size=bad)
  with pytest.raises(ToolkitValueError, match=r"^give one record rate of client 1 per client: "
                     r"got 9 for 10\.$"):
    RecordDpDataSource(list(clients().values()),
                       [np.full(10, 0.5), np.full(9, 0.5)] + [np.full(10, 0.5)] * 3,
                       client_rate=0.6, rounds=3)


def test_rounds_spent_before_count(plan):
  assert RecordDpDataSource.from_plan(clients(), plan).rounds_spent == 0
  assert RecordDpDataSource(clients(), plan).rounds_spent == 0
  source = RecordDpDataSource.from_plan(clients(), plan, rounds_spent=2)
  assert source.rounds_spent == 2
  source.iterator().select(3)
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    source.iterator().select(3)
  assert RecordDpDataSource(clients(), plan, rounds_spent=3).rounds_spent == 3


def test_bare_rates_are_logged_with_their_rounds_and_lambda(caplog):
  with caplog.at_level(logging.WARNING):
    RecordDpDataSource(list(clients().values()), [np.full(10, 0.5)] * 5, client_rate=0.4,
                       rounds=7)
  assert ("RecordDpDataSource built from bare rates: it cannot check that rounds=7 and "
          "client_rate=0.4 are what they were calibrated for; build it with "
          "RecordDpDataSource.from_plan(clients, plan).") in caplog.messages


def test_the_plans_privacy_parameters_reach_the_iterator(plan):
  type1 = dataclasses.replace(plan, params=dataclasses.replace(plan.params,
                                                               threat_model="type1"))
  it = RecordDpDataSource.from_plan(clients(), type1).iterator()
  assert it.options["privacy"] == dict(noise_multiplier=1.0, local_steps=2, client_rate=0.6,
                                       delta=1e-5, threat_model="type1")
  np.testing.assert_array_equal(it.arrays(2)["budget"], BUDGETS)


def test_a_privacy_free_plan_has_no_epsilon_to_name():
  params = tff_idp.TwoStageParams(noise_multiplier=1.0, local_steps=2, rounds=2,
                                  client_rate=1.0, delta=1e-5)
  free = tff_idp.make_record_plan("privacy_free", {f"c{i}": BUDGETS for i in range(5)}, params,
                                  clip_norm=1.0, privacy_free_batch=5.0)
  source = RecordDpDataSource.from_plan(clients(), free)
  it = source.iterator()
  assert "privacy" not in it.options and "budget" not in it.arrays(0)
  assert it.privacy_at(3) is None
  np.testing.assert_allclose(it.arrays(0)["q"], 0.5)


def test_the_refusal_names_the_worst_ratio_of_epsilon_to_budget(plan):
  """Same rates for every record: the worst-off record is the one with the smallest budget
  (ε/budget, not ε·budget); a record with budget 0 that is still sampled is worse (no
  warning); records at rate 0 are left out, and with none left no ε is named. Column
  arrays in a hand-built plan are flattened."""
  q = np.full(10, 0.3)
  budgets = np.array([3.0, 2.0, 8.0, 0.5, 4.0, 2.0, 2.0, 4.0, 1.0, 8.0])
  uniform = dataclasses.replace(plan, rates={c: q.reshape(10, 1) for c in plan.rates},
                                budgets={c: budgets.reshape(10, 1) for c in plan.rates})
  it = RecordDpDataSource.from_plan(clients(), uniform).iterator()
  eps = rdp_two_stage.epsilon(0.3, plan.params.with_rounds(4))
  assert it.privacy_at(4) == f"ε={eps:.3g} at δ=1e-05 on a record with budget ε=0.5"
  zero = dataclasses.replace(uniform, budgets={c: np.where(np.arange(10) == 6, 0.0, budgets)
                                               for c in plan.rates})
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert RecordDpDataSource.from_plan(clients(), zero).iterator().privacy_at(4) == (
        f"ε={eps:.3g} at δ=1e-05 on a record with budget ε=0")
  dropped = dataclasses.replace(uniform, rates={c: np.where(np.arange(10) == 3, 0.0, q)
                                                for c in plan.rates})
  assert RecordDpDataSource.from_plan(clients(), dropped).iterator().privacy_at(4) == (
      f"ε={eps:.3g} at δ=1e-05 on a record with budget ε=1")
  none = dataclasses.replace(uniform, rates={c: np.zeros(10) for c in plan.rates})
  source = RecordDpDataSource.from_plan(clients(), none)
  assert source.iterator().privacy_at(4) is None
  first = source.iterator()
  for _ in range(3):
    first.select(3)
  with pytest.raises(ToolkitValueError, match="round 4 would exceed the privacy budget"):
    first.select(3)


def test_a_single_client_source_pads_with_its_own_empty_records():
  params = tff_idp.TwoStageParams(noise_multiplier=1.0, local_steps=2, rounds=2,
                                  client_rate=0.5, delta=1e-5)
  single = tff_idp.make_record_plan("minimum", {"c0": BUDGETS}, params, clip_norm=1.0)
  it = RecordDpDataSource.from_plan({"c0": clients()["c0"]}, single, batch_size=4).iterator()
  assert records_of(it.padding_input()) == []
  assert tuple(it.federated_type.member.element["x"].shape) == (None, 3)
