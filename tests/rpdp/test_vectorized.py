"""rPDP-FL's vectorized client execution (issue 35) equals the per-client DP-SGD.

Every client's record sample and DP-SGD noise come from its seed through
stateless ops, drawn one client at a time inside the vectorized graph, so a
vectorized round must equal the in-process round (itself equal to the TFF
round, ``test_in_process.py``) and the TFF round within float tolerance, for
clients of different sizes with per-record rates, an empty client, a client
whose records are all excluded (q = 0), a cohort of one and chunked cohorts.
Tolerance 1e-5 (float32, the same ops in another order).
"""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp.engine import in_process_round
from tff_idp.rpdp import client_work
from tff_idp.rpdp import record_stats
from tff_idp.rpdp import vectorized

from tests import tree_checks  # pylint: disable=g-bad-import-order

pytestmark = pytest.mark.usefixtures("tff_runtime")

ATOL = 1e-5
SPEC = collections.OrderedDict(x=tf.TensorSpec([None, 6], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))
MLP_FN = models.tff_model_fn(lambda: models.build_mlp(6, 3, hidden=8), SPEC)
BINARY_FN = models.tff_model_fn(lambda: models.build_logistic_regression(6, 2, head="sigmoid"),
                                SPEC, head="sigmoid")


def _client(i, round_num, n=None, q=None, classes=3):
  rng = np.random.default_rng(100 * round_num + i)
  n = 12 + 3 * i if n is None else n
  return client_work.record_dataset(
      rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, classes, n).astype(np.int32),
      rng.uniform(0.2, 0.9, n) if q is None else np.full(n, q), (i, round_num), batch_size=5)


def _build(execution, model_fn=MLP_FN, head="softmax", **kw):
  return client_work.build_rpdp_fedavg_driver_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.2),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=3,
      noise_multiplier=0.7, clip_norm=1.0, loss_fn=models.per_example_loss(head),
      client_execution=execution, **kw)


def _assert_close(a, b):
  tree_checks.assert_trees_close(a, b, ATOL)


def test_rounds_equal_the_in_process_and_tff_rounds():
  per_client, fast, reference = _build("in_process", parallel_clients=1), _build("vectorized"), \
      _build("tff")
  assert isinstance(fast, in_process_round.InProcessLearningProcess)
  assert fast.cohort_update is not None
  state = fast_state = per_client.initialize()
  for r in range(3):
    cohort = lambda: [_client(i, r) for i in range(4)] + [_client(4, r, n=0),  # noqa: E731
                                                          _client(5, r, q=0.0)]
    ref, out = per_client.next(state, cohort()), fast.next(fast_state, cohort())
    _assert_close(ref.state, out.state)
    _assert_close(ref.metrics, out.metrics)
    if r == 0:
      _assert_close(reference.next(state, cohort()).state, out.state)
    assert out.metrics["client_work"]["train"]["participating_clients"] == 4.0
    state, fast_state = ref.state, out.state


def test_every_clients_update_and_statistics_and_chunks():
  update = vectorized.VectorizedRecordDpUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=3, noise_multiplier=0.7,
      clip_norm=1.0, loss_fn=models.per_example_loss("softmax"))
  chunked = vectorized.VectorizedRecordDpUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=3, noise_multiplier=0.7,
      clip_norm=1.0, loss_fn=models.per_example_loss("softmax"), max_chunk_clients=2)
  per_client = _build("in_process", parallel_clients=1).client_updates[0]
  weights = tff.learning.models.ModelWeights.from_model(MLP_FN())
  # A client whose expected batch Σq is under one record (0.6) still trains.
  cohort = [_client(i, 2) for i in range(3)] + [_client(3, 2, n=0), _client(4, 2, q=0.0),
                                                _client(5, 2, n=2, q=0.3)]
  whole, parts = update(np.int64(2), weights, cohort), chunked(np.int64(2), weights, cohort)
  assert np.any(whole[5][0][0] != 0.0)
  for i, dataset in enumerate(cohort):
    want = per_client(np.int64(2), weights, dataset)
    _assert_close(list(want[0]), whole[i][0])
    assert want[1] == whole[i][1]
    _assert_close(dict(want[2]), dict(whole[i][2]))
    _assert_close(whole[i][0], parts[i][0])
  alone = update(np.int64(2), weights, cohort[1:2])
  _assert_close(alone[0][0], whole[1][0])
  assert update(np.int64(0), weights, []) == []


