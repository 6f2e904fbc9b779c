"""The cohort-vectorized client execution (issue 35) equals the per-client rounds.

Both processes start from the same state and get the same clients: the
per-client process each client's ``tf.data`` pipeline
(``ClientArrays.dataset()``, the recipe the runs use), the vectorized one the
same ``ClientArrays`` (or the same pipelines). The server step, the DP
aggregator with its noise from the state's seed, is shared code, so states
and metrics agree to float tolerance round after round. Clients differ in
size (0 to 13 examples, so in local steps), a cohort of one is included, and
SCALE's clip scales ride along.
"""
import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tff = pytest.importorskip("tensorflow_federated")

from tff_idp import models  # pylint: disable=g-import-not-at-top
from tff_idp.engine.cohort_arrays import ClientArrays
from tff_idp.engine.in_process_round import InProcessLearningProcess
from tff_idp.errors import ClientInputError
from tff_idp.idp_fedavg import process as process_lib
from tff_idp.idp_fedavg import vectorized

from tests import tree_checks  # pylint: disable=g-bad-import-order

pytestmark = pytest.mark.usefixtures("tff_runtime")

ATOL = 1e-5
SPEC = collections.OrderedDict(x=tf.TensorSpec([None, 6], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))
MLP_FN = models.tff_model_fn(lambda: models.build_mlp(6, 3, hidden=8), SPEC)
LOGREG_FN = models.tff_model_fn(lambda: models.build_logistic_regression(6, 3), SPEC)
BINARY_FN = models.tff_model_fn(lambda: models.build_mlp(6, 2, hidden=5, head="sigmoid"),
                                SPEC, head="sigmoid")
SIZES = (13, 0, 4, 7, 1, 9)


def _clients(round_num, sizes=SIZES, classes=3, epochs=2, batch=4):
  out = []
  for i, n in enumerate(sizes):
    rng = np.random.default_rng(100 * round_num + i)
    out.append(ClientArrays(
        collections.OrderedDict(x=rng.normal(size=(n, 6)).astype(np.float32),
                                y=rng.integers(0, classes, n).astype(np.int32)),
        shuffle_seed=7 * round_num + i, epochs=epochs, batch_size=batch))
  return out


def _build(model_fn, noise, execution, scale=False, optimizer=None):
  return process_lib.build_idp_fedavg_driver_process(
      model_fn, client_optimizer=optimizer or tff.learning.optimizers.build_adam(0.01),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
      noise_multiplier=noise, expected_clients_per_round=5, per_client_clip_scale=scale,
      aggregator_kwargs=dict(noise_seed=11, clipped_count_stddev=1.0)
      if noise is not None else None,
      client_execution=execution, parallel_clients=1)


def _compare(model_fn, noise, inputs_for, reference="in_process", rounds=2, **kwargs):
  """The vectorized process is built first: building any process after an in-process one
  would invalidate the in-process process's Keras models (its builder's docstring)."""
  candidate = _build(model_fn, noise, "vectorized", **kwargs)
  # A DP round clips and sums the stacked cohort here (the presummed DP mean);
  # these comparisons are what check it against the per-client aggregator.
  assert (candidate.presummed_aggregation is None) == (noise is None)
  _rounds(_build(model_fn, noise, reference, **kwargs), candidate, inputs_for, rounds)


def _rounds(reference, candidate, inputs_for, rounds=2):
  """Both processes from the same state; the states and metrics agree every round."""
  state = reference.initialize()
  other = state
  for r in range(rounds):
    ref = reference.next(state, inputs_for(r, False))
    out = candidate.next(other, inputs_for(r, True))
    tree_checks.assert_trees_close(ref.state, out.state, ATOL)
    assert tf.nest.map_structure(lambda *_: None, ref.metrics) == \
        tf.nest.map_structure(lambda *_: None, out.metrics)
    tree_checks.assert_trees_close(ref.metrics, out.metrics, ATOL)
    state, other = ref.state, out.state


def _plain(clients_for):
  """Round inputs: the pipelines for the per-client process, arrays for the vectorized one."""
  return lambda r, vec: [c if vec else c.dataset() for c in clients_for(r)]


@pytest.mark.parametrize("noise", [None, 0.5], ids=["nonprivate", "dp_sample"])
def test_mlp_rounds_equal_the_per_client_rounds(noise):
  _compare(MLP_FN, noise, _plain(_clients), rounds=3)


def test_dp_round_equals_the_tff_round():
  _compare(LOGREG_FN, 0.5, _plain(_clients), reference="tff")


