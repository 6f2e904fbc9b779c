"""Owner-level SAMPLE / SCALE plans (INO-SGD's IDP-SGD baseline), checked with dp-accounting."""
import json
import math

import numpy as np
import pytest

from tff_idp.accounting.owner import plan as owner_plan
from tests.independent_dp import dp_epsilon

DELTA = 1e-5


def _independent_epsilons(plan):
  return [dp_epsilon(q, plan.noise_std / c, plan.steps, plan.delta)
          for q, c in zip(plan.sampling_rates, plan.clip_thresholds)]


def test_sample_mn_setting_meets_budgets_and_batch():
  """MN (two owners, ε = 0.1 and 1, SAMPLE): rarer sampling for the stricter owner."""
  plan = owner_plan.plan_owners([0.1, 1.0], [3000, 3000], DELTA, steps=300,
                                expected_batch=200, mechanism="sample")
  assert plan.clip_thresholds == (1.0, 1.0)
  assert plan.sampling_rates[0] < plan.sampling_rates[1]
  assert plan.expected_batch == pytest.approx(200, rel=1e-3)
  for e_ind, e_t, e_a in zip(_independent_epsilons(plan), plan.target_epsilons,
                             plan.achieved_epsilons):
    assert e_ind <= e_t
    assert e_ind == pytest.approx(e_a, rel=1e-6)
  # Not wastefully loose: the stricter owner's budget is nearly used.
  assert _independent_epsilons(plan)[0] > 0.95 * 0.1


def test_scale_cm_setting_one_rate_per_owner_thresholds():
  eps = np.linspace(0.5, 5, 10)
  plan = owner_plan.plan_owners(eps, [500] * 10, DELTA, steps=200, expected_batch=250,
                                clip_norm=2.0, mechanism="scale", owner_names=range(10))
  assert len(set(plan.sampling_rates)) == 1
  assert plan.sampling_rates[0] == pytest.approx(250 / 5000)
  assert max(plan.clip_thresholds) == pytest.approx(2.0)
  assert list(plan.clip_thresholds) == sorted(plan.clip_thresholds)  # looser ε, larger C
  for e_ind, e_t in zip(_independent_epsilons(plan), plan.target_epsilons):
    assert e_ind <= e_t
  assert plan.owner_names[3] == "3"


@pytest.mark.parametrize("trial", range(6))
def test_property_no_calibrated_owner_exceeds_its_budget(trial):
  """Random owners, budgets, sizes and batches: dp-accounting never sees an overrun."""
  rng = np.random.default_rng(100 + trial)
  n = int(rng.integers(2, 6))
  eps = np.round(rng.uniform(0.2, 8, n), 3)
  sizes = rng.integers(200, 3000, n)
  mechanism = ("sample", "scale")[trial % 2]
  batch = float(rng.uniform(0.01, 0.08) * sizes.sum())
  plan = owner_plan.plan_owners(eps, sizes, DELTA, steps=int(rng.integers(50, 400)),
                                expected_batch=batch, clip_norm=float(rng.uniform(0.5, 3)),
                                mechanism=mechanism)
  for e_ind, e_t in zip(_independent_epsilons(plan), plan.target_epsilons):
    assert e_ind <= e_t * (1 + 1e-9)


def test_record_views_and_dict():
  plan = owner_plan.plan_owners([0.5, 2.0], [10, 10], DELTA, 50, 4, mechanism="scale")
  owners = np.array([0, 1, 1, 0])
  np.testing.assert_allclose(plan.record_rates(owners), [plan.sampling_rates[o] for o in owners])
  np.testing.assert_allclose(plan.record_thresholds(owners),
                             [plan.clip_thresholds[o] for o in owners], rtol=1e-6)
  d = plan.to_dict()
  assert d["expected_batch"] == pytest.approx(4)
  # A non-private owner's ε = inf sits inside a list: to_dict is strict JSON at any depth.
  free = owner_plan.plan_owners([0.5, math.inf], [100, 10], DELTA, 50, 20).to_dict()
  assert free["target_epsilons"] == [0.5, None]
  json.dumps(free, allow_nan=False)


def test_verify_refuses_an_over_budget_plan():
  plan = owner_plan.plan_owners([0.5, 2.0], [100, 100], DELTA, 100, 10)
  bad = owner_plan.OwnerPlan(**{**plan.__dict__,
                                "sampling_rates": (plan.sampling_rates[0] * 1.5,
                                                   plan.sampling_rates[1])})
  with pytest.raises(RuntimeError, match="over-budget"):
    owner_plan.verify_plan(bad)


@pytest.mark.parametrize("kwargs,match", [
    (dict(epsilons=[0.0, 1.0]), "epsilon"),
    (dict(delta=1.5), "delta"),
    (dict(mechanism="both"), "sample"),
    (dict(owner_sizes=[10]), "one size per owner"),
    (dict(expected_batch=500), "lower the expected batch"),
    (dict(clip_norm=-1.0), "clip_norm"),
])
def test_bad_input_says_what_to_change(kwargs, match):
  args = dict(epsilons=[0.5, 1.0], owner_sizes=[100, 100], delta=DELTA, steps=10,
              expected_batch=10)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    owner_plan.plan_owners(**args)


