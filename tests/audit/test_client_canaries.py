"""Canary clients: plan, sampling, and their exact contribution inside a TFF round."""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp.audit import client_canaries
from tff_idp.audit import directions
from tff_idp.engine.sampling import PoissonClientSampler
from tff_idp.idp_fedavg.process import build_idp_fedavg_process


def test_plan_splits_groups_equally_and_halves():
  plan = client_canaries.make_canary_plan(12, [0.1, 0.2, 0.3], [5, 0, 7], audit_seed=3)
  assert plan.num_canaries == 12
  assert sorted(set(plan.groups.tolist())) == [0, 2]  # the empty group gets none
  for p in (0, 2):
    members = plan.groups == p
    assert members.sum() == 6 and plan.inserted[members].sum() == 3
    assert np.allclose(plan.rates[members], [0.1, 0.2, 0.3][p])
  again = client_canaries.make_canary_plan(12, [0.1, 0.2, 0.3], [5, 0, 7], audit_seed=3)
  assert np.array_equal(plan.inserted, again.inserted)
  assert np.array_equal(plan.seeds, again.seeds)
  assert len(set(map(tuple, plan.seeds.tolist()))) == 12


@pytest.mark.parametrize("k", [0, -2, 3, 10])
def test_plan_rejects_unequal_splits_with_advice(k):
  with pytest.raises(ValueError, match="multiple of 4"):
    client_canaries.make_canary_plan(k, [0.1, 0.2], [5, 7])


def test_sampler_keeps_real_cohorts_and_never_samples_held_out():
  ids = [f"c{i}" for i in range(50)]
  rates = np.full(50, 0.3)
  plain = PoissonClientSampler(ids, rates, seed=7)
  plan = client_canaries.make_canary_plan(40, [1.0], [50], audit_seed=1)
  audited = client_canaries.CanarySampler(PoissonClientSampler(ids, rates, seed=7), plan)
  seen = collections.Counter()
  for _ in range(30):
    cohort = audited.sample()
    real = [c for c in cohort if plan.index_of(c) is None]
    assert real == plain.sample()
    assert audited.last_real_count == len(real)
    seen.update(plan.index_of(c) for c in cohort if plan.index_of(c) is not None)
  # Rate 1 for the inserted half: every inserted canary every round, no held-out one.
  assert set(seen) == set(np.flatnonzero(plan.inserted).tolist())
  assert all(v == 30 for v in seen.values())
  state = audited.get_state()
  first = audited.sample()
  audited.set_state(state)
  assert audited.sample() == first


def test_broken_control_rate_factor_multiplies_one_group():
  plan = client_canaries.make_canary_plan(400, [0.05, 0.05], [10, 10], audit_seed=0)
  sampler = client_canaries.CanarySampler(
      PoissonClientSampler(["a"], [0.0], seed=0), plan, canary_rate_factors=[8.0, 1.0])
  counts = np.zeros(2)
  for _ in range(200):
    for c in sampler.sample():
      counts[plan.groups[plan.index_of(c)]] += 1
  # 100 inserted per group: E = 200·100·0.4 = 8000 vs 1000 (Poisson sd < 90).
  assert 7600 < counts[0] < 8400 and 850 < counts[1] < 1150


def _tiny_process(noise: float, client_lr: float, scale: bool = False):
  keras_builder = lambda: models.build_logistic_regression(4, 3, seed=0)  # noqa: E731
  model_fn = models.tff_model_fn(keras_builder, models.input_spec_for((4,)))
  return build_idp_fedavg_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(client_lr),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
      noise_multiplier=noise, expected_clients_per_round=2.0,
      per_client_clip_scale=scale, canary_client_work=client_canaries.build_canary_client_work,
      aggregator_kwargs=dict(initial_clip=0.5, noise_seed=1))


