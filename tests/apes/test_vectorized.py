"""APES's vectorized client work equals the per-user TFF client work (issue 35).

Same users, same ε, same secret seeds: every user's report and the whole
round (analyzer, de-bias, server step) must equal the TFF process's within
float tolerance, for users of different sizes (an empty one included), a
cohort of one, both client input kinds, several rounds (the round number is
folded into each seed), and a cohort cut into chunks. The reports are
compared per user, so a vectorized randomizer run at another user's ε or
seed, or without the round folded in, fails here.
"""
import collections

import numpy as np
import pytest

tff = pytest.importorskip("tensorflow_federated")
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_idp import models  # pylint: disable=g-import-not-at-top
from tff_idp.apes import (LdpClientArrays, VectorizedLdpUpdate, build_apes_driver_process,  # pylint: disable=g-import-not-at-top
                         build_ldp_client_work, make_client_input)
from tff_idp.engine.in_process_round import InProcessLearningProcess  # pylint: disable=g-import-not-at-top
from tff_idp.errors import ClientInputError, ToolkitValueError  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.usefixtures("tff_runtime")

FEATURES, CLASSES, C, LR, MU, EPOCHS = 5, 3, 0.1, 0.5, 0.1, 2
MODEL_FN = models.tff_model_fn(
    lambda: models.build_logistic_regression(FEATURES, CLASSES, seed=1),
    models.input_spec_for((FEATURES,)))
SIZES = (12, 0, 5, 21, 1)
EPSILONS = (0.05, 0.5, 1.0, 4.0, 0.3)
KEEP = {"sparse_clip_laplace": 4, "sparse_clip_laplace_top_b": 4}


def _users(sizes=SIZES, epsilons=EPSILONS, seed_base=7):
  rng = np.random.default_rng(0)
  users = []
  for i, (n, eps) in enumerate(zip(sizes, epsilons)):
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, n).astype(np.int32)
    users.append(LdpClientArrays(collections.OrderedDict(x=x, y=y), 8, eps, [seed_base, i]))
  return users


def _flat(values):
  return np.concatenate([np.ravel(v) for v in values])


def _settings(mechanism):
  return dict(mechanism=mechanism, client_learning_rate=LR, clip=C, epsilons=list(EPSILONS),
              keep=KEEP.get(mechanism), local_epochs=EPOCHS, proximal_strength=MU)


def _client_work(mechanism, optimizer):
  return build_ldp_client_work(MODEL_FN, mechanism=mechanism, client_optimizer=optimizer,
                               clip=C, keep=KEEP.get(mechanism), proximal_strength=MU,
                               local_epochs=EPOCHS)


@pytest.mark.parametrize("mechanism", ["none", "clip_laplace", "laplace",
                                       "sparse_clip_laplace", "sparse_clip_laplace_top_b"])
def test_every_users_report_equals_its_tff_client_work(mechanism):
  """Per user: the vectorized report equals the TFF client work's, rounds 0 and 3."""
  optimizer = tff.learning.optimizers.build_sgdm(learning_rate=LR)
  work = _client_work(mechanism, optimizer)
  vectorized = VectorizedLdpUpdate(MODEL_FN, mechanism=mechanism, client_optimizer=optimizer,
                                   clip=C, keep=KEEP.get(mechanism), proximal_strength=MU,
                                   local_epochs=EPOCHS)
  weights = tff.learning.models.ModelWeights.from_model(MODEL_FN())
  users = _users()
  for round_num in (0, 3):
    theirs = work.next(np.int64(round_num), [weights] * len(users),
                       [u.client_input() for u in users]).result
    ours = vectorized(np.int64(round_num), weights, users)
    for user, (a, (b, weight, stats)) in enumerate(zip(theirs, ours)):
      np.testing.assert_allclose(_flat(b["ldp_report"]), _flat(a.update["ldp_report"]),
                                 atol=2e-6, err_msg=f"user {user}, round {round_num}")
      assert weight == a.update_weight == 1.0 and stats is None