def test_scale_rounds_equal_the_per_client_rounds():
  scales = [0.25, 1.0, 0.5, 0.75, 0.1, 0.6]

  def inputs(r, vec):
    return [collections.OrderedDict(data=c, clip_scale=s) if vec
            else process_lib.scaled_client_data(c.dataset(), s)
            for c, s in zip(_clients(r), scales)]

  _compare(MLP_FN, 0.5, inputs, scale=True)


@pytest.mark.parametrize("sizes", [(5,), (0,), (0, 0, 3)], ids=["one", "one_empty", "empties"])
def test_a_cohort_of_one_and_empty_clients(sizes):
  _compare(MLP_FN, 0.5, _plain(lambda r: _clients(r, sizes)))


def test_sigmoid_head_and_momentum_sgd():
  sgdm = tff.learning.optimizers.build_sgdm(0.1, momentum=0.9)
  _compare(BINARY_FN, None, _plain(lambda r: _clients(r, classes=2)), optimizer=sgdm)


def test_dataset_inputs_train_in_their_iteration_order():
  """A pipeline given to the vectorized process trains as the per-client process trains it,
  uneven batches included (batched before repeat: a short batch at each epoch's end)."""
  def inputs(r, vec):
    del vec
    return [tf.data.Dataset.from_tensor_slices(collections.OrderedDict(c.examples))
            .batch(3).repeat(2) for c in _clients(r)]

  _compare(MLP_FN, 0.5, inputs)


def _update(chunk_clients=None, weighting=tff.learning.ClientWeighting.UNIFORM):
  kwargs = {} if chunk_clients is None else dict(max_chunk_clients=chunk_clients)
  return vectorized.VectorizedModelDeltaUpdate(
      MLP_FN, tff.learning.optimizers.build_adam(0.01), weighting, **kwargs)


def _start():
  process = _build(MLP_FN, None, "vectorized")
  state = process.initialize()
  return state.client_work, state.global_model_weights


def test_chunking_does_not_change_any_client():
  hparams, weights = _start()
  clients = _clients(0)
  whole = _update()(hparams, weights, clients)
  for size in (1, 4):
    tree_checks.assert_trees_close(whole, _update(size)(hparams, weights, clients), 1e-6)


def test_each_client_equals_its_training_alone():
  """A client's result does not depend on who else is in its cohort."""
  hparams, weights = _start()
  clients = _clients(1)
  update = _update(weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)
  together = update(hparams, weights, clients)
  for client, result in zip(clients, together):
    tree_checks.assert_trees_close(result, update(hparams, weights, [client])[0], 1e-6)
  assert [float(r[1]) for r in together] == [float(n) * 2 for n in SIZES]


def test_a_non_finite_client_is_zeroed_with_weight_zero_alone():
  hparams, weights = _start()
  clients = _clients(0)
  bad = collections.OrderedDict(x=np.full((4, 6), np.nan, np.float32),
                                y=np.zeros(4, np.int32))
  clients[2] = ClientArrays(bad, shuffle_seed=None, epochs=1, batch_size=4)
  results = _update()(hparams, weights, clients)
  assert all(not np.any(d) for d in results[2][0]) and results[2][1] == 0.0
  assert results[2][2]["num_examples"] == [0]
  alone = _update()(hparams, weights, clients[:2])
  tree_checks.assert_trees_close(results[:2], alone, 1e-6)


def test_scale_inputs_are_required_and_refused_as_in_the_per_client_path():
  process = _build(MLP_FN, 0.5, "vectorized", scale=True)
  with pytest.raises(ClientInputError, match="scaled_client_data"):
    process.next(process.initialize(), _clients(0))
  plain = _build(MLP_FN, 0.5, "vectorized")
  with pytest.raises(ClientInputError, match="per_client_clip_scale"):
    plain.next(plain.initialize(),
               [collections.OrderedDict(data=c, clip_scale=0.5) for c in _clients(0)])
  with pytest.raises(ClientInputError, match="ClientArrays"):
    plain.next(plain.initialize(), [np.zeros(3)])


def test_auto_vectorizes_dense_models_and_not_the_cnn_or_audits():
  assert isinstance(_build(MLP_FN, 0.5, "auto"), InProcessLearningProcess)
  assert _build(MLP_FN, 0.5, "auto").cohort_update is not None
  assert vectorized.vectorizable(LOGREG_FN) and vectorized.vectorizable(BINARY_FN)
  cnn_fn = models.tff_model_fn(lambda: models.build_idp_fedavg_cnn((24, 24, 1), 3),
                               collections.OrderedDict(
                                   x=tf.TensorSpec([None, 24, 24, 1], tf.float32),
                                   y=tf.TensorSpec([None], tf.int32)))
  assert not vectorized.vectorizable(cnn_fn)
  plain_fn = lambda: MLP_FN()  # pylint: disable=unnecessary-lambda
  assert not vectorized.vectorizable(plain_fn)  # no Keras builder recorded
  with pytest.raises(ValueError, match="vectorized"):
    _build(cnn_fn, 0.5, "vectorized")
  with pytest.raises(ValueError, match="canary"):
    process_lib.build_idp_fedavg_driver_process(
        MLP_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
        server_optimizer=tff.learning.optimizers.build_sgdm(1.0), noise_multiplier=0.5,
        expected_clients_per_round=5, canary_client_work=lambda w: w,
        client_execution="vectorized")


