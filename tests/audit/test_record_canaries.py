"""Record-level gradient canaries for the empirical privacy audit (Andrew et al., ICLR 2024)."""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.accounting.record.plan import make_record_plan
from tff_idp.audit import canary_replacement
from tff_idp.audit import directions
from tff_idp.audit import record_canaries
from tff_idp.rpdp import dp_sgd
from tff_idp.rpdp import client_work as process_lib
from tff_idp.rpdp import record_level

NF, NC = 6, 3


def _builder():
  return models.build_logistic_regression(NF, NC, seed=1)


def _spec():
  return collections.OrderedDict(x=tf.TensorSpec([None, NF], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))


def _model():
  return models.tff_model_fn(_builder, _spec())()


def _weights(model):
  return tf.nest.map_structure(lambda v: v.read_value(),
                               tff.learning.models.ModelWeights.from_model(model))


def _records(n, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(n, NF)).astype(np.float32),
          rng.integers(0, NC, n).astype(np.int32))


def _specs(model):
  return [tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables]


@pytest.mark.parametrize("force_generic", [False, True])
def test_canary_contributes_exactly_clip_times_direction(force_generic):
  """(a) Both per-example paths: a canary's clipped gradient becomes L·u_j."""
  model = _model()
  x, y = _records(5)
  seeds = directions.canary_seeds(7, 3)
  index = tf.constant([-1, 2, -1, 0, -1], tf.int32)
  clips = tf.constant([0.5, 0.3, 0.5, 0.7, 0.5])
  replacement = canary_replacement.CanaryReplacement(seeds)(index, clips)
  with_c, _, _ = dp_sgd.clipped_gradient_sum(
      model, tf.constant(x), tf.constant(y), clips, dp_sgd.sparse_categorical_crossentropy,
      force_generic=force_generic, replacement=replacement)
  real = np.array([0, 2, 4])
  plain, _, _ = dp_sgd.clipped_gradient_sum(
      model, tf.constant(x[real]), tf.constant(y[real]), tf.gather(clips, real),
      dp_sgd.sparse_categorical_crossentropy, force_generic=force_generic)
  u2 = directions.canary_direction(seeds[2], _specs(model))
  u0 = directions.canary_direction(seeds[0], _specs(model))
  for got, p, a, b in zip(with_c, plain, u2, u0):
    np.testing.assert_allclose(got.numpy(), p.numpy() + 0.3 * a.numpy() + 0.7 * b.numpy(),
                               rtol=1e-5, atol=1e-6)


def test_one_step_delta_of_a_lone_canary_is_lr_times_direction_times_clip():
  """(a) noise 0, one step, SGD lr 1, q = 1: delta = L·u_j / Σq_real."""
  model = _model()
  x, y = _records(4)
  # Compared with the same step without the canary: the difference is the canary's.
  seeds = directions.canary_seeds(3, 2)
  initial = _weights(model)
  sgd = tff.learning.optimizers.build_sgdm(1.0)
  q_real = np.full(4, 1.0, np.float32)
  plain = dp_sgd.build_local_dp_sgd(model, sgd, 1, 0.0, 0.5)
  d_plain, s_plain = plain(initial, x, y, q_real, tf.constant([1, 2], tf.int64))
  audited = dp_sgd.build_local_dp_sgd(model, sgd, 1, 0.0, 0.5, record_replacement=canary_replacement.CanaryReplacement(seeds))
  xc = np.concatenate([x, np.zeros((1, NF), np.float32)])
  yc = np.concatenate([y, np.zeros(1, np.int32)])
  qc = np.concatenate([q_real, [1.0]]).astype(np.float32)
  d_can, s_can = audited(initial, xc, yc, qc, tf.constant([1, 2], tf.int64),
                         canary_index=np.array([-1, -1, -1, -1, 1], np.int32))
  u = directions.canary_direction(seeds[1], _specs(model))
  for a, b, ui in zip(d_can, d_plain, u):
    np.testing.assert_allclose(a.numpy() - b.numpy(), 0.5 * ui.numpy() / 4.0,
                               rtol=1e-4, atol=1e-7)
  # (d) the normaliser and the statistics are the real records' only.
  assert float(s_can["expected_batch"]) == float(s_plain["expected_batch"]) == 4.0
  assert float(s_can["sampled"]) == float(s_plain["sampled"]) == 4.0
  assert float(s_can["loss_sum"]) == pytest.approx(float(s_plain["loss_sum"]))


