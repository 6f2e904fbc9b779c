"""engine.in_process_round: the cohort's statistics and updates summed in process (issue 35).

A vectorized round hands the server step the cohort's training statistics
already summed (``stats_at_server=True``); the sum must be what
``tff.federated_sum`` gives, leaf by leaf in each leaf's dtype, and zeros for
a round that sampled no client (Poisson sampling can). With DP, the updates
too arrive summed (a presummed aggregation): a round of no client must still
release the TFF round's noise.
"""
import collections

import numpy as np
import pytest

tff = pytest.importorskip("tensorflow_federated")
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_idp import models  # pylint: disable=g-import-not-at-top
from tff_idp.engine import in_process_round  # pylint: disable=g-import-not-at-top
from tff_idp.idp_fedavg import process  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.usefixtures("tff_runtime")

STATS_TYPE = tff.types.tensorflow_to_type(collections.OrderedDict(
    accuracy=[tf.TensorSpec([], tf.float32), tf.TensorSpec([], tf.float32)],
    num_examples=[tf.TensorSpec([], tf.int64)]))


def test_the_sum_is_the_federated_sum_in_each_leafs_dtype():
  stats = [collections.OrderedDict(accuracy=[np.float32(a), np.float32(b)],
                                   num_examples=[np.int64(n)])
           for a, b, n in [(1.5, 2.0, 3), (0.25, 4.0, 5), (2.0, 1.0, 0)]]
  summed = in_process_round.sum_client_stats(stats, STATS_TYPE)

  @tff.federated_computation(tff.FederatedType(STATS_TYPE, tff.CLIENTS))
  def federated_sum(values):
    return tff.federated_sum(values)

  want = federated_sum(stats)
  assert summed["accuracy"][0] == pytest.approx(3.75) and summed["accuracy"][1] == 7.0
  assert summed["num_examples"][0] == 8 and summed["num_examples"][0].dtype == np.int64
  np.testing.assert_allclose(np.asarray(summed["accuracy"]), np.asarray(want["accuracy"]))
  assert summed["num_examples"][0] == want["num_examples"][0]


def test_no_client_sums_to_zeros():
  summed = in_process_round.sum_client_stats([], STATS_TYPE)
  assert [float(v) for v in summed["accuracy"]] == [0.0, 0.0]
  assert int(summed["num_examples"][0]) == 0


VECTOR_TYPE = tff.types.tensorflow_to_type(collections.OrderedDict(
    v=tf.TensorSpec([2], tf.float32), n=tf.TensorSpec([], tf.int32)))


def test_vector_and_int32_leaves_sum_per_element_in_their_dtype():
  """Leaves of shape [2] sum element by element; int32 stays int32 (numpy alone would sum
  it as int64); no client gives zeros of each leaf's shape and dtype."""
  stats = [collections.OrderedDict(v=np.array([1.0, 2.0], np.float32), n=np.int32(3)),
           collections.OrderedDict(v=np.array([0.5, -4.0], np.float32), n=np.int32(4))]
  summed = in_process_round.sum_client_stats(stats, VECTOR_TYPE)
  assert list(summed) == ["v", "n"]
  np.testing.assert_array_equal(summed["v"], np.array([1.5, -2.0], np.float32))
  assert summed["v"].dtype == np.float32 and summed["v"].shape == (2,)
  assert summed["n"] == 7 and summed["n"].dtype == np.int32
  one = in_process_round.sum_client_stats(stats[:1], VECTOR_TYPE)
  np.testing.assert_array_equal(one["v"], np.array([1.0, 2.0], np.float32))
  assert one["n"] == 3 and one["n"].dtype == np.int32
  empty = in_process_round.sum_client_stats([], VECTOR_TYPE)
  assert empty["v"].shape == (2,) and empty["v"].dtype == np.float32
  assert not np.any(empty["v"])
  assert np.asarray(empty["n"]).dtype == np.int32 and np.asarray(empty["n"]).shape == ()
  assert empty["n"] == 0


