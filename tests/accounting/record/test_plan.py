"""Record-level plans (rPDP-FL §7.2) without TensorFlow, and budget usage vs effective / own ε."""
import numpy as np
import pytest

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record import plan as record_plan
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.accounting.record.ledger import RecordBudgetAccountant

PARAMS = TwoStageParams(noise_multiplier=2.0, local_steps=2, rounds=4, client_rate=0.7,
                        delta=1e-4)
# A tiny plan: ε_min = 0.5 for two records, the rest relaxed (1, 2, 4).
BUDGETS = {"a": np.array([0.5, 1.0, 2.0, 4.0]), "b": np.array([0.5, 4.0, 1.0])}


def flat(d):
  return np.concatenate([np.asarray(d[c]) for c in BUDGETS])


def run_calibrated_rounds(plan):
  """The plan's accountant after its calibrated T rounds (Type II: every round charges)."""
  accountant = plan.new_accountant()
  for _ in range(plan.params.rounds):
    accountant.begin_round()
    accountant.end_round([])
  return accountant


@pytest.mark.parametrize("method", record_plan.METHODS)
def test_plans_keep_own_and_effective_budgets(method):
  plan = record_plan.make_record_plan(method, BUDGETS, PARAMS, 1.0, privacy_free_batch=2)
  own = flat(BUDGETS)
  np.testing.assert_array_equal(flat(plan.own_budgets), own)
  if method == "privacy_free":
    assert plan.budgets is None and plan.new_accountant() is None
    return
  effective = flat(plan.budgets)
  expected = {"ours": own, "minimum": np.full(7, 0.5), "dropout": np.full(7, own.mean())}
  np.testing.assert_allclose(effective, expected[method])
  q = flat(plan.rates)
  # Never over the effective budget, nor, where the record is sampled, its own.
  eps = rdp_two_stage.epsilon(q, PARAMS)
  assert np.all(eps <= effective * (1 + 1e-12))
  assert np.all(eps[q > 0] <= own[q > 0] * (1 + 1e-12))


def test_minimum_reports_usage_vs_effective_and_vs_own():
  plan = record_plan.make_record_plan("minimum", BUDGETS, PARAMS, 1.0)
  accountant = run_calibrated_rounds(plan)
  spent, own = accountant.spent(), flat(BUDGETS)
  relaxed = own > 0.5
  m = accountant.metrics()
  # Calibrated to ε_min by the exact inverse: the whole effective budget is used.
  assert m["budget_used_max_vs_effective"] == pytest.approx(1.0, abs=3e-3)
  np.testing.assert_allclose(spent / 0.5, m["budget_used_max_vs_effective"], rtol=1e-12)
  # Against their own budgets the relaxed records use spent / ε_ij < 1.
  usage_own = spent / own
  assert np.all(usage_own[relaxed] < 0.5 + 1e-12)
  np.testing.assert_allclose(usage_own[relaxed], spent[relaxed] / own[relaxed])
  assert m["budget_used_max_vs_own"] == pytest.approx(usage_own.max())  # the ε_min records
  assert m["budget_used_mean_vs_own"] == pytest.approx(usage_own.mean())
  assert m["budget_used_mean_vs_own"] < 0.6 < m["budget_used_max_vs_effective"]


def test_dropout_reports_dropped_records_at_zero_vs_own():
  plan = record_plan.make_record_plan("dropout", BUDGETS, PARAMS, 1.0)
  accountant = run_calibrated_rounds(plan)
  spent, own = accountant.spent(), flat(BUDGETS)
  mod = own.mean()
  dropped = own < mod
  assert dropped.sum() == 4 and np.all(spent[dropped] == 0)  # ε_mod = 13/7
  m = accountant.metrics()
  assert m["budget_used_max_vs_effective"] == pytest.approx(1.0, abs=3e-3)
  # The kept records (ε_ij = 2, 4, 4 >= ε_mod) use at most ε_mod / 2 of their own budget.
  assert m["budget_used_max_vs_own"] == pytest.approx(spent.max() / 2.0)
  assert m["budget_used_max_vs_own"] <= mod / 2.0 * (1 + 1e-12)
  assert m["budget_used_mean_vs_own"] == pytest.approx(np.mean(spent / own))


