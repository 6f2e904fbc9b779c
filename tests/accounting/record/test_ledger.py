"""Per-record budget accountant (rPDP-FL §6.2): pre-check, update, exclusion, checkpoints."""
import json

import numpy as np
import pytest

from tff_idp import preferences
from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.accounting.record.calibration import calibrate_record_rates
from tff_idp.accounting.record.ledger import RecordBudgetAccountant

SIZES = {"a": 40, "b": 25, "c": 35}


def make_ledger(threat_model="type2", rounds=5, client_rate=0.5, seed=0, inf_every=0):
  params = TwoStageParams(1.0, 5, rounds, client_rate, 1e-3, threat_model)
  budgets = preferences.assign_record_budgets(preferences.BoundedMixGauss(), SIZES, seed)
  budgets = {cid: b * 6.0 for cid, b in budgets.items()}  # spread over ε*(q)'s range
  if inf_every:
    for b in budgets.values():
      b[::inf_every] = np.inf
  flat = np.concatenate(list(budgets.values()))
  q = calibrate_record_rates(flat, params).q
  rates, start = {}, 0
  for cid, n in SIZES.items():
    rates[cid] = q[start:start + n]
    start += n
  return RecordBudgetAccountant(budgets, rates, params), budgets, rates, params


def flat(d):
  return np.concatenate([np.asarray(d[c]) for c in SIZES])


def independent_epsilon(q, charges, params):
  """ε of `charges` rounds at rate q, from Theorem 1 with T = charges."""
  if charges == 0:
    return 0.0
  if params.threat_model == "type2":
    return rdp_two_stage.epsilon(q, params.with_rounds(charges))
  # Type I: `charges` participations of τ unamplified steps = λ = 1 over `charges` rounds.
  return rdp_two_stage.epsilon(q, TwoStageParams(
      params.noise_multiplier, params.local_steps, charges, 1.0, params.delta))


def test_calibrated_rounds_are_affordable_then_records_are_excluded():
  ledger, budgets, rates, params = make_ledger(rounds=5, inf_every=9)
  b, q = flat(budgets), flat(rates)
  assert np.all(q > 0)
  history = []
  for r in range(12):  # 7 rounds more than calibrated
    ledger.begin_round()
    history.append(ledger.metrics())
    for cid in SIZES:
      cur = ledger.current_rates(cid)
      np.testing.assert_array_equal(cur, np.where(ledger.active[ledger._slices[cid]], rates[cid], 0.0))  # pylint: disable=protected-access
    ledger.end_round(sampled_clients=["a"])
    spent = ledger.spent()
    assert np.all(spent <= b * (1 + 1e-12)), r
    if r < 5:
      # Calibrated for T = 5: nobody is excluded before then.
      assert ledger.metrics()["records_excluded"] == 0
      assert np.all(ledger.charged == r + 1)
  m = ledger.metrics()
  assert m["records_excluded"] > 0
  assert m["records_active"] + m["records_excluded"] == q.size
  excluded = ~ledger.active
  # Excluded records stopped being charged, exactly when a next round would
  # have exceeded their budget (checked independently of the ledger).
  for i in np.flatnonzero(excluded)[:15]:
    n = ledger.charged[i]
    assert 5 <= n < 12
    assert independent_epsilon(q[i], n, params) <= b[i]
    assert independent_epsilon(q[i], n + 1, params) > b[i]
  # Records without a constraint are never excluded.
  assert np.all(ledger.active[np.isinf(b)]) and np.all(ledger.charged[np.isinf(b)] == 12)
  # Excluded records sample at q = 0.
  for cid, s in ledger._slices.items():  # pylint: disable=protected-access
    assert np.all(ledger.current_rates(cid)[excluded[s]] == 0)
  # The exclusion count in the metrics grows monotonically.
  counts = [h["records_excluded"] for h in history]
  assert counts == sorted(counts) and counts[-1] > 0