SPEC = collections.OrderedDict(x=tf.TensorSpec([None, 4], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))
LOGREG_FN = models.tff_model_fn(lambda: models.build_logistic_regression(4, 3), SPEC)


def _flat(tree):
  return np.concatenate([np.ravel(t) for t in tf.nest.flatten(tree)])


@pytest.mark.parametrize("noise", [None, 0.5], ids=["nonprivate", "dp_presummed"])
def test_a_vectorized_round_with_no_sampled_client_equals_the_tff_round(noise):
  """Poisson sampling can pick no client: the round still runs, and with DP (the presummed
  DP mean: zero sums here) it releases the same noised model and measurements as TFF's."""
  kwargs = dict(client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
                server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
                noise_multiplier=noise, expected_clients_per_round=2,
                aggregator_kwargs=(None if noise is None
                                   else dict(noise_seed=3, clipped_count_stddev=1.0)))
  vectorized = process.build_idp_fedavg_driver_process(LOGREG_FN,
                                                       client_execution="vectorized", **kwargs)
  tff_process = process.build_idp_fedavg_driver_process(LOGREG_FN, client_execution="tff",
                                                        **kwargs)
  assert (vectorized.presummed_aggregation is None) == (noise is None)
  # The non-private mean gets the cohort as one client (issue 49); the DP mean presums.
  assert vectorized.collapse_weighted_mean == (noise is None)
  state = tff_process.initialize()
  a, b = tff_process.next(state, []), vectorized.next(state, [])
  assert tf.nest.map_structure(lambda *_: None, a.metrics) == \
      tf.nest.map_structure(lambda *_: None, b.metrics)
  np.testing.assert_allclose(_flat(a.metrics), _flat(b.metrics), rtol=1e-6)
  np.testing.assert_allclose(_flat(a.state.global_model_weights.trainable),
                             _flat(b.state.global_model_weights.trainable), rtol=1e-6)
  if noise is not None:  # the noise moved the model although no client took part
    assert np.any(_flat(b.state.global_model_weights.trainable)
                  != _flat(state.global_model_weights.trainable))


def test_a_presummed_aggregation_takes_its_statistics_summed():
  """A server step on the cohort's sums with statistics still per client is refused."""
  factory = process.AdaptiveClipDPMeanFactory(0.5, 2, clipped_count_stddev=1.0)
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(LOGREG_FN)
  aggregator = factory.create(weights_type.trainable, tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(1.0), weights_type)
  with pytest.raises(ValueError, match="stats_at_server=True"):
    in_process_round.build_server_step(
        aggregator, finalizer, STATS_TYPE, lambda stats: stats, stats_at_server=False,
        presummed=factory.create_presummed(weights_type.trainable))


# The process itself, with scripted client updates (no training): which copy trains which
# client, how their results reach the server step, and the state and metrics it returns.

import functools  # pylint: disable=g-import-not-at-top,g-bad-import-order
import threading  # pylint: disable=g-import-not-at-top,g-bad-import-order

from tff_idp.engine import client_execution  # pylint: disable=g-import-not-at-top


def test_the_parameter_count_and_the_resolved_execution():
  assert in_process_round.num_trainable_parameters(LOGREG_FN) == 4 * 3 + 3
  # 15 parameters: "auto" keeps TFF's client computations; a large model trains here.
  assert in_process_round.resolve_for_model("auto", LOGREG_FN, "", None) == "tff"
  big_fn = models.tff_model_fn(lambda: models.build_logistic_regression(4000, 3), SPEC4000)
  assert in_process_round.num_trainable_parameters(big_fn) >= \
      client_execution.IN_PROCESS_MIN_PARAMETERS
  assert in_process_round.resolve_for_model("auto", big_fn, "", None) == "in_process"
  assert in_process_round.resolve_for_model("auto", big_fn, "canaries", None) == "tff"
  assert in_process_round.resolve_for_model("auto", LOGREG_FN, "", 2,
                                            vectorizable=True) == "vectorized"
  assert in_process_round.resolve_for_model("in_process", LOGREG_FN, "", 3) == "in_process"
  assert in_process_round.resolve_for_model("tff", LOGREG_FN, "the canaries", None) == "tff"
  built = []  # only "auto" builds the model (to count its parameters)
  counted_fn = lambda: built.append(1) or LOGREG_FN()
  assert in_process_round.resolve_for_model("in_process", counted_fn, "", None) == "in_process"
  assert not built
  assert in_process_round.resolve_for_model("auto", counted_fn, "", None) == "tff" and built