def test_ours_usage_vs_effective_and_vs_own_coincide():
  plan = record_plan.make_record_plan("ours", BUDGETS, PARAMS, 1.0, estimator="exact")
  m = run_calibrated_rounds(plan).metrics()
  assert m["budget_used_max_vs_effective"] == m["budget_used_max_vs_own"]
  assert m["budget_used_max_vs_own"] == pytest.approx(1.0, abs=3e-3)


def test_accountant_refuses_effective_budget_above_own_for_sampled_records():
  rates = {"a": np.array([0.1, 0.0]), "b": np.array([0.1])}
  budgets = {"a": np.array([1.0, 1.0]), "b": np.array([1.0])}
  # Record a[1] is not sampled (q = 0): its lower own budget is allowed.
  RecordBudgetAccountant(budgets, rates, PARAMS,
                         own_budgets={"a": np.array([1.0, 0.5]), "b": np.array([2.0])})
  with pytest.raises(ValueError, match=r"client 'b', record 0: effective budget 1.0 exceeds "
                     r"its own budget 0.5"):
    RecordBudgetAccountant(budgets, rates, PARAMS,
                           own_budgets={"a": np.array([1.0, 0.5]), "b": np.array([0.5])})
  with pytest.raises(ValueError, match="same client ids"):
    RecordBudgetAccountant(budgets, rates, PARAMS, own_budgets={"a": np.ones(2)})
  with pytest.raises(ValueError, match="client 'b': 2 own budgets but 1 rates"):
    RecordBudgetAccountant(budgets, rates, PARAMS,
                           own_budgets={"a": np.ones(2), "b": np.ones(2)})


def test_unknown_method_and_bad_privacy_free_batch():
  with pytest.raises(ValueError, match="method='bogus' must be one of"):
    record_plan.make_record_plan("bogus", BUDGETS, PARAMS, 1.0)
  with pytest.raises(ValueError, match="privacy_free_batch=0 must be > 0"):
    record_plan.make_record_plan("privacy_free", BUDGETS, PARAMS, 1.0, privacy_free_batch=0)


def test_dropout_cutoff_comes_from_the_specification_when_given():
  """With a cutoff from the spec, ε_mod does not move with the budgets' counts:
  the same class budgets over two label mixes give the same cutoff and rates
  for the kept records (the data-mean fallback would differ and release them)."""
  from tff_idp import preferences
  class_budgets = {0: 0.5, 1: 2.0, 2: 4.0}
  cutoff = preferences.class_budget_cutoff(class_budgets)
  assert cutoff == pytest.approx(6.5 / 3)
  mixes = [{"a": np.array([0, 0, 0, 1, 2]), "b": np.array([0, 1])},
           {"a": np.array([2, 2, 2, 1, 0]), "b": np.array([2, 1])}]
  plans = []
  for labels in mixes:
    budgets = preferences.class_record_budgets(labels, class_budgets)
    plan = record_plan.make_record_plan("dropout", budgets, PARAMS, 1.0,
                                        dropout_cutoff=cutoff)
    assert plan.calibration["epsilon_mod"] == cutoff
    assert plan.calibration["epsilon_mod_source"] == "the budget specification"
    for cid, labels_c in labels.items():  # the class-0 and class-1 records are dropped
      np.testing.assert_array_equal(plan.rates[cid] == 0, labels_c < 2)
    plans.append(plan)
  kept = [np.concatenate([p.rates[c][p.rates[c] > 0] for c in p.rates]) for p in plans]
  assert np.all(kept[0] == kept[0][0]) and kept[0][0] == kept[1][0]
  fallback = [record_plan.make_record_plan(
      "dropout", preferences.class_record_budgets(m, class_budgets), PARAMS, 1.0)
      for m in mixes]
  assert fallback[0].calibration["epsilon_mod"] != fallback[1].calibration["epsilon_mod"]
  assert "class counts" in fallback[0].calibration["epsilon_mod_source"]
  with pytest.raises(ValueError, match="dropout_cutoff"):
    record_plan.make_record_plan("dropout", BUDGETS, PARAMS, 1.0, dropout_cutoff=0.0)