def test_type2_spent_after_t_rounds_is_the_calibrated_epsilon():
  ledger, budgets, rates, params = make_ledger(rounds=4)
  for _ in range(4):
    ledger.begin_round()
    ledger.end_round([])
  np.testing.assert_allclose(ledger.spent(), rdp_two_stage.epsilon(flat(rates), params),
                             rtol=1e-12)
  m = ledger.metrics()
  assert m["epsilon_spent_max"] <= flat(budgets).max()
  assert 0 < m["budget_used_max_vs_effective"] <= 1 + 1e-12
  # Without own budgets the record's own budget is the enforced one.
  assert m["budget_used_max_vs_own"] == m["budget_used_max_vs_effective"]
  finite = np.isfinite(flat(budgets))
  assert m["budget_used_mean_vs_own"] == pytest.approx(
      np.mean(ledger.spent()[finite] / flat(budgets)[finite]))


def test_type1_charges_only_sampled_clients():
  ledger, budgets, rates, params = make_ledger("type1", rounds=10, client_rate=0.5)
  b, q = flat(budgets), flat(rates)
  sl = ledger._slices  # pylint: disable=protected-access
  # Client "a" is sampled every round (twice its expected λ·T = 5), "b" every
  # other round, "c" never.
  for r in range(10):
    ledger.begin_round()
    before = ledger.charged.copy()
    active = ledger.active.copy()
    sampled = ["a"] + (["b"] if r % 2 == 0 else [])
    ledger.end_round(sampled)
    delta = ledger.charged - before
    np.testing.assert_array_equal(delta[sl["c"]], 0)
    if r % 2:
      np.testing.assert_array_equal(delta[sl["b"]], 0)
    for cid in sampled:
      np.testing.assert_array_equal(delta[sl[cid]], active[sl[cid]].astype(int))
    assert np.all(ledger.spent() <= b * (1 + 1e-12))
  assert np.all(ledger.charged[sl["c"]] == 0) and np.all(ledger.spent()[sl["c"]] == 0)
  assert np.all(ledger.charged[sl["b"]] == 5)  # λ·T: exactly what calibration assumed
  # "a" took part 10 times: its tight records were stopped before going over.
  stopped = ~ledger.active[sl["a"]]
  assert stopped.any()
  charges_a = ledger.charged[sl["a"]]
  assert np.all(charges_a[stopped] < 10) and np.all(charges_a >= 5)
  for i in np.flatnonzero(stopped)[:10]:
    j = sl["a"].start + i
    assert independent_epsilon(q[j], charges_a[i] + 1, params) > b[j]
  # Type I participation of "b" (λ·T = 5 times) costs exactly the calibrated ε.
  np.testing.assert_allclose(ledger.spent()[sl["b"]], rdp_two_stage.epsilon(q[sl["b"]], params),
                             rtol=1e-12)


@pytest.mark.parametrize("threat_model", ["type2", "type1"])
def test_no_record_ever_exceeds_its_budget_under_random_sampling(threat_model):
  rng = np.random.default_rng(17)
  for trial in range(3):
    ledger, budgets, _, params = make_ledger(threat_model, rounds=int(rng.integers(2, 8)),
                                             client_rate=float(rng.uniform(0.2, 1.0)),
                                             seed=trial, inf_every=7)
    b = flat(budgets)
    for _ in range(3 * params.rounds):
      ledger.begin_round()
      sampled = [c for c in SIZES if rng.random() < params.client_rate]
      ledger.end_round(sampled)
      assert np.all(ledger.spent() <= b * (1 + 1e-12))
    assert ledger.metrics()["records_excluded"] > 0


def test_state_round_trip_gives_identical_continuation():
  rng = np.random.default_rng(3)
  schedule = [[c for c in SIZES if rng.random() < 0.6] for _ in range(14)]
  for threat_model in ("type2", "type1"):
    a, *_ = make_ledger(threat_model, rounds=4)
    for sampled in schedule[:6]:
      a.begin_round()
      a.end_round(sampled)
    state = json.loads(json.dumps(a.get_state()))  # what a checkpoint stores
    b, *_ = make_ledger(threat_model, rounds=4)
    b.set_state(state)
    assert b.rounds_done == a.rounds_done == 6
    np.testing.assert_array_equal(b.spent(), a.spent())
    for sampled in schedule[6:]:
      for ledger in (a, b):
        ledger.begin_round()
        ledger.end_round(sampled)
      assert a.metrics() == b.metrics()
      np.testing.assert_array_equal(a.charged, b.charged)
      np.testing.assert_array_equal(a.active, b.active)
    assert a.get_state() == b.get_state()
    # The restored ledger owns its arrays: changing the state dict changes nothing.
    state["charged"][0] = 999
    assert b.charged[0] != 999


