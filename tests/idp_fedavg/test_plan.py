"""Run specs (``--runs``): the accepted forms and the messages that say what to change."""
import pytest

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
    ("50-50", "has 2 groups but there are 3 budgets"),
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
  import dp_accounting  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  spec = privacy_plan.parse_run_spec("scale", RATIOS, 3)
  rounds, delta = 50, 1e-4
  plan = privacy_plan.make_privacy_plan(spec, [1.0, 2.0, 4.0], 600, 20.0, rounds, delta,
                                        "rdp", seed=0)
  q = float(plan.client_rates[0])
  z = plan.noise_multiplier
  spent = plan.ledger.spent(rounds)
  for p, budget in enumerate([1.0, 2.0, 4.0]):
    s_p = float(np.unique(plan.client_clip_scales[plan.client_groups == p])[0])
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(z / s_p)),
        rounds))
    independent = acc.get_epsilon(delta)
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
  import numpy as np  # pylint: disable=g-import-not-at-top
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