def test_no_canaries_is_bit_for_bit_the_plain_step():
  """(b) An audit step with only real records (index −1) = the plain step, noise included."""
  model = _model()
  x, y = _records(12, seed=4)
  q = np.linspace(0.2, 0.9, 12).astype(np.float32)
  initial = _weights(model)
  sgd = tff.learning.optimizers.build_sgdm(0.7)
  seed = tf.constant([5, 6], tf.int64)
  plain = dp_sgd.build_local_dp_sgd(model, sgd, 3, 1.3, 0.4)
  audited = dp_sgd.build_local_dp_sgd(model, sgd, 3, 1.3, 0.4,
                                      record_replacement=canary_replacement.CanaryReplacement(directions.canary_seeds(0, 4)))
  d0, s0 = plain(initial, x, y, q, seed)
  d1, s1 = audited(initial, x, y, q, seed, canary_index=np.full(12, -1, np.int32))
  for a, b in zip(d0, d1):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  for k in s0:
    assert float(s0[k]) == float(s1[k])


def test_held_out_canary_is_never_sampled_and_q0_canary_has_no_effect():
  """(c) A canary at q = 0 leaves the step unchanged."""
  model = _model()
  x, y = _records(6, seed=5)
  q = np.full(6, 0.5, np.float32)
  initial = _weights(model)
  sgd = tff.learning.optimizers.build_sgdm(1.0)
  seeds = directions.canary_seeds(1, 2)
  audited = dp_sgd.build_local_dp_sgd(model, sgd, 2, 0.0, 0.5, record_replacement=canary_replacement.CanaryReplacement(seeds))
  seed = tf.constant([8, 9], tf.int64)
  d0, _ = audited(initial, x, y, q, seed, canary_index=np.full(6, -1, np.int32))
  xc = np.concatenate([x, np.zeros((2, NF), np.float32)])
  yc = np.concatenate([y, np.zeros(2, np.int32)])
  # Appended after the real records, so the real records' uniforms are unchanged.
  d1, _ = audited(initial, xc, yc, np.concatenate([q, [0.0, 0.0]]).astype(np.float32), seed,
                  canary_index=np.array([-1] * 6 + [0, 1], np.int32))
  for a, b in zip(d0, d1):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_plain_step_refuses_canary_index_and_audit_step_needs_it():
  model = _model()
  x, y = _records(3)
  sgd = tff.learning.optimizers.build_sgdm(1.0)
  with pytest.raises(ValueError, match="record_replacement"):
    dp_sgd.build_local_dp_sgd(model, sgd, 1, 0.0, 1.0)(
        _weights(model), x, y, np.ones(3, np.float32), tf.constant([0, 0], tf.int64),
        canary_index=np.full(3, -1, np.int32))
  with pytest.raises(ValueError, match="canary_index"):
    dp_sgd.build_local_dp_sgd(model, sgd, 1, 0.0, 1.0,
                              record_replacement=canary_replacement.CanaryReplacement(directions.canary_seeds(0, 2)))(
        _weights(model), x, y, np.ones(3, np.float32), tf.constant([0, 0], tf.int64))


# -- placement, levels and the ledger ------------------------------------------

PARAMS = TwoStageParams(noise_multiplier=1.0, local_steps=2, rounds=4, client_rate=1.0,
                        delta=1e-3)