def test_mismatched_state_raises():
  a, *_ = make_ledger()
  a.begin_round()
  a.end_round(["a"])
  state = a.get_state()
  other = RecordBudgetAccountant({"x": np.ones(3)}, {"x": np.full(3, 0.1)}, a.params)
  with pytest.raises(ValueError, match="has 100 records, this run has 3"):
    other.set_state(state)
  broken = dict(state, active=state["active"][:-1])
  fresh, *_ = make_ledger()
  with pytest.raises(ValueError, match="activity flags"):
    fresh.set_state(broken)
  with pytest.raises(KeyError):
    fresh.set_state({"charged": state["charged"]})


def test_constructor_checks():
  params = TwoStageParams(1.0, 5, 5, 0.5, 1e-3)
  with pytest.raises(ValueError, match="same client ids"):
    RecordBudgetAccountant({"a": np.ones(2)}, {"b": np.ones(2)}, params)
  with pytest.raises(ValueError, match="2 budgets but 3 rates"):
    RecordBudgetAccountant({"a": np.ones(2)}, {"a": np.full(3, 0.1)}, params)
  with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
    RecordBudgetAccountant({"a": np.ones(2)}, {"a": np.array([0.1, 1.5])}, params)


def test_zero_rate_records_are_never_active_nor_counted_excluded():
  params = TwoStageParams(1.0, 5, 5, 0.5, 1e-3)
  ledger = RecordBudgetAccountant({"a": np.array([1.0, 2.0, np.inf])},
                                  {"a": np.array([0.0, 0.01, 1.0])}, params)
  for _ in range(3):
    ledger.begin_round()
    ledger.end_round(["a"])
  np.testing.assert_array_equal(ledger.current_rates("a"), [0.0, 0.01, 1.0])
  assert ledger.spent()[0] == 0.0
  m = ledger.metrics()
  assert m["records_active"] == 2 and m["records_excluded"] == 0
  assert set(m) == set(RecordBudgetAccountant.METRIC_NAMES)
  assert m["epsilon_spent_min"] == 0.0
  spent_by = ledger.spent_by_client()
  assert list(spent_by) == ["a"] and spent_by["a"].shape == (3,)


def test_usage_is_reported_against_effective_and_own_budgets():
  """Minimum-style: everybody enforced at ε_min = 1, own budgets 1, 2, 4 and inf."""
  params = TwoStageParams(1.0, 5, 3, 0.5, 1e-3)
  q = calibrate_record_rates(np.full(4, 1.0), params, method="exact").q
  own = np.array([1.0, 2.0, 4.0, np.inf])
  ledger = RecordBudgetAccountant({"a": np.full(4, 1.0)}, {"a": q}, params,
                                  own_budgets={"a": own})
  m0 = ledger.metrics()
  assert m0["budget_used_max_vs_effective"] == 0.0 and m0["budget_used_max_vs_own"] == 0.0
  for _ in range(3):
    ledger.begin_round()
    ledger.end_round([])
  spent = ledger.spent()
  assert ledger.metrics()["records_excluded"] == 0
  np.testing.assert_allclose(spent, spent[0])
  m = ledger.metrics()
  assert m["budget_used_max_vs_effective"] == pytest.approx(spent[0])
  assert m["budget_used_max_vs_effective"] == pytest.approx(1.0, abs=3e-3)
  # vs own: spent / ε_ij over the records with a finite own budget.
  assert m["budget_used_max_vs_own"] == pytest.approx(spent[0] / 1.0)
  assert m["budget_used_mean_vs_own"] == pytest.approx(spent[0] * (1 + 1 / 2 + 1 / 4) / 3)
  # Enforcement follows the effective budget: a 4th round is refused for all.
  ledger.begin_round()
  assert ledger.metrics()["records_excluded"] == 4
  # The usage columns survive a checkpoint (own budgets are configuration, not state).
  fresh = RecordBudgetAccountant({"a": np.full(4, 1.0)}, {"a": q}, params,
                                 own_budgets={"a": own})
  fresh.set_state(json.loads(json.dumps(ledger.get_state())))
  assert fresh.metrics() == ledger.metrics()