@pytest.mark.parametrize("mechanism", ["clip_laplace", "sparse_clip_laplace"])
def test_rounds_equal_the_tff_process(mechanism):
  """Whole rounds: weights, analyzer measurements and the client work's state."""
  tff_process = build_apes_driver_process(MODEL_FN, client_execution="tff",
                                          **_settings(mechanism))
  vectorized = build_apes_driver_process(MODEL_FN, client_execution="vectorized",
                                         **_settings(mechanism))
  assert isinstance(vectorized, InProcessLearningProcess)
  assert isinstance(tff_process, tff.learning.templates.LearningProcess)
  # One initial state for both: each initialize() draws its own secret seed-counter start.
  state_a = state_b = tff_process.initialize()
  start = state_a.client_work
  users = _users()
  for round_num in range(3):
    # The TFF client work's own inputs work too (round 1).
    inputs = [u.client_input() for u in users] if round_num == 1 else users
    out_a = tff_process.next(state_a, [u.client_input() for u in users])
    out_b = vectorized.next(state_b, inputs)
    state_a, state_b = out_a.state, out_b.state
    # The reports carry Laplace noise of scale up to ~4 (ε = 0.05); their float32
    # rounding, summed in another order, once moved a weight by 1.3e-6 (a full-suite
    # run on 2026-11-29, at the old atol of 1e-6: each run draws its own secret
    # seed-counter start, so its own noise). Another seed or ε moves them by > 1e-2.
    np.testing.assert_allclose(_flat(state_b.global_model_weights.trainable),
                               _flat(state_a.global_model_weights.trainable), atol=1e-5)
    assert state_a.client_work == state_b.client_work == start + round_num + 1
    assert out_b.metrics["client_work"] == out_a.metrics["client_work"] == ()
    assert out_b.metrics["aggregator"]["reports"] == len(users)
    np.testing.assert_allclose(out_b.metrics["aggregator"]["clamped_fraction"],
                               out_a.metrics["aggregator"]["clamped_fraction"], atol=0.02)


def test_a_cohort_of_one_and_chunks():
  optimizer = tff.learning.optimizers.build_sgdm(learning_rate=LR)
  kwargs = dict(mechanism="clip_laplace", client_optimizer=optimizer, clip=C,
                proximal_strength=MU, local_epochs=EPOCHS)
  whole = VectorizedLdpUpdate(MODEL_FN, **kwargs)
  chunked = VectorizedLdpUpdate(MODEL_FN, max_chunk_clients=2, **kwargs)
  weights = tff.learning.models.ModelWeights.from_model(MODEL_FN())
  users = _users()
  a = whole(np.int64(2), weights, users)
  b = chunked(np.int64(2), weights, users)
  for (ra, _, _), (rb, _, _) in zip(a, b):
    np.testing.assert_allclose(_flat(ra["ldp_report"]), _flat(rb["ldp_report"]), atol=1e-6)
  alone = whole(np.int64(2), weights, users[3:4])
  np.testing.assert_allclose(_flat(alone[0][0]["ldp_report"]), _flat(a[3][0]["ldp_report"]),
                             atol=1e-6)
  assert whole(np.int64(0), weights, []) == []


def test_fresh_noise_every_round_and_per_user_seeds():
  """Same seeds, next round: new noise. Same data, another seed: other noise."""
  optimizer = tff.learning.optimizers.build_sgdm(learning_rate=LR)
  update = VectorizedLdpUpdate(MODEL_FN, mechanism="clip_laplace", client_optimizer=optimizer,
                               clip=C, proximal_strength=MU, local_epochs=EPOCHS)
  weights = tff.learning.models.ModelWeights.from_model(MODEL_FN())
  users = _users(sizes=(6,) * 5)
  r0 = [_flat(r["ldp_report"]) for r, _, _ in update(np.int64(0), weights, users)]
  r1 = [_flat(r["ldp_report"]) for r, _, _ in update(np.int64(1), weights, users)]
  other = [_flat(r["ldp_report"]) for r, _, _ in
           update(np.int64(0), weights, _users(sizes=(6,) * 5, seed_base=8))]
  for a, b, c in zip(r0, r1, other):
    assert np.mean(a == b) < 0.1 and np.mean(a == c) < 0.1