def test_drop_less_private_keeps_the_most_private_owner():
  owners = np.repeat([0, 1, 2], [100, 100, 50])
  keep = owner_plan.drop_less_private(owners, [0.1, 1.0, 0.1], 0.3, seed=0)
  assert keep[owners == 0].all() and keep[owners == 2].all()
  assert (~keep[owners == 1]).sum() == 30
  assert not np.array_equal(keep, owner_plan.drop_less_private(owners, [0.1, 1.0, 0.1], 0.3, 1))
  with pytest.raises(ValueError, match="fraction"):
    owner_plan.drop_less_private(owners, [0.1, 1.0, 0.1], 1.0, 0)


def test_record_views_are_float32_and_to_dict_reports_the_released_noise():
  """The per-record views feed float32 TF tensors, and to_dict reports the noise actually
  added: noise_std = z·C and owner n's effective multiplier z·C/C_n (INO-SGD App. C.1).

  Checked by hand from the plan's own fields (z, C, C_n). Bugs caught: the views left in
  float64 (a dtype clash in DP-SGD's float32 graph), noise_std or the effective
  multipliers dropped from the report or replaced by None.
  """
  plan = owner_plan.plan_owners([0.5, 2.0], [10, 10], DELTA, 50, 4, clip_norm=1.5,
                                mechanism="scale")
  owners = np.array([0, 1, 1, 0])
  assert plan.record_rates(owners).dtype == np.float32
  assert plan.record_thresholds(owners).dtype == np.float32
  d = plan.to_dict()
  assert d["noise_std"] == pytest.approx(plan.noise_multiplier * 1.5, rel=1e-12)
  assert d["noise_std"] > 0
  assert d["effective_noise_multipliers"] == pytest.approx(
      [plan.noise_multiplier * 1.5 / c for c in plan.clip_thresholds], rel=1e-12)
  assert d["effective_noise_multipliers"][0] > d["effective_noise_multipliers"][1]


def test_drop_less_private_is_reproducible_and_drops_nothing_at_zero():
  """"Drop x%" is a seeded baseline: the same seed drops the same records (the run can be
  repeated), and x = 0 is valid and keeps every record. Bugs caught: the seed ignored
  (OS entropy, a different subset per call) and 0% refused."""
  owners = np.repeat([0, 1, 2], [100, 100, 50])
  first = owner_plan.drop_less_private(owners, [0.1, 1.0, 2.0], 0.3, seed=7)
  again = owner_plan.drop_less_private(owners, [0.1, 1.0, 2.0], 0.3, seed=7)
  np.testing.assert_array_equal(first, again)
  assert (~first).sum() == 30 + 15
  assert owner_plan.drop_less_private(owners, [0.1, 1.0, 2.0], 0.0, seed=7).all()


def test_owner_epsilon_defaults_to_rdp_and_handles_the_degenerate_owners():
  """owner_epsilon's default accountant is RDP (as plan_owners'): it equals a fresh
  RdpAccountant; an owner never sampled spends 0 and one without noise ∞. Bugs caught:
  the default accountant name garbled (every default call refused), the q = 0 shortcut
  taken at q = 1 or returning a nonzero ε."""
  assert owner_plan.owner_epsilon(0.02, 1.1, 100, DELTA) == pytest.approx(
      dp_epsilon(0.02, 1.1, 100, DELTA), rel=1e-12)
  # An owner sampled in every step (q = 1) is charged in full, not as never sampled.
  assert owner_plan.owner_epsilon(1.0, 4.0, 10, DELTA) == pytest.approx(
      dp_epsilon(1.0, 4.0, 10, DELTA), rel=1e-12)
  assert owner_plan.owner_epsilon(0.0, 1.1, 100, DELTA) == 0.0
  assert owner_plan.owner_epsilon(0.02, 0.0, 100, DELTA) == math.inf


@pytest.mark.parametrize("kwargs,match", [
    (dict(owner_sizes=[-1, 100]), r"owner_sizes=\[-1, 100\] must be >= 0"),
    (dict(owner_names=["only"]), "one owner name per budget"),
    (dict(owner_sizes=[0, 0]), "the owners hold no records"),
    (dict(steps=0), "rounds=0 must be a positive integer"),
    (dict(clip_norm=math.inf), "clip_norm=inf must be a finite number"),
    (dict(expected_batch=0), r"expected_batch=0 must be in \(0, 200\]"),
    (dict(accountant="gdp"), "not supported"),
    (dict(epsilons=[0.5, -1.0]), r"epsilons\[1\]"),
    (dict(clip_norm=0.0), r"clip_norm=0.0 must be a finite number > 0"),
])
def test_every_plan_input_is_checked_by_name(kwargs, match):
  """Each malformed input is refused with the argument named. Bugs caught: a check dropped
  (a negative owner, a missing name, an empty silo or a zero batch silently planned) or
  its message losing the value."""
  args = dict(epsilons=[0.5, 1.0], owner_sizes=[100, 100], delta=DELTA, steps=10,
              expected_batch=10)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    owner_plan.plan_owners(**args)