def test_round_events_describe_the_active_sampled_rates():
  """round_events gives one TwoStageSampledDpEvent per distinct rate still sampled, with
  the run's λ, σ, τ and threat model; excluded and q = 0 records drop out.

  Catches events that describe excluded records (over-reporting what was
  released is harmless, but the inverse is not: here both directions), keep
  q = 0 records, or carry the wrong mechanism parameters.
  """
  from tff_idp.accounting import events
  params = TwoStageParams(1.3, 4, 10, 0.6, 1e-4, "type1")
  one_round = rdp_two_stage.epsilon(0.1, TwoStageParams(1.3, 4, 1, 1.0, 1e-4))
  budgets = {"a": np.array([one_round, np.inf, np.inf]), "b": np.array([np.inf])}
  rates = {"a": np.array([0.1, 0.2, 0.0]), "b": np.array([0.2])}
  ledger = RecordBudgetAccountant(budgets, rates, params)
  ledger.begin_round()
  first = ledger.round_events()
  assert sorted(e.record_rate for e in first) == [0.1, 0.2]
  for e in first:
    assert isinstance(e, events.TwoStageSampledDpEvent)
    assert (e.client_rate, e.noise_multiplier, e.local_steps, e.threat_model) == (
        0.6, 1.3, 4, "type1")
  ledger.end_round(["a", "b"])
  ledger.begin_round()  # record a[0] has spent its whole budget: excluded
  assert [e.record_rate for e in ledger.round_events()] == [0.2]


def test_metric_names_are_the_metrics_keys():
  """The ledger announces exactly the columns its metrics() returns.

  Catches a metric_names that returns nothing or another list (the round
  driver creates its metric columns from it).
  """
  ledger, *_ = make_ledger()
  assert ledger.metric_names(("g",)) == list(RecordBudgetAccountant.METRIC_NAMES)
  assert ledger.metric_names() == list(ledger.metrics())


def test_spent_metrics_are_the_min_mean_and_max_of_the_records_epsilon():
  """epsilon_spent_{min,mean,max} summarise every record's ε, each recomputed here from
  Theorem 1 with T = the rounds it was charged (dp-accounting cross-checked elsewhere).

  Catches a metric stuck at 0 (a privacy dashboard that always reads "nothing
  spent") or computed over the wrong records.
  """
  ledger, budgets, rates, params = make_ledger(rounds=3)
  for _ in range(2):
    ledger.begin_round()
    ledger.end_round([])
  eps = np.array([independent_epsilon(q, 2 if q > 0 else 0, params) for q in flat(rates)])
  m = ledger.metrics()
  assert m["epsilon_spent_min"] == pytest.approx(eps.min(), rel=1e-12, abs=1e-15)
  assert m["epsilon_spent_mean"] == pytest.approx(eps.mean(), rel=1e-12)
  assert m["epsilon_spent_max"] == pytest.approx(eps.max(), rel=1e-12)
  assert 0 < m["epsilon_spent_min"] < m["epsilon_spent_mean"] < m["epsilon_spent_max"]


def test_a_ledger_without_records_reports_zeros():
  """A run with no records (no clients) has spent nothing: every metric is 0.

  Catches a min/mean over an empty array (an error) and a non-zero default.
  """
  params = TwoStageParams(1.0, 5, 3, 0.5, 1e-3)
  ledger = RecordBudgetAccountant({}, {}, params)
  ledger.begin_round()
  ledger.end_round([])
  assert ledger.metrics() == {name: 0 for name in RecordBudgetAccountant.METRIC_NAMES}