def test_expected_budget_is_the_distributions_mean():
  from tff_idp import preferences
  assert preferences.expected_budget(preferences.ThreeLevels()) == pytest.approx(
      0.7 * 0.1 + 0.2 * 1.0 + 0.1 * 5.0)
  assert preferences.expected_budget(
      preferences.Groups((1.0, float("inf")), (0.5, 0.5))) == 1.0
  pareto = preferences.BoundedPareto()  # truncated Pareto(1, 0.1) on [0.1, 10]: closed form
  exact = 0.1 * np.log(100.0) / (1 - 0.01)
  assert preferences.expected_budget(pareto) == pytest.approx(exact, rel=5e-3)
  again = preferences.expected_budget(preferences.BoundedMixGauss())
  assert again == preferences.expected_budget(preferences.BoundedMixGauss())  # fixed seed
  assert preferences.class_budget_cutoff({0: 1.0, 1: float("inf")}) == 1.0


def test_each_client_gets_its_own_records_rates_and_budgets():
  """With three clients of different sizes, every client's arrays hold its own records.

  The plan cuts flat per-record arrays back into clients; catches a cut that
  starts a client at the wrong offset (its records would get another
  client's budgets and rates, so a strict record could get a relaxed rate).
  """
  budgets = {"a": np.array([0.5, 4.0]), "b": np.array([1.0]), "c": np.array([2.0, 0.5, 8.0])}
  plan = record_plan.make_record_plan("ours", budgets, PARAMS, 1.0, estimator="exact")
  for cid, b in budgets.items():
    np.testing.assert_array_equal(plan.budgets[cid], b)
    np.testing.assert_array_equal(plan.own_budgets[cid], b)
    assert plan.rates[cid].shape == b.shape
    for budget, q in zip(b, plan.rates[cid]):
      # dp-accounting's Theorem 1 value for this record's rate is within its budget.
      assert rdp_two_stage.epsilon_reference(float(q), PARAMS) <= budget * (1 + 1e-9)
  # Equal budgets in different clients get equal rates; a larger budget a larger rate.
  assert plan.rates["a"][0] == plan.rates["c"][1]
  assert plan.rates["a"][0] < plan.rates["b"][0] < plan.rates["c"][0] < plan.rates["a"][1]


@pytest.mark.parametrize("estimator", ["scf", "binary_search", "exact"])
def test_ours_uses_the_requested_estimator(estimator):
  """``ours`` maps ε_ij to q_ij with the estimator the caller names (Minimum/Dropout use exact).

  Catches a plan that ignores ``estimator`` (e.g. always solves exactly, so
  the paper's SCF is never what runs) or loses the calibration summary.
  """
  from tff_idp.accounting.record import calibration as record_calibration
  plan = record_plan.make_record_plan("ours", BUDGETS, PARAMS, 1.0, estimator=estimator)
  direct = record_calibration.calibrate_record_rates(flat(BUDGETS), PARAMS, method=estimator)
  np.testing.assert_array_equal(flat(plan.rates), direct.q)
  assert plan.calibration["method"] == "ours"
  assert plan.calibration["records"] == 7
  assert ("r_squared" in plan.calibration) == (estimator == "scf")