def test_fresh_noise_every_round_from_the_same_datasets():
  update = vectorized.VectorizedRecordDpUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=1, noise_multiplier=1.0,
      clip_norm=1.0, loss_fn=models.per_example_loss("softmax"))
  weights = tff.learning.models.ModelWeights.from_model(MLP_FN())
  cohort = [_client(i, 0, q=1.0) for i in range(2)]  # every record sampled: only noise differs
  first = update(np.int64(0), weights, cohort)
  second = update(np.int64(1), weights, cohort)
  for a, b in zip(first, second):
    assert not np.allclose(a[0][0], b[0][0])


def test_a_binary_model():
  per_client = _build("in_process", BINARY_FN, "sigmoid", parallel_clients=1)
  fast = _build("vectorized", BINARY_FN, "sigmoid")
  state = per_client.initialize()
  cohort = lambda: [_client(i, 0, classes=2) for i in range(3)]  # noqa: E731
  _assert_close(per_client.next(state, cohort()).state, fast.next(state, cohort()).state)


def test_what_it_does_not_serve_is_refused_and_auto_falls_back():
  weight_fn = lambda losses, thresholds: tf.ones_like(losses)  # noqa: E731
  assert vectorized.vectorizable(MLP_FN, models.per_example_loss("softmax"))
  assert not vectorized.vectorizable(MLP_FN, lambda y, z: z[:, 0])
  assert not vectorized.vectorizable(MLP_FN, models.per_example_loss("softmax"), weight_fn)
  assert not vectorized.vectorizable(BINARY_FN, models.per_example_loss("softmax"))
  with pytest.raises(ValueError, match="vectorized"):
    _build("vectorized", example_weight_fn=weight_fn)
  auto = _build("auto", example_weight_fn=weight_fn)
  assert not isinstance(auto, in_process_round.InProcessLearningProcess) or \
      auto.cohort_update is None
  assert _build("auto").cohort_update is not None


def test_record_arrays_are_the_same_client_as_its_dataset():
  """What the runner hands the vectorized execution: arrays, the same records, rates and seed."""
  from tff_idp.rpdp import records  # pylint: disable=g-import-not-at-top
  update = vectorized.VectorizedRecordDpUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=3, noise_multiplier=0.7,
      clip_norm=1.0, loss_fn=models.per_example_loss("softmax"))
  weights = tff.learning.models.ModelWeights.from_model(MLP_FN())
  rng = np.random.default_rng(3)
  clients = [records.RecordArrays(rng.normal(size=(n, 6)).astype(np.float32),
                                  rng.integers(0, 3, n).astype(np.int32),
                                  rng.uniform(0.1, 0.9, n), (5, n)) for n in (7, 0, 11)]
  from_arrays = update(np.int64(4), weights, clients)
  from_datasets = update(np.int64(4), weights, [c.dataset(batch_size=4) for c in clients])
  for a, b in zip(from_arrays, from_datasets):
    _assert_close(a[0], b[0])
    assert a[1] == b[1]
  with pytest.raises(ValueError, match="two integers"):
    records.RecordArrays(clients[0].x, clients[0].y, clients[0].q, (1, 2, 3))
  with pytest.raises(ValueError, match="one row per record"):
    records.RecordArrays(clients[0].x, clients[0].y[:3], clients[0].q, (1, 2))
  from tff_idp.errors import ClientInputError  # pylint: disable=g-import-not-at-top
  with pytest.raises(ClientInputError, match="RecordArrays"):
    update(np.int64(0), weights, [clients[0].x])


def test_the_tff_computation_gives_the_same_updates_inside_a_client_computation():
  """A silo of clients as one TFF client: ``federated_map`` of the cohort computation.

  Every client's Δ and statistics equal what ``__call__`` (itself equal to the
  per-client DP-SGD) gives; a new round draws new noise from the same datasets;
  an empty cohort is refused.
  """
  update = vectorized.VectorizedRecordDpUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=2, noise_multiplier=0.7,
      clip_norm=1.0, loss_fn=models.per_example_loss("softmax"))
  weights = tff.learning.models.ModelWeights.from_model(MLP_FN())
  cohort = [_client(i, 0) for i in range(3)] + [_client(3, 0, n=0)]
  comp = update.tff_computation()

  @tff.federated_computation(tff.FederatedType(comp.type_signature.parameter, tff.CLIENTS))
  def silos(cohorts):
    return tff.federated_map(comp, cohorts)

  [(delta, stats)] = silos([update.cohort_arguments(4, weights, cohort)])
  want = update(np.int64(4), weights, cohort)
  for j, (client_delta, weight, client_stats) in enumerate(want):
    _assert_close(client_delta, [d[j] for d in delta])
    assert weight == np.float32(stats["steps"][j] > 0)
    for key in record_stats.STAT_KEYS:
      np.testing.assert_allclose(client_stats[key], stats[key][j], atol=ATOL)
  [(next_round, _)] = silos([update.cohort_arguments(5, weights, cohort)])
  assert not np.allclose(next_round[0][0], delta[0][0])
  with pytest.raises(ValueError, match="at least one client"):
    update.cohort_arguments(0, weights, [])