def test_budgets_and_rates_may_be_laid_out_as_matrices():
  """A client's records may come as a matrix (calibration keeps any shape): the ledger
  flattens them in order and charges each record by its own rate.

  Catches a ledger that keeps the matrix shape (its flat indexing and the
  per-client slices would then mix records up, or fail).
  """
  params = TwoStageParams(1.0, 5, 3, 0.5, 1e-3)
  budgets = {"a": np.array([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]]), "b": np.array([3.0])}
  rates = {"a": np.array([[0.01, 0.02, 0.04], [0.08, 0.16, 0.3]]), "b": np.array([0.05])}
  ledger = RecordBudgetAccountant(budgets, rates, params)
  ledger.begin_round()
  ledger.end_round([])
  expected = [independent_epsilon(q, 1, params) for q in (0.01, 0.02, 0.04, 0.08, 0.16, 0.3)]
  np.testing.assert_allclose(ledger.spent_by_client()["a"], expected, rtol=1e-12)
  np.testing.assert_allclose(ledger.spent_by_client()["b"],
                             [independent_epsilon(0.05, 1, params)], rtol=1e-12)
  np.testing.assert_array_equal(ledger.current_rates("a"), rates["a"].reshape(-1))


def test_effective_budget_above_own_is_refused_only_for_sampled_records():
  """A record that can be sampled (q > 0) must not be held to an effective budget above
  its own ε_ij (enforcing it would not protect the record's own budget); a record at
  q = 0 never spends, so its budgets may differ. Own budgets may be matrices too.

  Catches a refusal that never fires, fires for q = 0 records, or only for q > 1,
  an error that names the wrong client or record, and a size check of own
  budgets that miscounts the second client's records.
  """
  params = TwoStageParams(1.0, 5, 3, 0.5, 1e-3)
  budgets = {"a": np.array([[1.0, 1.0], [1.0, 1.0]]), "b": np.array([2.0, 2.0, 2.0])}
  rates = {"a": np.array([[0.1, 0.1], [0.0, 0.1]]), "b": np.array([0.2, 0.2, 0.2])}
  # a's third record (q = 0) has a lower own budget: allowed.
  own = {"a": np.array([[1.0, 1.5], [0.5, 1.0]]), "b": np.array([2.0, 3.0, 2.0])}
  ledger = RecordBudgetAccountant(budgets, rates, params, own_budgets=own)
  np.testing.assert_array_equal(ledger.own_budgets, [1.0, 1.5, 0.5, 1.0, 2.0, 3.0, 2.0])
  ledger.begin_round()
  ledger.end_round([])
  spent = ledger.spent()
  m = ledger.metrics()
  assert m["budget_used_max_vs_own"] == pytest.approx(max(spent / ledger.own_budgets))
  bad = {"a": own["a"], "b": np.array([2.0, 3.0, 1.9])}
  with pytest.raises(ValueError, match=r"client 'b', record 2: effective budget 2.0 exceeds"):
    RecordBudgetAccountant(budgets, rates, params, own_budgets=bad)
  # The offending record is the first of its client: the error still names it.
  first = {"a": own["a"], "b": np.array([1.0, 3.0, 2.0])}
  with pytest.raises(ValueError, match=r"client 'b', record 0: effective budget 2.0 exceeds"):
    RecordBudgetAccountant(budgets, rates, params, own_budgets=first)
  with pytest.raises(ValueError, match="client 'b': 2 own budgets but 3 rates"):
    RecordBudgetAccountant(budgets, rates, params,
                           own_budgets={"a": own["a"], "b": np.array([2.0, 2.0])})


def test_a_ledger_without_records_accepts_empty_own_budgets():
  """No clients, with own budgets given as an empty mapping: nothing spent, all zeros.

  Catches concatenating an empty list of own budgets, or a stray placeholder record
  (in the metrics or the checkpoint).
  """
  params = TwoStageParams(1.0, 5, 3, 0.5, 1e-3)
  ledger = RecordBudgetAccountant({}, {}, params, own_budgets={})
  assert ledger.own_budgets.shape == (0,) and ledger.budgets.shape == (0,)
  ledger.begin_round()
  ledger.end_round([])
  assert ledger.metrics() == {name: 0 for name in RecordBudgetAccountant.METRIC_NAMES}
  # No phantom record in the checkpoint either.
  assert ledger.get_state() == {"charged": [], "active": [], "rounds_done": 1}