def _federation(num_clients=4, n=20, seed=0):
  x, y = {}, {}
  for c in range(num_clients):
    x[f"c{c}"], y[f"c{c}"] = _records(n, seed=seed + c)
  return record_level.RecordFederation(x, y)


def _budgets(federation, levels=(0.5, 2.0)):
  return {cid: np.array([levels[i % len(levels)] for i in range(n)])
          for cid, n in federation.sizes.items()}


def test_canaries_split_levels_half_inserted_and_follow_the_budget_rates():
  fed = _federation()
  plan = make_record_plan("ours", _budgets(fed), PARAMS, clip_norm=1.0, estimator="exact")
  can = record_canaries.make_record_canaries(plan, fed, 16, audit_seed=3)
  assert can.level_values == (0.5, 2.0)
  for level in can.level_values:
    group = can.levels == level
    assert group.sum() == 8 and can.inserted[group].sum() == 4
    real = np.concatenate([plan.rates[c][plan.budgets[c] == level] for c in plan.rates])
    np.testing.assert_allclose(can.rates[group], real.max())
  assert all(c == "" for c, i in zip(can.clients, can.inserted) if not i)
  assert all(c in fed.sizes for c, i in zip(can.clients, can.inserted) if i)
  # Seeded: the same audit seed gives the same canaries.
  again = record_canaries.make_record_canaries(plan, fed, 16, audit_seed=3)
  assert again.identity() == can.identity()


def test_held_out_canaries_are_in_no_dataset_and_ledger_is_unchanged():
  """(c), (d): datasets carry only inserted canaries; the ledger is the plan's."""
  fed = _federation()
  plan = make_record_plan("ours", _budgets(fed), PARAMS, clip_norm=1.0, estimator="exact")
  can = record_canaries.make_record_canaries(plan, fed, 16, audit_seed=1)
  seen = []
  for cid in fed.client_ids:
    x, y, q, index = can.client_records(cid, fed.x[cid], fed.y[cid], plan.rates[cid])
    n = fed.sizes[cid]
    np.testing.assert_array_equal(index[:n], -1)
    np.testing.assert_array_equal(q[:n], plan.rates[cid].astype(np.float32))
    np.testing.assert_array_equal(x[:n], fed.x[cid])
    seen.extend(index[n:].tolist())
  assert sorted(seen) == sorted(np.flatnonzero(can.inserted).tolist())
  # The ledger is built from the plan alone: the same records and rates as without canaries.
  ledger = plan.new_accountant()
  assert ledger.rates.size == sum(fed.sizes.values())
  ledger_eps = record_canaries.ledger_epsilon(can.rates[0], plan, PARAMS.rounds)
  assert ledger_eps <= can.level_values[0] + 1e-9


def test_broken_rate_scale_changes_only_the_mechanism():
  fed = _federation()
  plan = make_record_plan("ours", _budgets(fed), PARAMS, clip_norm=1.0, estimator="exact")
  can = record_canaries.make_record_canaries(plan, fed, 8, rate_scale={0.5: 8.0})
  x, y, q, index = can.client_records("c0", fed.x["c0"], fed.y["c0"], plan.rates["c0"])
  strict = plan.budgets["c0"] == 0.5
  np.testing.assert_allclose(q[:20][strict], np.minimum(1, 8 * plan.rates["c0"][strict]),
                             rtol=1e-6)
  np.testing.assert_allclose(q[:20][~strict], plan.rates["c0"][~strict], rtol=1e-6)
  assert np.all(plan.new_accountant().rates == np.concatenate(list(plan.rates.values())))


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_canaries=6), "multiple of 4"),
    (dict(num_canaries=7), "multiple of 4"),
    (dict(num_canaries=4), ">= 4 per level"),
    (dict(num_canaries=400), "only 80 real records"),
    (dict(num_canaries=8, clients=["nope"]), "unknown"),
    (dict(num_canaries=8, levels=[0.5, 0.5]), "duplicates"),
    (dict(num_canaries=8, rate_scale={3.0: 2.0}), "not among"),
])
def test_bad_canary_requests_raise(kwargs, match):
  fed = _federation()
  plan = make_record_plan("ours", _budgets(fed), PARAMS, clip_norm=1.0, estimator="exact")
  with pytest.raises(ValueError, match=match):
    record_canaries.make_record_canaries(plan, fed, **kwargs)