def test_the_resolved_execution_is_refused_where_it_cannot_run():
  with pytest.raises(ValueError, match="parallel_clients"):
    in_process_round.resolve_for_model("in_process", LOGREG_FN, "", 0)
  with pytest.raises(ValueError, match="parallel_clients"):
    in_process_round.resolve_for_model("tff", LOGREG_FN, "", 1.5)
  for execution in ("in_process", "vectorized"):
    with pytest.raises(ValueError, match=f"client_execution='{execution}' does not run "
                                         "the canaries; build the audit process with "
                                         "client_execution='tff'"):
      in_process_round.resolve_for_model(execution, LOGREG_FN, "the canaries", None,
                                         vectorizable=True)
  with pytest.raises(ValueError, match="client_execution='vectorized' serves models of Dense"):
    in_process_round.resolve_for_model("vectorized", LOGREG_FN, "", None)
  assert in_process_round.resolve_for_model("vectorized", LOGREG_FN, "", None,
                                            vectorizable=True) == "vectorized"


def test_client_data_options_turn_autotuning_off():
  options = in_process_round.client_data_options()
  assert isinstance(options, tf.data.Options)
  assert options.autotune.enabled is False
  assert tf.data.Options().autotune.enabled is not False


SPEC4000 = collections.OrderedDict(x=tf.TensorSpec([None, 4000], tf.float32),
                                   y=tf.TensorSpec([None], tf.int32))
SCALAR = tff.TensorType(np.float32)


@functools.lru_cache(maxsize=None)
def _parts(noise=None):
  """The reference TFF process and its aggregator, finalizer and aggregator factory (built
  once per module: TFF processes and computations are immutable)."""
  reference = process.build_idp_fedavg_driver_process(
      LOGREG_FN, client_execution="tff",
      client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
      noise_multiplier=noise, expected_clients_per_round=2,
      aggregator_kwargs=None if noise is None else dict(noise_seed=3,
                                                        clipped_count_stddev=1.0))
  factory = process._model_aggregator(  # pylint: disable=protected-access
      noise, 2, None if noise is None else dict(noise_seed=3, clipped_count_stddev=1.0))
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(LOGREG_FN)
  aggregator = factory.create(weights_type.trainable, tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(1.0), weights_type)
  return reference, aggregator, finalizer, factory, weights_type


class _Scripted:
  """A client update whose update is ``client * ones`` with weight ``client + 1``; it logs
  (copy, client, thread name) and checks that it gets the round's hparams and weights as
  tensors."""

  stats_type = SCALAR

  def __init__(self, copy, log, fail_on=None, block=None, unit_weight=False):
    self.copy, self.log, self.fail_on, self.block = copy, log, fail_on, block
    self.unit_weight = unit_weight  # the DP mean reads the weight as a clip scale in (0, 1]

  def __call__(self, hparams, initial_weights, client):
    assert all(isinstance(t, tf.Tensor) for t in tf.nest.flatten(hparams)) and hparams
    assert all(isinstance(t, tf.Tensor) for t in tf.nest.flatten(initial_weights.trainable))
    self.log.append((self.copy, client, threading.current_thread().name))
    if self.block is not None and client == self.block[0]:
      self.block[1].wait(10)
    if client == self.fail_on:
      raise RuntimeError(f"client {client} failed")
    update = [np.full(t.shape, client, np.float32)
              for t in tf.nest.flatten(initial_weights.trainable)]
    return update, np.float32(1 if self.unit_weight else client + 1), np.float32(10 * client)