def test_the_public_builder_stays_a_native_learning_process():
  process = process_lib.build_idp_fedavg_process(
      MLP_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), noise_multiplier=0.5,
      expected_clients_per_round=5, aggregator_kwargs=dict(clipped_count_stddev=1.0))
  assert isinstance(process, tff.learning.templates.LearningProcess)


def _finite_clients(round_num):
  return [c for c in _clients(round_num) if len(c.examples["y"])]


@pytest.mark.parametrize("weighting", [tff.learning.ClientWeighting.NUM_EXAMPLES,
                                       tff.learning.ClientWeighting.UNIFORM],
                         ids=["num_examples", "uniform"])
def test_each_client_equals_the_per_client_update(weighting):
  """Per client: the same Δ, weight and unfinalized metrics (keys in the model's order) as
  the per-client update; a plain list of trainable weights is taken as ModelWeights is.
  The hparams given (not the optimizer's own) set the step: a learning rate of 0 moves nothing."""
  from tff_idp.idp_fedavg import in_process  # pylint: disable=g-import-not-at-top
  hparams, weights = _start()
  hparams = collections.OrderedDict(hparams)
  frozen = collections.OrderedDict(hparams, learning_rate=0.0)
  hparams["learning_rate"] = 0.03
  clients = _clients(2)
  adam = tff.learning.optimizers.build_adam(0.01)
  update = vectorized.VectorizedModelDeltaUpdate(MLP_FN, adam, weighting)
  together = update(hparams, weights, clients)
  from_list = update(hparams, list(weights.trainable), clients)
  reference = in_process.ModelDeltaClientUpdate(MLP_FN, adam, weighting)
  assert update.stats_type == reference.stats_type == update.metrics_type
  assert list(update.metric_finalizers) == list(reference.metric_finalizers)
  for client, result, listed in zip(clients, together, from_list):
    expected = reference(hparams, weights, client.dataset())
    assert len(result) == 3 and isinstance(result[1], np.float32)
    assert float(result[1]) == float(expected[1])
    assert list(result[2]) == list(expected[2])
    tree_checks.assert_trees_close(result, expected, 1e-5)
    tree_checks.assert_trees_close(result, listed, 0.0)
  still = update(hparams=frozen, initial_weights=weights, client_inputs=clients)
  assert not any(np.any(d) for r in still for d in r[0])
  counts = [r[2]["num_examples"][0] for r in together]
  assert counts == [2 * n for n in SIZES]
  assert [r[2]["num_batches"][0] for r in together] == [-(-2 * n // 4) for n in SIZES]


def test_an_empty_cohort_has_no_results():
  hparams, weights = _start()
  assert _update()(hparams, weights, []) == []


def test_a_non_finite_client_reports_zero_metrics_and_keeps_its_scale():
  """Every metric of a non-finite client is zero; with SCALE its weight stays its clip
  scale (as the per-client update: the scale is the weight), read from a dataset too."""
  hparams, weights = _start()
  clients = _clients(0)[:3]
  clients[1] = ClientArrays(
      collections.OrderedDict(x=np.full((5, 6), np.inf, np.float32), y=np.zeros(5, np.int32)),
      shuffle_seed=None, epochs=1, batch_size=2)
  plain = _update(weighting=tff.learning.ClientWeighting.NUM_EXAMPLES)(
      hparams, weights, clients)
  metrics = plain[1][2]
  assert list(metrics) == ["sparse_categorical_accuracy", "loss", "num_examples",
                           "num_batches"]
  assert tree_checks.flat(metrics) == [0.0] * 6 and plain[1][1] == 0.0
  first = plain[0][2]
  assert [float(first[k][-1]) for k in metrics] == [26.0, 26.0, 26.0, 7.0]
  assert 0 < float(first["loss"][0]) and 0 < float(first["sparse_categorical_accuracy"][0])
  assert float(plain[0][1]) == 26.0
  scale = vectorized.VectorizedModelDeltaUpdate(
      MLP_FN, tff.learning.optimizers.build_adam(0.01),
      tff.learning.ClientWeighting.NUM_EXAMPLES, clip_scale=True)
  scales = [0.25, tf.data.Dataset.from_tensor_slices([0.9, 0.5]),
            tf.data.Dataset.from_tensors(0.75)]
  scaled = scale(hparams, weights, [collections.OrderedDict(data=c, clip_scale=s)
                                    for c, s in zip(clients, scales)])
  assert [r[1] for r in scaled] == [np.float32(0.25), np.float32(0.5), np.float32(0.75)]
  assert all(not np.any(d) for d in scaled[1][0])
  tree_checks.assert_trees_close([r[0] for r in scaled], [r[0] for r in plain], 0.0)
  tree_checks.assert_trees_close([r[2] for r in scaled], [r[2] for r in plain], 0.0)
  with pytest.raises(ValueError, match="clip_scale dataset is empty"):
    scale(hparams, weights, [collections.OrderedDict(
        data=clients[0], clip_scale=tf.data.Dataset.from_tensor_slices(np.zeros(0)))])


def test_models_it_cannot_serve_are_refused_by_name():
  """A model of other layers, or one whose metrics are not the four it computes."""
  adam = tff.learning.optimizers.build_adam(0.01)
  uniform = tff.learning.ClientWeighting.UNIFORM
  with pytest.raises(ValueError, match="serves models of Dense layers"):
    vectorized.VectorizedModelDeltaUpdate(lambda: MLP_FN(), adam, uniform)  # pylint: disable=unnecessary-lambda
  wrong_head = models.tff_model_fn(lambda: models.build_mlp(6, 3, hidden=8), SPEC)
  wrong_head.head = "sigmoid"  # reports sparse_categorical_accuracy, not binary_accuracy
  with pytest.raises(ValueError, match="computes the metrics.*binary_accuracy"):
    vectorized.VectorizedModelDeltaUpdate(wrong_head, adam, uniform)

  def extra_metric():
    return tff.learning.models.from_keras_model(
        models.build_mlp(6, 3, hidden=8),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), input_spec=SPEC,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(),
                 tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2)])

  extra_metric.keras_builder, extra_metric.head = MLP_FN.keras_builder, "softmax"
  with pytest.raises(ValueError, match="sparse_top_k"):
    vectorized.VectorizedModelDeltaUpdate(extra_metric, adam, uniform)


