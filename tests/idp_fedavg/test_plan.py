"""Run specs (``--runs``): the accepted forms and the messages that say what to change."""
import dp_accounting
import numpy as np
import pytest

from tff_idp.accounting.client.ledger import BudgetExhaustedError
from tff_idp.engine.sampling import assign_privacy_groups
from tff_idp.idp_fedavg import plan as privacy_plan

RATIOS = (0.34, 0.43, 0.23)


@pytest.mark.parametrize("text, name, mode", [
    ("nonprivate", "nonprivate", "nonprivate"),
    ("34-43-23", "34-43-23", "idp"),
    ("idp", "34-43-23", "idp"),
    ("scale", "scale-34-43-23", "scale"),
    ("scale:54-37-9", "scale-54-37-9", "scale"),
    ("scale-54-37-9", "scale-54-37-9", "scale"),   # the name tables and folders print
])
def test_accepted_forms(text, name, mode):
  spec = privacy_plan.parse_run_spec(text, RATIOS, 3)
  assert (spec.name, spec.mode) == (name, mode)


def test_percentages_that_do_not_sum_to_100_speak_of_percentages():
  with pytest.raises(ValueError, match=r"percentages 10-20-30 sum to 60, not 100"):
    privacy_plan.parse_run_spec("10-20-30", RATIOS, 3)


@pytest.mark.parametrize("text, match", [
    ("magic:1-2-97", "mode must be idp or scale.*scale-34-43-23"),
    ("a-b-c", "percentages like 34-43-23.*scale-34-43-23"),
    ("50-50", "has 2 percentages for 3 --budgets"),
])
def test_bad_specs_say_what_to_write(text, match):
  with pytest.raises(ValueError, match=match):
    privacy_plan.parse_run_spec(text, RATIOS, 3)


@pytest.mark.parametrize("text", ["50-50", "scale-50-50"])
def test_calibration_runs_once_per_run_specification(text):
  """Seeds share Alg. 1's (or SCALE's) result; each seed gets its own groups and ledger."""
  spec = privacy_plan.parse_run_spec(text, [0.5, 0.5], 2)
  plans = [privacy_plan.make_privacy_plan(spec, [2.0, 8.0], 200, 10, 20, 1e-5, "rdp", seed)
           for seed in (0, 1)]
  calibrate = (privacy_plan._group_calibration if spec.mode == "idp"  # pylint: disable=protected-access
               else privacy_plan._scale_calibration)  # pylint: disable=protected-access
  before = calibrate.cache_info()
  again = privacy_plan.make_privacy_plan(spec, [2.0, 8.0], 200, 10, 20, 1e-5, "rdp", 2)
  assert calibrate.cache_info().hits == before.hits + 1
  assert again.noise_multiplier == plans[0].noise_multiplier == plans[1].noise_multiplier
  assert plans[0].ledger is not plans[1].ledger
  assert (plans[0].client_groups != plans[1].client_groups).any()


def test_scale_ledger_charges_each_group_its_effective_noise_multiplier():
  """SCALE's ledger charges group p the multiplier z/s_p, recomputed with fresh dp-accounting (issue 32).

  Group p's released pair has sensitivity s_p·(C, ½) against noise z, i.e.
  multiplier z/s_p. Property: the ledger's ε per group after all rounds
  equals dp-accounting's ε of Poisson(q)-subsampled Gaussian(z/s_p) composed
  over the rounds, and is within the group's budget. Bug caught: a ledger
  charging the base z (the ε = 4 group is then reported at about 8, and a
  plan's printed ε no longer matches what is released).
  """
  spec = privacy_plan.parse_run_spec("scale", RATIOS, 3)
  rounds, delta = 50, 1e-4
  plan = privacy_plan.make_privacy_plan(spec, [1.0, 2.0, 4.0], 600, 20.0, rounds, delta,
                                        "rdp", seed=0)
  q = float(plan.client_rates[0])
  z = plan.noise_multiplier
  spent = plan.ledger.spent(rounds)
  for p, budget in enumerate([1.0, 2.0, 4.0]):
    s_p = float(np.unique(plan.client_clip_scales[plan.client_groups == p])[0])
    independent = _fresh_rdp_epsilon(q, z / s_p, rounds, delta)
    assert spent[p] == pytest.approx(independent, rel=1e-6), p
    assert independent <= budget
  assert min(plan.client_clip_scales) < 1.0  # the test would be vacuous with every s_p = 1