def test_the_update_itself_refuses_weights_serves_the_default_loss_and_traces_once():
  """One trace serves every cohort (its clients and record counts are dynamic); the class
  refuses per-example weights on its own, not only through the builder."""
  weight_fn = lambda losses, thresholds: tf.ones_like(losses)  # noqa: E731
  assert vectorized.vectorizable(MLP_FN)  # the default loss is the softmax head's
  assert not vectorized.vectorizable(BINARY_FN)
  with pytest.raises(ValueError, match="no per-example weights"):
    vectorized.VectorizedRecordDpUpdate(
        MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=1, noise_multiplier=1.0,
        clip_norm=1.0, loss_fn=models.per_example_loss("softmax"), example_weight_fn=weight_fn)
  update = vectorized.VectorizedRecordDpUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=1, noise_multiplier=1.0,
      clip_norm=1.0)
  weights = tff.learning.models.ModelWeights.from_model(MLP_FN())
  update(np.int64(0), weights, [_client(i, 0) for i in range(2)])
  update(np.int64(1), weights, [_client(i, 1, n=20 + 3 * i) for i in range(4)])
  assert update._train.experimental_get_tracing_count() == 1  # pylint: disable=protected-access


def test_a_plain_weight_list_the_chunk_plan_and_a_clip_below_the_gradient_norms(monkeypatch):
  """Tests against survivors of issue 48's mutation run: ``initial_weights`` may be the
  trainable list; the chunk plan gets the clients' record counts, their bytes and both caps;
  a clip bound of 0.05 (most per-record gradient norms above it, some below 1) clips as the
  per-client step does."""
  from tff_idp.engine import cohort_stack  # pylint: disable=g-import-not-at-top
  update = vectorized.VectorizedRecordDpUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=2, noise_multiplier=0.7,
      clip_norm=0.05, loss_fn=models.per_example_loss("softmax"), max_chunk_bytes=654_321,
      max_chunk_clients=2)
  per_client = client_work.build_rpdp_fedavg_driver_process(
      MLP_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.2),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=2,
      noise_multiplier=0.7, clip_norm=0.05, loss_fn=models.per_example_loss("softmax"),
      client_execution="in_process", parallel_clients=1).client_updates[0]
  seen = []
  real_plan = cohort_stack.plan_chunks

  def spy(sizes, per_client_bytes, max_bytes, max_clients):
    seen.append((list(sizes), per_client_bytes, max_bytes, max_clients))
    return real_plan(sizes, per_client_bytes, max_bytes, max_clients)

  monkeypatch.setattr(cohort_stack, "plan_chunks", spy)
  weights = tff.learning.models.ModelWeights.from_model(MLP_FN())
  cohort = [_client(i, 1, q=0.9) for i in range(3)]
  whole = update(np.int64(1), weights, cohort)
  plain = update(np.int64(1), list(weights.trainable), cohort)
  for i, dataset in enumerate(cohort):
    _assert_close(list(per_client(np.int64(1), weights, dataset)[0]), whole[i][0])
    _assert_close(whole[i][0], plain[i][0])
  sizes = [12, 15, 18]
  assert [s[0] for s in seen] == [sizes, sizes] and all(s[2:] == (654_321, 2) for s in seen)
  assert all(s[1] == seen[0][1] and s[1] is not None for s in seen)
  arguments = update.cohort_arguments(1, list(weights.trainable), cohort[:1])
  assert [np.shape(w) for w in arguments[0]] == [np.shape(w) for w in weights.trainable]


def test_one_local_step_gives_an_active_client_weight_one():
  """The 0/1 update weight is 1 for a client that trained (τ = 1 here), 0 for Σq = 0."""
  update = vectorized.VectorizedRecordDpUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=1, noise_multiplier=0.7,
      clip_norm=1.0)
  weights = tff.learning.models.ModelWeights.from_model(MLP_FN())
  out = update(np.int64(0), weights, [_client(0, 0), _client(1, 0, q=0.0), _client(2, 0, n=0)])
  assert [w for _, w, _ in out] == [1.0, 0.0, 0.0]
  assert out[0][2]["steps"] == 1.0 and out[1][2]["steps"] == 0.0