def test_refusals():
  optimizer = tff.learning.optimizers.build_sgdm(learning_rate=LR)
  update = VectorizedLdpUpdate(MODEL_FN, mechanism="clip_laplace", client_optimizer=optimizer,
                               clip=C)
  weights = tff.learning.models.ModelWeights.from_model(MODEL_FN())
  user = _users()[0]
  two = user.client_input()
  two["privacy"] = two["privacy"].repeat(2)
  with pytest.raises(ClientInputError, match="exactly one"):
    update(np.int64(0), weights, [two])
  with pytest.raises(ClientInputError, match="LdpClientArrays"):
    update(np.int64(0), weights, [user.client_input()["data"]])
  with pytest.raises(ToolkitValueError, match="finite and > 0"):
    LdpClientArrays(user.examples, 8, 0.0, [1, 2])
  with pytest.raises(ToolkitValueError, match="two integers"):
    LdpClientArrays(user.examples, 8, 1.0, [1, 2, 3])
  for bad_batch in (0, True, 2.5, -1):
    with pytest.raises(ToolkitValueError, match="must be an integer >= 1"):
      LdpClientArrays(user.examples, bad_batch, 1.0, [1, 2])
  one = LdpClientArrays(user.examples, 1, 1.0, np.array([1, 2], np.int32))  # batch of one: fine
  assert one.seed.dtype == np.int64 and one.seed.tolist() == [1, 2]  # stored as int64[2]
  with pytest.raises(ToolkitValueError, match="in-process"):
    build_apes_driver_process(MODEL_FN, client_execution="in_process",
                              **_settings("clip_laplace"))
  cnn_fn = models.tff_model_fn(lambda: models.build_pc_mnist_cnn((28, 28, 1), 10),
                               models.input_spec_for((28, 28, 1)))
  with pytest.raises(ValueError, match="Dense layers"):
    build_apes_driver_process(cnn_fn, client_execution="vectorized",
                              **_settings("clip_laplace"))
  assert isinstance(build_apes_driver_process(cnn_fn, **_settings("clip_laplace")),
                    tff.learning.templates.LearningProcess)  # auto: tff


def test_the_tff_computation_gives_the_same_reports_inside_a_client_computation():
  """A silo of users as one TFF client: ``federated_map`` of the cohort computation."""
  optimizer = tff.learning.optimizers.build_sgdm(learning_rate=LR)
  update = VectorizedLdpUpdate(MODEL_FN, mechanism="clip_laplace", client_optimizer=optimizer,
                               clip=C, proximal_strength=MU, local_epochs=EPOCHS)
  weights = tff.learning.models.ModelWeights.from_model(MODEL_FN())
  users = _users()
  comp = update.tff_computation()
  assert str(comp.type_signature.result) == f"<float32[?,{FEATURES},{CLASSES}],float32[?,{CLASSES}]>"

  @tff.federated_computation(tff.FederatedType(comp.type_signature.parameter, tff.CLIENTS))
  def silos(cohorts):
    return tff.federated_map(comp, cohorts)

  [reports] = silos([update.cohort_arguments(3, weights, users)])
  want = update(np.int64(3), weights, users)
  for j, (report, _, _) in enumerate(want):
    np.testing.assert_allclose(_flat([r[j] for r in reports]), _flat(report["ldp_report"]),
                               atol=1e-6)
  with pytest.raises(ToolkitValueError, match="at least one user"):
    update.cohort_arguments(0, weights, [])