def test_plan_carries_the_method_and_mechanism_parameters():
  """A plan states its method, σ, clipping norm and params; Minimum reports ε_min.

  Catches a plan that drops the method name, the noise multiplier or the
  clip norm it was given (the training run reads them from the plan).
  """
  for method in ("ours", "minimum", "dropout"):
    plan = record_plan.make_record_plan(method, BUDGETS, PARAMS, 0.7)
    assert plan.method == method
    assert plan.noise_multiplier == PARAMS.noise_multiplier
    assert plan.clip_norm == 0.7
    assert plan.params == PARAMS
    assert plan.calibration["method"] == method
    assert ("epsilon_min" in plan.calibration) == (method == "minimum")
  minimum = record_plan.make_record_plan("minimum", BUDGETS, PARAMS, 0.7)
  assert minimum.calibration["epsilon_min"] == 0.5


def test_single_record_plans():
  """A dataset of one record gets a plan for every method (ε_min = ε_mod = its budget).

  Catches reading ε_min or ε_mod from a second record that does not exist.
  """
  budgets = {"a": np.array([1.5])}
  minimum = record_plan.make_record_plan("minimum", budgets, PARAMS, 1.0)
  assert minimum.calibration["epsilon_min"] == 1.5
  dropout = record_plan.make_record_plan("dropout", budgets, PARAMS, 1.0)
  assert dropout.calibration["epsilon_mod"] == 1.5
  assert dropout.calibration["dropped_records"] == 0
  assert dropout.rates["a"][0] > 0
  assert rdp_two_stage.epsilon_reference(float(dropout.rates["a"][0]), PARAMS) <= 1.5 * (1 + 1e-9)


def test_dropout_keeps_records_whose_budget_equals_the_cutoff_and_counts_the_dropped():
  """A record whose ε_ij equals ε_mod can afford ε_mod: it is kept; those below are dropped.

  Catches a ``<=`` that drops records at the cutoff, a wrong dropped count,
  and a cutoff check that refuses a valid ε_mod in (0, 1].
  """
  plan = record_plan.make_record_plan("dropout", BUDGETS, PARAMS, 1.0, dropout_cutoff=1.0)
  own = flat(BUDGETS)
  q = flat(plan.rates)
  np.testing.assert_array_equal(q == 0, own < 1.0)
  assert plan.calibration["dropped_records"] == 2
  assert plan.calibration["epsilon_mod"] == 1.0
  eps = np.array([rdp_two_stage.epsilon_reference(float(r), PARAMS) for r in q])
  assert np.all(eps <= 1.0 * (1 + 1e-9))
  assert np.all(eps[q > 0] >= 0.99)  # calibrated to ε_mod by the exact inverse
  small = record_plan.make_record_plan("dropout", BUDGETS, PARAMS, 1.0, dropout_cutoff=0.5)
  assert small.calibration["dropped_records"] == 0


def test_privacy_free_rates_give_the_expected_batch():
  """privacy_free: no noise, no clipping, and each client samples ``privacy_free_batch``
  records per step in expectation (q = min(1, B/n)).

  Catches a wrong rate (B·n, a rate above 1, a wrong floor on n), a plan
  that claims noise or clipping, a lost summary, and a refused batch in (0, 1].
  """
  budgets = {"big": np.ones(40), "small": np.ones(3), "solo": np.ones(1)}
  plan = record_plan.make_record_plan("privacy_free", budgets, PARAMS, 1.0,
                                      privacy_free_batch=8)
  assert plan.method == "privacy_free"
  assert plan.budgets is None and plan.new_accountant() is None
  assert plan.noise_multiplier == 0.0 and plan.clip_norm == float("inf")
  assert plan.params == PARAMS
  assert plan.calibration == {"method": "privacy_free", "expected_batch": 8}
  assert plan.rates["big"].shape == (40,)
  assert plan.rates["big"].sum() == pytest.approx(8.0)  # expected batch B
  np.testing.assert_array_equal(plan.rates["small"], 1.0)  # n < B: every record, every step
  np.testing.assert_array_equal(plan.rates["solo"], 1.0)
  half = record_plan.make_record_plan("privacy_free", budgets, PARAMS, 1.0,
                                      privacy_free_batch=0.5)
  assert half.rates["solo"][0] == 0.5  # an expected batch of half a record
  assert half.rates["big"].sum() == pytest.approx(0.5)