def test_plan_edges_are_accepted():
  """Valid edges: the expected batch equal to every record (q = 1 for everyone under
  SCALE), an owner with no records, a tiny clip norm. Each plan is verified within budget
  by a fresh accountant. Bugs caught: the batch bound made strict, empty owners refused."""
  plan = owner_plan.plan_owners([50.0, 80.0], [20, 20], DELTA, 5, expected_batch=40,
                                mechanism="scale")
  assert plan.sampling_rates == (1.0, 1.0)
  plan = owner_plan.plan_owners([1.0, 2.0, 4.0], [0, 200, 100], DELTA, 20, 30,
                                clip_norm=1e-6)
  assert plan.owner_sizes == (0, 200, 100) and plan.clip_norm == 1e-6
  for e_ind, e_t in zip(_independent_epsilons(plan), plan.target_epsilons):
    assert e_ind <= e_t


def test_verify_accepts_a_plan_that_spends_exactly_its_budget():
  """A budget is ε <= target: a plan whose owners spend exactly their budgets is valid,
  and one a hair over is refused. Bug caught: ``>=`` for ``>`` (every tight plan refused)."""
  plan = owner_plan.plan_owners([0.5, 2.0], [100, 100], DELTA, 100, 10)
  exact_budget = owner_plan.OwnerPlan(**{**plan.__dict__,
                                         "target_epsilons": plan.achieved_epsilons})
  assert owner_plan.verify_plan(exact_budget) == plan.achieved_epsilons
  hair = tuple(math.nextafter(e, 0.0) for e in plan.achieved_epsilons)
  with pytest.raises(RuntimeError, match="over-budget"):
    owner_plan.verify_plan(owner_plan.OwnerPlan(**{**plan.__dict__, "target_epsilons": hair}))


@pytest.mark.parametrize("mechanism", ["sample", "scale"])
def test_pld_plans_are_charged_with_a_fresh_pld_accountant(mechanism):
  """``accountant="pld"`` reaches the calibration, the verification and every reported ε:
  each owner's ε equals a fresh dp-accounting PLD accountant's for the released (q, σ/C_n)
  and lies within budget; the RDP value of the same plan differs. Bugs caught: the
  accountant argument dropped anywhere (the plan silently calibrated or checked with RDP,
  the default), the mechanism not recorded in the plan."""
  plan = owner_plan.plan_owners([0.5, 2.0], [400, 400], DELTA, steps=50, expected_batch=40,
                                mechanism=mechanism, accountant="pld")
  assert plan.mechanism == mechanism and plan.accountant == "pld"
  pld = [dp_epsilon(q, plan.noise_std / c, plan.steps, plan.delta, "pld")
         for q, c in zip(plan.sampling_rates, plan.clip_thresholds)]
  np.testing.assert_allclose(plan.achieved_epsilons, pld, rtol=1e-9)
  for e, target in zip(pld, plan.target_epsilons):
    assert e <= target
  # The strictest owner's budget is used nearly in full under PLD, where RDP would
  # report it well over (RDP is looser): a plan calibrated with RDP would not be this tight.
  assert pld[0] >= 0.97 * plan.target_epsilons[0]
  rdp = _independent_epsilons(plan)
  assert rdp[0] > pld[0] * 1.02
  # owner_epsilon passes the accountant on too.
  q, z = plan.sampling_rates[0], plan.effective_noise_multipliers[0]
  assert owner_plan.owner_epsilon(q, z, plan.steps, plan.delta, "pld") == pytest.approx(
      pld[0], rel=1e-9)


def test_owner_epsilon_at_noise_multiplier_one_is_the_accountants():
  """z_eff = 1 is an ordinary noise level (only z = 0 is "no noise", ε = ∞)."""
  assert owner_plan.owner_epsilon(0.05, 1.0, 20, DELTA) == pytest.approx(
      dp_epsilon(0.05, 1.0, 20, DELTA), rel=1e-12)


def test_one_record_and_a_batch_below_one_are_planned():
  """A silo of a single record, and an expected batch in (0, 1), are valid and verified.
  Bugs caught: the record check made ``<= 1`` / ``< 2``, the batch bound made ``1 < b``."""
  plan = owner_plan.plan_owners([50.0, 80.0], [1, 0], DELTA, 5, expected_batch=1.0,
                                mechanism="scale")
  assert plan.owner_sizes == (1, 0) and plan.sampling_rates[0] == 1.0
  plan = owner_plan.plan_owners([2.0, 4.0], [100, 100], DELTA, 10, expected_batch=0.5)
  assert plan.expected_batch == pytest.approx(0.5, rel=5e-3)
  for e_ind, e_t in zip(_independent_epsilons(plan), plan.target_epsilons):
    assert e_ind <= e_t