@pytest.mark.parametrize("text", ["nonprivate", "50-50", "scale-50-50"])
def test_summary_and_aggregator_kwargs_report_the_plan(text):
  """``summary()`` reports the plan's own σ, group sizes and rates, c and SCALE's clip scales;
  ``aggregator_kwargs()`` passes SCALE's Σ q_i s_i to the DP aggregator and nothing otherwise.

  Property: every summary field equals the plan attribute it names (the
  distinct clip scales for SCALE, None otherwise), and the aggregator gets
  ``expected_clip_scale_sum`` exactly when the plan has one. Bugs caught: a
  summary field dropped, renamed or taken from another attribute (the
  printed/saved plan then disagrees with the calibration that runs), and
  SCALE's clip-bit normaliser not reaching the aggregator (which then
  normalises the clip bits by c instead of Σ q_i s_i).
  """
  spec = privacy_plan.parse_run_spec(text, [0.5, 0.5], 2)
  plan = privacy_plan.make_privacy_plan(spec, [2.0, 8.0], 200, 10, 20, 1e-5, "rdp", 0)
  summary = plan.summary()
  assert summary == {
      "run": spec.name,
      "noise_multiplier": plan.noise_multiplier,
      "group_sizes": list(plan.group_sizes),
      "group_rates": list(plan.group_rates),
      "expected_clients_per_round": plan.expected_clients_per_round,
      "clip_scales": (None if plan.client_clip_scales is None
                      else sorted(set(np.round(plan.client_clip_scales, 6).tolist()))),
  }
  if spec.mode == "scale":
    assert len(summary["clip_scales"]) == 2 and 0 < min(summary["clip_scales"]) < 1
    assert plan.aggregator_kwargs() == {"expected_clip_scale_sum": plan.expected_clip_scale_sum}
    assert 0 < plan.expected_clip_scale_sum < plan.expected_clients_per_round
  else:
    assert summary["clip_scales"] is None
    assert plan.aggregator_kwargs() == {}


def _fresh_rdp_epsilon(q: float, sigma: float, rounds: int, delta: float) -> float:
  """ε of ``rounds`` Poisson(q)-subsampled Gaussian(σ) rounds, from a fresh dp-accounting RDP accountant."""
  acc = dp_accounting.rdp.RdpAccountant()
  acc.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), rounds))
  return acc.get_epsilon(delta)


def test_nonprivate_plan_samples_everyone_at_c_over_n_and_keeps_no_ledger():
  """Plain FedAvg: every client at rate c/N, c expected per round, no noise, no groups, no ledger.

  Bugs caught: a wrong uniform rate (c·N, or None), a missing or wrong
  expected cohort, and rates/groups/ledger swapped between the plan's fields.
  """
  spec = privacy_plan.parse_run_spec("nonprivate", RATIOS, 3)
  plan = privacy_plan.make_privacy_plan(spec, [1.0, 2.0, 4.0], 400, 10.0, 20, 1e-5, "rdp", 0)
  assert plan.client_rates.shape == (400,)
  np.testing.assert_array_equal(plan.client_rates, np.full(400, 10.0 / 400))
  assert plan.expected_clients_per_round == 10.0
  assert plan.client_groups is None and plan.noise_multiplier is None
  assert plan.client_clip_scales is None and plan.ledger is None
  assert plan.group_rates == (10.0 / 400,) and plan.group_sizes == (400,)