def _dataset(n: int, seed: int):
  rng = np.random.default_rng(seed)
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=rng.normal(size=(n, 4)).astype(np.float32),
      y=rng.integers(0, 3, n).astype(np.int32))).batch(4)


@pytest.mark.parametrize("scale", [False, True])
def test_canary_adds_exactly_its_clipped_direction(tff_runtime, scale):
  """Noise 0, a real client that cannot move (lr 0) and one canary: Δθ = s·C·u/c."""
  del tff_runtime
  from tff_idp.idp_fedavg.process import scaled_client_data  # pylint: disable=g-import-not-at-top
  process = _tiny_process(noise=0.0, client_lr=0.0, scale=scale)
  plan = client_canaries.make_canary_plan(2, [1.0], [1], group_clip_scales=[0.5 if scale
                                                                               else 1.0])
  wrap = (lambda ds, s=1.0: scaled_client_data(ds, s)) if scale else (lambda ds: ds)
  inputs = client_canaries.with_canary_inputs(
      lambda cid, r: wrap(_dataset(8, 0)), plan, lambda: wrap(_dataset(0, 1)))
  inserted = int(np.flatnonzero(plan.inserted)[0])
  cohort = ["real0", plan.ids[inserted]]
  state = process.initialize()
  output = process.next(state, [inputs(c, 1) for c in cohort])
  delta = client_canaries.model_delta(process, output.state)
  specs = directions.leaf_specs(delta)
  u = [t.numpy() for t in directions.canary_direction(tf.constant(plan.seeds[inserted]), specs)]
  s = 0.5 if scale else 1.0
  for d, ui in zip(delta, u):
    np.testing.assert_allclose(d, s * 0.5 * ui / 2.0, atol=1e-7)
  diag = output.metrics["aggregator"]["diagnostics"] if "diagnostics" in output.metrics[
      "aggregator"] else None
  assert diag is not None and diag["canaries"] == 1.0 and diag["num_clients"] == 0.0
  # No real update present and the canary's bit left out: the count sum is 0.
  assert output.metrics["aggregator"]["unclipped_fraction"] == pytest.approx(0.5)
  cos = client_canaries.canary_cosines_of_run(process, output.state, plan)
  assert cos[inserted] == pytest.approx(1.0, abs=1e-6)
  assert abs(cos[1 - inserted]) < 0.5


def test_real_clients_unchanged_by_canary_wrapper(tff_runtime):
  """Without canaries in the cohort, the audited process equals the plain one."""
  del tff_runtime
  keras_builder = lambda: models.build_logistic_regression(4, 3, seed=0)  # noqa: E731
  model_fn = models.tff_model_fn(keras_builder, models.input_spec_for((4,)))
  kwargs = dict(client_optimizer=tff.learning.optimizers.build_sgdm(0.5),
                server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
                noise_multiplier=0.5, expected_clients_per_round=2.0,
                aggregator_kwargs=dict(initial_clip=0.5, noise_seed=1,
                                       clipped_count_stddev=1.0))
  plain = build_idp_fedavg_process(model_fn, **kwargs)
  audited = build_idp_fedavg_process(model_fn, canary_client_work=client_canaries.build_canary_client_work, **kwargs)
  plan = client_canaries.make_canary_plan(2, [1.0], [1])
  inputs = client_canaries.with_canary_inputs(lambda cid, r: _dataset(8, int(cid[-1])), plan,
                                              lambda: _dataset(0, 1))
  a = plain.next(plain.initialize(), [_dataset(8, 0), _dataset(8, 1)])
  b = audited.next(audited.initialize(), [inputs("c0", 1), inputs("c1", 1)])
  for x, y in zip(plain.get_model_weights(a.state).trainable,
                  audited.get_model_weights(b.state).trainable):
    np.testing.assert_allclose(x, y, atol=1e-6)
  assert (a.metrics["aggregator"]["unclipped_fraction"]
          == pytest.approx(b.metrics["aggregator"]["unclipped_fraction"]))