def _mean_update(clients):
  weights = np.asarray(clients, np.float64) + 1
  return float(np.sum(weights * np.asarray(clients)) / np.sum(weights))


@pytest.mark.parametrize("copies", [1, 3])
def test_each_client_goes_to_copy_i_mod_k_and_the_round_uses_its_results(copies):
  reference, aggregator, finalizer, _, _ = _parts()
  step = in_process_round.build_server_step(aggregator, finalizer, SCALAR, tff.federated_sum)
  log = []
  fast = in_process_round.InProcessLearningProcess(
      reference, [_Scripted(k, log) for k in range(copies)], step)
  assert fast.parallel_clients == copies
  assert fast.reference is reference and fast.server_step is step
  assert fast.initialize is reference.initialize
  assert fast.get_model_weights is reference.get_model_weights
  assert fast.set_model_weights is reference.set_model_weights
  assert fast.get_hparams is reference.get_hparams
  assert fast.set_hparams is reference.set_hparams
  state = fast.initialize()
  clients = [0, 1, 2, 3, 4, 5, 6]
  try:
    out = fast.next(state, clients)
  finally:
    fast.close()
  assert sorted((c, k) for k, c, _ in log) == [(c, c % copies) for c in clients]
  for k in range(copies):  # each copy trains its clients in cohort order, on its one thread
    assert [c for j, c, _ in log if j == k] == clients[k::copies]
    names = {name for j, _, name in log if j == k}
    if copies > 1:
      assert names == {f"tff_idp-client{k}_0"}
    else:  # one copy trains on the caller's thread and keeps no thread pool
      assert names == {threading.current_thread().name}
      assert fast._threads == []  # pylint: disable=protected-access
  # The example-weighted mean of the updates, applied with the server's learning rate 1.
  want = _flat(state.global_model_weights.trainable) - _mean_update(clients)
  np.testing.assert_allclose(_flat(out.state.global_model_weights.trainable), want, rtol=1e-5)
  assert out.metrics["client_work"] == collections.OrderedDict(train=10.0 * sum(clients))
  assert out.metrics["distributor"] == ()
  tff_out = reference.next(state, [])  # same state and metrics structure as TFF's round
  assert list(out.metrics) == list(tff_out.metrics)
  assert tf.nest.map_structure(lambda *_: None, out.metrics["aggregator"]) == \
      tf.nest.map_structure(lambda *_: None, tff_out.metrics["aggregator"])
  assert tf.nest.map_structure(lambda *_: None, out.metrics["finalizer"]) == \
      tf.nest.map_structure(lambda *_: None, tff_out.metrics["finalizer"])
  assert tf.nest.map_structure(lambda *_: None, out.state) == \
      tf.nest.map_structure(lambda *_: None, tff_out.state)
  assert out.state.distributor == state.distributor
  np.testing.assert_allclose(_flat(out.state.finalizer), _flat(tff_out.state.finalizer))
  assert out.state.client_work == state.client_work


def test_the_client_work_state_advances_and_the_measurements_are_mapped():
  reference, aggregator, finalizer, _, _ = _parts()
  step = in_process_round.build_server_step(aggregator, finalizer, SCALAR, tff.federated_sum)
  log = []
  seen = []
  fast = in_process_round.InProcessLearningProcess(
      reference, [_Scripted(0, log)], step,
      next_client_work_state=lambda hp: collections.OrderedDict(
          (k, np.float32(v) * 2) for k, v in hp.items()),
      client_work_measurements=lambda m: seen.append(m) or ("mapped", m))
  state = fast.initialize()
  out = fast.next(state, [1, 2])
  assert seen == [30.0]
  assert out.metrics["client_work"] == ("mapped", 30.0)
  assert list(out.state.client_work) == list(state.client_work)
  for key in state.client_work:
    assert out.state.client_work[key] == pytest.approx(2 * state.client_work[key])