@pytest.mark.parametrize("text", ["50-50", "scale-50-50"])
@pytest.mark.parametrize("allow_overrun", [False, True])
def test_plan_ledger_charges_the_released_rates_and_enforces_the_rounds(text, allow_overrun):
  """The plan's per-client rates are its groups' rates, and its ledger charges exactly them.

  Property: client i's rate is its group's rate (groups from the run's seed),
  the expected cohort is Σ_g n_g·q_g (IDP) or c (SCALE), and the ledger's ε
  per group after the calibrated rounds equals a fresh dp-accounting RDP
  accountant's ε of Poisson(q_g)-subsampled Gaussian(z_g) at the run's δ
  (z_g = σ for IDP, z/s_g for SCALE), within the group's budget. The ledger
  refuses a round past the calibrated ones unless the run allows overruns.
  Bugs caught: a ledger built with another δ or rounds, an overrun allowed
  by default or dropped, per-client rates not taken from the calibration,
  and the expected cohort taken from the wrong field.
  """
  budgets, num_clients, cohort, rounds, delta = [2.0, 8.0], 200, 10.0, 20, 1e-4
  spec = privacy_plan.parse_run_spec(text, [0.5, 0.5], 2)
  kwargs = {"allow_overrun": True} if allow_overrun else {}
  plan = privacy_plan.make_privacy_plan(spec, budgets, num_clients, cohort, rounds, delta, "rdp",
                                        seed=3, **kwargs)
  groups = assign_privacy_groups(num_clients, (0.5, 0.5), 3)
  np.testing.assert_array_equal(plan.client_groups, groups)
  np.testing.assert_array_equal(plan.client_rates, np.asarray(plan.group_rates)[groups])
  assert plan.group_sizes == (100, 100)
  if spec.mode == "idp":
    assert plan.expected_clients_per_round == pytest.approx(
        sum(n * q for n, q in zip(plan.group_sizes, plan.group_rates)), rel=1e-9)
    multipliers = [plan.noise_multiplier] * 2
  else:
    assert plan.expected_clients_per_round == cohort
    multipliers = [plan.noise_multiplier / float(np.unique(plan.client_clip_scales[groups == g])[0])
                   for g in range(2)]
  spent = plan.ledger.spent(rounds)
  for g, budget in enumerate(budgets):
    independent = _fresh_rdp_epsilon(plan.group_rates[g], multipliers[g], rounds, delta)
    assert spent[g] == pytest.approx(independent, rel=1e-6)
    assert independent <= budget
  assert plan.ledger.remaining_rounds() == rounds
  plan.ledger.check_can_run(rounds)
  if allow_overrun:
    plan.ledger.check_can_run(rounds + 1)
  else:
    with pytest.raises(BudgetExhaustedError):
      plan.ledger.check_can_run(rounds + 1)


@pytest.mark.parametrize("text", ["scale:", "idp:"])
def test_a_mode_with_an_empty_distribution_takes_the_default_ratios(text):
  """``scale:`` / ``idp:`` (a mode and nothing after the colon) mean the ``--ratios`` distribution."""
  spec = privacy_plan.parse_run_spec(text, RATIOS, 3)
  assert spec.mode == text[:-1] and spec.ratios == RATIOS


def test_percentages_off_100_by_half_a_percent_are_refused():
  """Percentages must sum to 100 (to 1e-6): 50-50.5 is a typo, not a distribution to renormalise."""
  with pytest.raises(ValueError, match="sum to 100.5, not 100"):
    privacy_plan.parse_run_spec("50-50.5", [0.5, 0.5], 2)


@pytest.mark.parametrize("text,ratios,groups,match", [
    ("idp", [0.5, 0.5], 3, "takes its groups from --ratios, which has 2 values for 3 "
     "--budgets; give 3 --ratios"),
    ("scale", [0.2, 0.3, 0.5], 2, "has 3 values for 2 --budgets; give 2 --ratios"),
    ("50-50", RATIOS, 3, "has 2 percentages for 3 --budgets; give 3, one per budget "
     r"\(e.g. 34-33-33\)"),
    ("scale:100", [0.2] * 5, 5, r"e.g. 20-20-20-20-20\)"),
    ("10-20-30-40", [0.5, 0.5], 2, r"e.g. 50-50\)"),
])
def test_a_group_count_mismatch_names_the_flag_to_change(text, ratios, groups, match):
  """Issue 50: ``--runs=idp --ratios=0.5,0.5`` asked for percentages in the run spec."""
  with pytest.raises(ValueError, match=match):
    privacy_plan.parse_run_spec(text, ratios, groups)