def test_defaults_a_plain_weight_list_one_trace_and_a_sigmoid_head():
  """Tests against the survivors of issue 48's mutation run: the defaults are FedProx
  μ = 0.01 and one epoch (as the TFF client work's); ``initial_weights`` may be the trainable
  list itself; one trace serves every cohort; a sigmoid model keeps its own head."""
  optimizer = tff.learning.optimizers.build_sgdm(learning_rate=LR)
  weights = tff.learning.models.ModelWeights.from_model(MODEL_FN())
  users = _users()
  default = VectorizedLdpUpdate(MODEL_FN, mechanism="clip_laplace", client_optimizer=optimizer,
                                clip=C)
  work = build_ldp_client_work(MODEL_FN, mechanism="clip_laplace", client_optimizer=optimizer,
                               clip=C)  # the TFF client work's own defaults
  theirs = work.next(np.int64(2), [weights] * len(users), [u.client_input() for u in users])
  ours = default(np.int64(2), weights, users)
  plain = default(np.int64(2), list(weights.trainable), users)
  for a, (b, _, _), (c, _, _) in zip(theirs.result, ours, plain):
    np.testing.assert_allclose(_flat(b["ldp_report"]), _flat(a.update["ldp_report"]), atol=2e-6)
    np.testing.assert_array_equal(_flat(c["ldp_report"]), _flat(b["ldp_report"]))
  arguments = default.cohort_arguments(2, list(weights.trainable), users[:2])
  assert [np.shape(w) for w in arguments[1]] == [np.shape(w) for w in weights.trainable]
  default(np.int64(3), weights, users[:2])  # another cohort size and batch layout
  assert default._train.experimental_get_tracing_count() == 1  # pylint: disable=protected-access
  binary_fn = models.tff_model_fn(
      lambda: models.build_logistic_regression(FEATURES, 2, head="sigmoid", seed=1),
      models.input_spec_for((FEATURES,)), head="sigmoid")
  binary_users = [LdpClientArrays(collections.OrderedDict(x=u.examples["x"],
                                                          y=u.examples["y"] % 2),
                                  8, u.epsilon, u.seed) for u in users]
  b_work = build_ldp_client_work(binary_fn, mechanism="none", client_optimizer=optimizer)
  b_fast = VectorizedLdpUpdate(binary_fn, mechanism="none", client_optimizer=optimizer)
  b_weights = tff.learning.models.ModelWeights.from_model(binary_fn())
  b_theirs = b_work.next(np.int64(0), [b_weights] * len(users),
                         [u.client_input() for u in binary_users]).result
  for a, (b, _, _) in zip(b_theirs, b_fast(np.int64(0), b_weights, binary_users)):
    np.testing.assert_allclose(_flat(b["ldp_report"]), _flat(a.update["ldp_report"]), atol=2e-6)


def test_the_cohort_is_chunked_by_its_step_counts_bytes_and_the_caps(monkeypatch):
  """The chunk plan gets every user's step count, its bytes and both caps (memory bound)."""
  from tff_idp.engine import cohort_stack  # pylint: disable=g-import-not-at-top
  from tff_idp.engine import stacked_training  # pylint: disable=g-import-not-at-top
  optimizer = tff.learning.optimizers.build_sgdm(learning_rate=LR)
  update = VectorizedLdpUpdate(MODEL_FN, mechanism="clip_laplace", client_optimizer=optimizer,
                               clip=C, max_chunk_bytes=123_456, max_chunk_clients=2)
  seen = []
  real_plan = cohort_stack.plan_chunks

  def spy(steps, per_client_bytes, max_bytes, max_clients):
    seen.append((list(steps), per_client_bytes, max_bytes, max_clients))
    return real_plan(steps, per_client_bytes, max_bytes, max_clients)

  monkeypatch.setattr(cohort_stack, "plan_chunks", spy)
  users = _users()
  weights = tff.learning.models.ModelWeights.from_model(MODEL_FN())
  update(np.int64(0), weights, users)
  batches = [update._unwrap(u)[1] for u in users]  # pylint: disable=protected-access
  per_client = stacked_training.bytes_per_client(
      update._weight_specs, batches, update._widest)  # pylint: disable=protected-access
  assert seen == [([len(b) for b in batches], per_client, 123_456, 2)]
  assert len({len(b) for b in batches}) > 1  # the users' step counts differ