def test_chunks_are_planned_from_each_clients_steps_and_memory(monkeypatch):
  """The plan gets every client's local steps, one client's bytes (MLP 6-8-3: 83 weights,
  4-example steps, 8-wide widest layer) and the update's bounds; a byte bound of two
  clients cuts the cohort in three chunks, and no client changes."""
  from tff_idp.engine import cohort_stack  # pylint: disable=g-import-not-at-top
  plans = []
  plan_chunks = cohort_stack.plan_chunks

  def recording(*args):
    plans.append(args)
    return plan_chunks(*args)

  hparams, weights = _start()
  clients = _clients(0)
  whole = _update()(hparams, weights, clients)
  adam = tff.learning.optimizers.build_adam(0.01)
  per_client = 4 * (4 * 83 + 4 * 4 * 8)
  bounded = vectorized.VectorizedModelDeltaUpdate(
      MLP_FN, adam, tff.learning.ClientWeighting.UNIFORM, max_chunk_bytes=2 * per_client)
  monkeypatch.setattr(cohort_stack, "plan_chunks", recording)
  results = bounded(hparams, weights, clients)
  _update()(hparams, weights, clients)
  steps = [-(-2 * n // 4) for n in SIZES]
  assert plans == [(steps, per_client, 2 * per_client, cohort_stack.DEFAULT_MAX_CHUNK_CLIENTS),
                   (steps, per_client, cohort_stack.DEFAULT_MAX_CHUNK_BYTES,
                    cohort_stack.DEFAULT_MAX_CHUNK_CLIENTS)]
  assert len(plan_chunks(*plans[0])) == 3
  # Chunks of other clients, steps and examples reuse the one trace (its input signature).
  assert bounded._train.experimental_get_tracing_count() == 1  # pylint: disable=protected-access
  tree_checks.assert_trees_close(whole, results, 1e-6)
  # One logit: every layer is 1 wide (7 weights), so the width floor of 1 is the width.
  one_logit = models.tff_model_fn(
      lambda: models.build_logistic_regression(6, 2, head="sigmoid"), SPEC, head="sigmoid")
  vectorized.VectorizedModelDeltaUpdate(one_logit, adam, tff.learning.ClientWeighting.UNIFORM)(
      hparams, [np.zeros((6, 1), np.float32), np.zeros(1, np.float32)],
      _clients(0, sizes=(3,), classes=2))
  assert plans[2][1] == 4 * (4 * 7 + 4 * 4 * 1)