def test_privacy_free_plan_cannot_be_audited():
  fed = _federation()
  plan = make_record_plan("privacy_free", _budgets(fed), PARAMS, clip_norm=1.0)
  with pytest.raises(ValueError, match="no privacy budgets"):
    record_canaries.make_record_canaries(plan, fed, 8)


def test_record_dataset_with_canaries_matches_the_audit_element_spec():
  x, y = _records(3)
  ds = process_lib.record_dataset(x, y, np.ones(3), (1, 2), canary_index=np.array([-1, 0, -1]))
  spec = process_lib.record_element_spec(_spec(), with_canaries=True)
  assert set(ds.element_spec) == set(spec)
  assert "canary" not in process_lib.record_dataset(x, y, np.ones(3), (1, 2)).element_spec


# -- end to end: a seeded logistic-regression audit ------------------------------

E2E_NF = 400  # d = 4,010: the null cosines have sd ≈ 1/sqrt(d) ≈ 0.016
E2E_PARAMS = TwoStageParams(noise_multiplier=4.0, local_steps=2, rounds=5, client_rate=1.0,
                            delta=1e-3)
E2E_LEVELS = (1.5, 3.0)  # strict level q ≈ 0.59, loose q = 1


def _e2e_setup():
  rng = np.random.default_rng(0)
  x = {f"c{c}": rng.normal(size=(40, E2E_NF)).astype(np.float32) for c in range(2)}
  y = {f"c{c}": rng.integers(0, 10, 40).astype(np.int32) for c in range(2)}
  fed = record_level.RecordFederation(x, y)
  plan = make_record_plan("ours", _budgets(fed, E2E_LEVELS), E2E_PARAMS, clip_norm=1.0,
                          estimator="exact")
  spec = collections.OrderedDict(x=tf.TensorSpec([None, E2E_NF], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(lambda: models.build_logistic_regression(E2E_NF, 10, seed=0),
                                 spec)
  return fed, plan, model_fn


@pytest.mark.slow
def test_audit_separates_without_noise_and_flags_the_broken_noise(tff_runtime, tmp_path):
  """(e) 2 clients × 40 records, 128 canaries (32 inserted / 32 held out per level).

  * σ = 0: every inserted cosine is above every held-out one.
  * The correct run (σ = 4) is not flagged at either level.
  * The broken run (the process at σ/4 = 1, the ledger still at σ = 4) is
    flagged at the strict level: the CI's lower end is above the ledger's ε.

  Flake considerations: the run is seeded (insecure reproducible noise,
  run and audit seed 3, bootstrap seed 0), so it is deterministic on a
  platform. Over run/audit seeds 0-4 (measured again after issue 48 folded
  each run's secret seed-counter start into the client seeds, which changed
  every noise draw), the correct strict level's CI lower end was 0.01-1.15
  against a bound of 1.5, and the broken one's 0.79-4.25: flagged at 4 of
  the 5 seeds (seed 0: 0.79). This test asserts seed 3 (correct 0.43, broken
  2.97), a typical seed; the audit's power at this size is about 4 in 5, so
  the test checks that it *can* flag the broken noise, not its power. Only
  the CI, not the point estimate, is asserted for the correct run.
  Other float orders (another CPU or TF build) shift the cosines by ~1e-6,
  far below these margins.
  """
  fed, plan, model_fn = _e2e_setup()
  common = dict(num_canaries=128, run_seed=3, audit_seed=3, client_learning_rate=1.0,
                progress=False, insecure_reproducible_noise=True, bootstrap=300)
  silent = record_canaries.run_record_audit(
      model_fn, fed, plan, output_dir=str(tmp_path / "noise0"), noise_multiplier_scale=0.0,
      **common)
  for level in silent.levels:
    held, ins = np.array(level["held_out_cosines"]), np.array(level["inserted_cosines"])
    assert ins.mean() - held.mean() > 3 * held.std()
    assert np.median(ins) > held.max()
    assert level["flagged"]
  correct = record_canaries.run_record_audit(
      model_fn, fed, plan, output_dir=str(tmp_path / "correct"), **common)
  broken = record_canaries.run_record_audit(
      model_fn, fed, plan, output_dir=str(tmp_path / "broken"), noise_multiplier_scale=0.25,
      **common)
  strict_ok, strict_broken = correct.levels[0], broken.levels[0]
  assert strict_ok["level"] == strict_broken["level"] == 1.5
  # The ledger reports the same ε for both: it only knows the plan's σ.
  assert strict_ok["bound"] == strict_broken["bound"] <= 1.5 + 1e-9
  assert not correct.flagged
  assert strict_broken["flagged"] and strict_broken["ci_low"] > strict_broken["bound"]
  assert strict_broken["epsilon"] > strict_ok["epsilon"]
  # Utility is exposed for a with/without comparison; the ledger never saw a canary:
  # it is the plan's ledger charged for the rounds run (Type II, λ = 1).
  assert correct.accountant.rates.size == 80
  ledger = plan.new_accountant()
  for _ in range(E2E_PARAMS.rounds):
    ledger.begin_round()
    ledger.end_round(fed.client_ids)
  np.testing.assert_array_equal(correct.accountant.spent(), ledger.spent())
  assert correct.final_accuracy is None  # no evaluate_fn given
  assert len(correct.summary_rows()) == 2


@pytest.mark.slow
def test_audit_flags_the_strict_levels_rates_times_8(tff_runtime, tmp_path):
  """(e) The other broken configuration: the strict level's q ×8 in the mechanism only.

  σ = 2, τ = 5, T = 10, levels (1, 4): the strict level's q ≈ 0.083 becomes
  0.66 for its real records and canaries, while the ledger keeps 0.083.
  Flake considerations as above (seeded; over seeds 0-3 the correct run's CI
  lower end was 0.007-0.013 against a bound of 1, the broken run's 2.5-4.7).
  """
  rng = np.random.default_rng(0)
  x = {f"c{c}": rng.normal(size=(40, E2E_NF)).astype(np.float32) for c in range(2)}
  y = {f"c{c}": rng.integers(0, 10, 40).astype(np.int32) for c in range(2)}
  fed = record_level.RecordFederation(x, y)
  params = TwoStageParams(noise_multiplier=2.0, local_steps=5, rounds=10, client_rate=1.0,
                          delta=1e-3)
  plan = make_record_plan("ours", _budgets(fed, (1.0, 4.0)), params, clip_norm=1.0,
                          estimator="exact")
  _, _, model_fn = _e2e_setup()
  common = dict(num_canaries=128, run_seed=0, audit_seed=0, client_learning_rate=1.0,
                progress=False, insecure_reproducible_noise=True, bootstrap=300)
  correct = record_canaries.run_record_audit(
      model_fn, fed, plan, output_dir=str(tmp_path / "correct"), **common)
  broken = record_canaries.run_record_audit(
      model_fn, fed, plan, output_dir=str(tmp_path / "broken"), rate_scale={1.0: 8.0},
      **common)
  ok, bad = correct.levels[0], broken.levels[0]
  assert ok["level"] == bad["level"] == 1.0 and ok["bound"] == bad["bound"] <= 1.0 + 1e-9
  assert bad["mechanism_rate"] == pytest.approx(min(1.0, 8 * ok["rate"]))
  assert not ok["flagged"] and bad["flagged"]
  # The loose level's mechanism is unchanged: not flagged either way.
  assert not correct.levels[1]["flagged"] and not broken.levels[1]["flagged"]