def test_a_server_step_without_statistics_ignores_them():
  reference, aggregator, finalizer, _, _ = _parts()
  step = in_process_round.build_server_step(aggregator, finalizer, None, None)
  assert len(step.type_signature.parameter) == 5
  log = []
  fast = in_process_round.InProcessLearningProcess(reference, [_Scripted(0, log)], step)
  state = fast.initialize()
  out = fast.next(state, [3, 1])
  assert out.metrics["client_work"] == collections.OrderedDict(train=())
  want = _flat(state.global_model_weights.trainable) - _mean_update([3, 1])
  np.testing.assert_allclose(_flat(out.state.global_model_weights.trainable), want, rtol=1e-5)


def test_statistics_summed_at_the_server():
  reference, aggregator, finalizer, _, _ = _parts()
  step = in_process_round.build_server_step(aggregator, finalizer, SCALAR, lambda s: s,
                                            stats_at_server=True)
  assert step.type_signature.parameter[5].placement is tff.SERVER
  fast = in_process_round.InProcessLearningProcess(reference, [_Scripted(0, [])], step)
  out = fast.next(fast.initialize(), [1, 2, 4])
  assert out.metrics["client_work"] == collections.OrderedDict(train=70.0)


class _Cohort:
  """A scripted cohort update (the vectorized execution's interface)."""

  stats_type = SCALAR

  def __init__(self):
    self.calls = []

  def __call__(self, hparams, initial_weights, client_inputs):
    self.calls.append((hparams, list(client_inputs)))
    return [_Scripted(0, [], unit_weight=True)(tf.nest.map_structure(tf.convert_to_tensor, hparams),
                             tf.nest.map_structure(tf.convert_to_tensor, initial_weights), c)
            for c in client_inputs]


@pytest.mark.parametrize("with_stats", [False, True], ids=["no_stats", "stats"])
def test_a_cohort_update_with_a_presummed_dp_mean_equals_the_per_client_dp_mean(with_stats):
  reference, aggregator, finalizer, factory, weights_type = _parts(noise=0.5)
  presummed = factory.create_presummed(weights_type.trainable)
  kwargs = (dict(stats_type=SCALAR, aggregate_stats=lambda s: s, stats_at_server=True)
            if with_stats else dict(stats_type=None, aggregate_stats=None))
  step = in_process_round.build_server_step(aggregator, finalizer, presummed=presummed,
                                            **kwargs)
  assert len(step.type_signature.parameter) == (5 if with_stats else 4)
  cohort = _Cohort()
  fast = in_process_round.InProcessLearningProcess(
      reference, [], step, cohort_update=cohort, presummed_aggregation=presummed)
  per_client = in_process_round.InProcessLearningProcess(
      reference, [_Scripted(0, [], unit_weight=True)],
      in_process_round.build_server_step(aggregator, finalizer, None, None))
  assert fast.parallel_clients == 0
  state = fast.initialize()
  out, want = fast.next(state, [1, 2]), per_client.next(state, [1, 2])
  assert cohort.calls[0][1] == [1, 2]
  assert cohort.calls[0][0] is state.client_work
  np.testing.assert_allclose(_flat(out.state.global_model_weights.trainable),
                             _flat(want.state.global_model_weights.trainable), rtol=1e-5)
  np.testing.assert_allclose(_flat(out.state.aggregator), _flat(want.state.aggregator),
                             rtol=1e-5)
  np.testing.assert_allclose(_flat(out.metrics["aggregator"]),
                             _flat(want.metrics["aggregator"]), rtol=1e-5)
  assert out.metrics["client_work"] == collections.OrderedDict(
      train=30.0 if with_stats else ())


def test_a_process_needs_a_client_update():
  reference, aggregator, finalizer, _, _ = _parts()
  step = in_process_round.build_server_step(aggregator, finalizer, None, None)
  with pytest.raises(ValueError, match="needs at least one client update"):
    in_process_round.InProcessLearningProcess(reference, [], step)


def test_a_failing_client_stops_the_cohort_and_close_stops_the_threads():
  reference, aggregator, finalizer, _, _ = _parts()
  step = in_process_round.build_server_step(aggregator, finalizer, SCALAR, tff.federated_sum)
  log = []
  release = threading.Event()
  fast = in_process_round.InProcessLearningProcess(
      reference, [_Scripted(0, log, fail_on=0), _Scripted(1, log, block=(1, release))], step)
  state = fast.initialize()
  try:
    with pytest.raises(RuntimeError, match="client 0 failed"):
      fast.next(state, [0, 1, 2, 3, 4, 5])
  finally:
    release.set()
  fast._threads[1].submit(lambda: None).result()  # pylint: disable=protected-access
  assert [c for k, c, _ in log if k == 1] == [1]  # clients 3 and 5 were cancelled
  # close: queued work is cancelled, and it does not wait for the running client.
  started, hold = threading.Event(), threading.Event()
  running = fast._threads[0].submit(  # pylint: disable=protected-access
      lambda: started.set() or hold.wait(10))
  assert started.wait(10)
  queued = fast._threads[0].submit(lambda: None)  # pylint: disable=protected-access
  try:
    fast.close()
    assert queued.cancelled() and not running.done()
  finally:
    hold.set()
  assert running.result() is True
  with pytest.raises(RuntimeError):
    fast.next(state, [1, 2])


def test_the_cohort_goes_to_a_weighted_mean_as_one_client_its_weighted_mean():
  """Issue 49: Σ w_i u_i / Σ w_i at weight Σ w_i, so TFF's mean over it is the cohort's."""
  from tff_idp.engine.in_process_round import cohort_as_one_client  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  updates = [[rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=2).astype(np.float32)]
             for _ in range(5)]
  weights = [np.float32(w) for w in (1, 0, 3, 2.5, 0)]  # zeros: padding or dropped clients
  (mean,), (total,) = cohort_as_one_client(updates, weights)
  assert total == np.float32(6.5) and isinstance(total, np.float32)
  for k in range(2):
    want = sum(w * u[k].astype(np.float64) for w, u in zip(weights, updates)) / 6.5
    np.testing.assert_allclose(mean[k], want, rtol=1e-6)
    assert mean[k].dtype == np.float32 and mean[k].shape == updates[0][k].shape
  (zeros,), (nothing,) = cohort_as_one_client(updates, [np.float32(0)] * 5)
  assert nothing == 0 and all(not z.any() for z in zeros)
  assert [z.shape for z in zeros] == [(3, 2), (2,)]
  assert cohort_as_one_client([], []) == ([], [])


def test_the_one_clients_mean_is_summed_in_float64_and_takes_fractional_weights():
  """Weights below 1 in total still average (not zeros), and float32 accumulation would lose
  the 1 between ±1e8 that the float64 sum keeps."""
  from tff_idp.engine.in_process_round import cohort_as_one_client  # pylint: disable=g-import-not-at-top
  updates = [[np.float32([1e8])], [np.float32([1.0])], [np.float32([-1e8])]]
  (mean,), (total,) = cohort_as_one_client(updates, [np.float32(1)] * 3)
  assert total == 3 and mean[0][0] == np.float32(1 / 3)
  (mean,), (total,) = cohort_as_one_client([[np.float32([2.0])], [np.float32([4.0])]],
                                           [np.float32(0.25), np.float32(0.5)])
  assert total == np.float32(0.75)
  np.testing.assert_allclose(mean[0], [(0.25 * 2 + 0.5 * 4) / 0.75], rtol=1e-6)
