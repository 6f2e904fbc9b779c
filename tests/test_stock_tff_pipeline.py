"""Every public piece used the way a stock TFF 0.87 user uses it (issue 31).

Own Keras models (195 and 11,260 trainable parameters, below and above the
10,000 at which the toolkit's own driver trains clients in process), own
client data as numpy arrays / ``tf.data`` datasets, and stock TFF around the
pieces: ``isinstance`` and type signatures, a ``LearningProcess`` rebuilt
from the parts, ``compose_learning_process``, the stock FedAvg builders with
the DP aggregator, and ``tff.learning.programs.train_model`` with each
family's data source. Privacy: the same client datasets fed every round give
fresh noise; misuse (example-count weights, plain deltas into the APES
analyzer, a k the sampler was not calibrated for) is refused loudly.
"""
import asyncio
import collections
import copy
import logging

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tff_idp
from tff_idp.apes.program_data import ApesDataSource
from tff_idp.errors import ToolkitValueError
from tff_idp.idp_fedavg.program_data import IdpFedAvgDataSource
from tff_idp.rpdp.program_data import RecordDpDataSource

pytestmark = pytest.mark.usefixtures("tff_runtime")

FEATURES, CLASSES = 12, 15          # logistic regression: 12·15 + 15 = 195 parameters
BIG_FEATURES, HIDDEN = 64, 150      # MLP: 64·150 + 150 + 150·10 + 10 = 11,260 parameters
SPEC = collections.OrderedDict(x=tf.TensorSpec([None, FEATURES], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))
BIG_SPEC = collections.OrderedDict(x=tf.TensorSpec([None, BIG_FEATURES], tf.float32),
                                   y=tf.TensorSpec([None], tf.int32))


def small_model_fn():
  keras = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
                               tf.keras.layers.Dense(CLASSES)])
  return tff.learning.models.from_keras_model(
      keras, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=SPEC)


def big_model_fn():
  keras = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(BIG_FEATURES,)),
                               tf.keras.layers.Dense(HIDDEN, activation="relu"),
                               tf.keras.layers.Dense(10)])
  return tff.learning.models.from_keras_model(
      keras, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=BIG_SPEC)


def client_arrays(num_clients, features=FEATURES, classes=CLASSES, examples=12, seed=0):
  rng = np.random.default_rng(seed)
  return [(rng.normal(size=(examples, features)).astype(np.float32),
           rng.integers(0, classes, examples).astype(np.int32)) for _ in range(num_clients)]


def datasets(arrays, batch=4):
  return [tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(batch)
          for x, y in arrays]


def flat_weights(process, state):
  return np.concatenate([np.ravel(w) for w in process.get_model_weights(state).trainable])


def sgd(lr):
  return tff.learning.optimizers.build_sgdm(learning_rate=lr)


def dp_factory(**kw):
  return tff_idp.AdaptiveClipDPMeanFactory(
      kw.pop("noise_multiplier", 0.5), kw.pop("expected_clients_per_round", 4),
      clipped_count_stddev=kw.pop("clipped_count_stddev", 5.0), **kw)


# -- native objects ---------------------------------------------------------------

@pytest.mark.parametrize("model_fn", [small_model_fn, big_model_fn], ids=["195", "11260"])
def test_public_builders_are_native_learning_processes_whatever_the_model(model_fn):
  """Item 7: no look-alike behind the native name, below or above 10,000 parameters."""
  processes = [
      tff_idp.build_idp_fedavg_process(
          model_fn, client_optimizer=sgd(0.1), server_optimizer=sgd(1.0), noise_multiplier=0.5,
          expected_clients_per_round=4, aggregator_kwargs=dict(clipped_count_stddev=5.0)),
      tff_idp.build_rpdp_fedavg_process(
          model_fn, client_optimizer=sgd(0.1), server_optimizer=sgd(1.0), local_steps=1,
          noise_multiplier=1.0, clip_norm=1.0)]
  for process in processes:
    assert isinstance(process, tff.learning.templates.LearningProcess)
    assert isinstance(process.next, tff.Computation)
    assert process.next.type_signature.parameter[1].placement == tff.CLIENTS
    rebuilt = tff.learning.templates.LearningProcess(
        process.initialize, process.next, process.get_model_weights,
        process.set_model_weights)
    assert rebuilt.next.type_signature == process.next.type_signature


def test_a_user_federated_computation_calls_the_process():
  """The process's ``next`` composes inside a user's own federated computation."""
  process = tff_idp.build_idp_fedavg_process(
      small_model_fn, client_optimizer=sgd(0.1), server_optimizer=sgd(1.0),
      noise_multiplier=None, expected_clients_per_round=2)
  state_type, data_type = process.next.type_signature.parameter

  @tff.federated_computation(state_type, data_type)
  def two_rounds(state, data):
    return process.next(process.next(state, data).state, data).state

  state = process.initialize()
  out = two_rounds(state, datasets(client_arrays(2)))
  assert not np.allclose(flat_weights(process, out), flat_weights(process, state))


# -- stock FedAvg builders with the DP aggregator ------------------------------------

def test_stock_unweighted_fed_avg_with_the_dp_factory_draws_fresh_noise_each_round():
  """Items 1 and 3: ``factory.unweighted()`` in stock FedAvg; same datasets, fresh noise.

  Client learning rate 0: every update is zero, so each round's model step is
  the aggregator's noise alone (z = 4, C = 1, c = 4: std ≈ 1 per coordinate).
  The two rounds' steps on the *same* datasets must be uncorrelated: with
  195 coordinates the sample correlation of independent noise has sd ≈
  0.07, so |r| < 0.5 fails with probability < 1e-12 (identical noise: r = 1).
  The noise seed is secret (drawn by initialize), so this is a statistical
  test with that stated flake rate.
  """
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      small_model_fn, client_optimizer_fn=sgd(0.0), server_optimizer_fn=sgd(1.0),
      model_aggregator=dp_factory(noise_multiplier=4.0, clipped_count_stddev=10.0,
                                  initial_clip=1.0, clip_learning_rate=0.0).unweighted())
  data = datasets(client_arrays(4))
  state = process.initialize()
  w0 = flat_weights(process, state)
  s1 = process.next(state, data).state
  s2 = process.next(s1, data).state
  step1, step2 = flat_weights(process, s1) - w0, flat_weights(process, s2) - flat_weights(
      process, s1)
  assert np.std(step1) > 0.3 and np.std(step2) > 0.3
  assert abs(np.corrcoef(step1, step2)[0, 1]) < 0.5


def test_stock_weighted_fed_avg_with_example_count_weights_fails_loudly():
  """Item 3: a weight of 12 (examples) is not a clip scale: the round fails, naming the fix."""
  process = tff.learning.algorithms.build_weighted_fed_avg(
      small_model_fn, client_optimizer_fn=sgd(0.1), server_optimizer_fn=sgd(1.0),
      model_aggregator=dp_factory())
  with pytest.raises(Exception, match="client_weighting=tff.learning.ClientWeighting.UNIFORM"):
    process.next(process.initialize(), datasets(client_arrays(2)))
  uniform = tff.learning.algorithms.build_weighted_fed_avg(
      small_model_fn, client_optimizer_fn=sgd(0.1), server_optimizer_fn=sgd(1.0),
      model_aggregator=dp_factory(), client_weighting=tff.learning.ClientWeighting.UNIFORM)
  uniform.next(uniform.initialize(), datasets(client_arrays(2)))


def test_the_apes_analyzer_refuses_a_stock_fed_avg():
  """Item 4: plain model deltas never reach the APES analyzer (refused at build time)."""
  factory = tff_idp.ShuffledPersonalizedMeanFactory(0.1, [1.0, 2.0])
  with pytest.raises(ToolkitValueError, match="build_apes_process"):
    tff.learning.algorithms.build_unweighted_fed_avg(
        small_model_fn, client_optimizer_fn=sgd(0.1), server_optimizer_fn=sgd(1.0),
        model_aggregator=factory)


def test_compose_learning_process_with_the_record_dp_client_work():
  """rPDP-FL's client work in a user's own composition; same datasets, fresh noise.

  q = 1e-3: almost no record is ever sampled, so the update is DP-SGD's
  noise alone; round 2 on the same datasets must not repeat round 1's.
  Deterministic given the seeds in the data.
  """
  with tf.Graph().as_default():
    weights_type = tff.learning.models.weights_type_from_model(small_model_fn)

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(small_model_fn())

  process = tff.learning.templates.compose_learning_process(
      initial_weights, tff.learning.templates.build_broadcast_process(weights_type),
      tff_idp.build_record_dp_client_work(small_model_fn, sgd(1.0), local_steps=1,
                                          noise_multiplier=20.0, clip_norm=1.0),
      tff.aggregators.MeanFactory().create(weights_type.trainable, tff.TensorType(np.float32)),
      tff.learning.templates.build_apply_optimizer_finalizer(sgd(1.0), weights_type))
  data = [tff_idp.record_dataset(x, y, np.full(len(y), 1e-3)) for x, y in client_arrays(3)]
  state = process.initialize()
  s1 = process.next(state, data).state
  s2 = process.next(s1, data).state
  step1 = flat_weights(process, s1) - flat_weights(process, state)
  step2 = flat_weights(process, s2) - flat_weights(process, s1)
  assert np.linalg.norm(step1) > 0
  assert abs(np.corrcoef(step1, step2)[0, 1]) < 0.5


# -- TFF's program API ------------------------------------------------------------------

@pytest.fixture(name="program_context")
def program_context_fixture(tff_runtime):
  with tff_runtime.program_context() as context:
    yield context


def _train(process, source, k, rounds, root):
  manager = tff.program.FileProgramStateManager(root_dir=str(root))
  asyncio.run(tff.learning.programs.train_model(
      train_process=process, train_data_source=source, train_per_round_clients=k,
      train_total_rounds=rounds, program_state_manager=manager,
      model_output_manager=tff.program.MemoryReleaseManager(),
      evaluation_manager=None, evaluation_periodicity=1))
  return manager


def _check_trained(process, manager, source, rounds):
  """The program's last saved state is round ``rounds``, and the model moved."""
  # The public loader (issue 51): no TFF-private ProgramState in the user's code.
  trained = tff_idp.load_trained_state(manager, process, source)

  async def initial_state():
    return await tff.program.materialize_value(process.initialize())
  initial = asyncio.run(initial_state())
  assert trained.version == rounds and trained.round_number == rounds
  saved = (trained.state,)

  def weights(state):
    return np.concatenate([np.ravel(w) for w in state.global_model_weights.trainable])
  assert not np.allclose(weights(saved[0]), weights(initial))
  return saved[0]


def test_train_model_runs_idp_fedavg_with_individual_sampling_rates(tmp_path, program_context):
  """Item 8, SAMPLE: per-client rates from a calibration; 3 rounds under ``train_model``."""
  arrays = client_arrays(8)
  calibration = tff_idp.get_group_sampling_rates([1.0, 4.0], [4, 4], 1e-3, 3, 4.0)
  source = IdpFedAvgDataSource.from_plan(arrays, calibration, groups=np.repeat([0, 1], 4),
                                         batch_size=4)   # its rates and its 3 rounds
  process = tff_idp.build_idp_fedavg_process(
      small_model_fn, client_optimizer=sgd(0.1), server_optimizer=sgd(1.0),
      noise_multiplier=calibration.noise_multiplier,
      expected_clients_per_round=calibration.expected_clients_per_round,
      aggregator_kwargs=dict(clipped_count_stddev=5.0))
  k = int(round(calibration.expected_clients_per_round))
  manager = _train(process, source, k, 3, tmp_path)
  _check_trained(process, manager, source, 3)
  with pytest.raises(ToolkitValueError, match=f"k={k}"):
    source.iterator().select(k + 3)


def test_train_model_runs_scale(tmp_path, program_context):
  """Item 8, SCALE: the clients' clip scales travel with their data (from the SCALE
  calibration, with its rounds); 3 rounds."""
  arrays = client_arrays(6)
  calibration = tff_idp.get_group_clip_scales([1.0, 4.0], [3, 3], 1e-3, 3, 3.0)
  source = IdpFedAvgDataSource.from_plan(arrays, calibration, groups=[0, 1] * 3, batch_size=4)
  assert "clip_scale" in str(source.federated_type)
  process = tff_idp.build_idp_fedavg_process(
      small_model_fn, client_optimizer=sgd(0.1), server_optimizer=sgd(1.0),
      noise_multiplier=calibration.noise_multiplier, expected_clients_per_round=3.0,
      per_client_clip_scale=True,
      aggregator_kwargs=dict(clipped_count_stddev=5.0,
                             expected_clip_scale_sum=calibration.expected_clip_scale_sum))
  _check_trained(process, _train(process, source, 3, 3, tmp_path), source, 3)


def test_train_model_runs_rpdp(tmp_path, program_context):
  """Item 8, rPDP-FL: records with their rates (from a record plan, with its λ and rounds)
  and fresh secret seeds; 3 rounds."""
  arrays = client_arrays(5, examples=10)
  params = tff_idp.TwoStageParams(noise_multiplier=0.5, local_steps=2, rounds=3,
                                  client_rate=0.6, delta=1e-5)
  plan = tff_idp.make_record_plan("ours", {str(i): np.full(10, 8.0) for i in range(5)},
                                  params, clip_norm=1.0)
  source = RecordDpDataSource.from_plan(arrays, plan)
  process = tff_idp.build_rpdp_fedavg_process(
      small_model_fn, client_optimizer=sgd(0.5), server_optimizer=sgd(1.0), local_steps=2,
      noise_multiplier=plan.noise_multiplier, clip_norm=plan.clip_norm)
  _check_trained(process, _train(process, source, 3, 3, tmp_path), source, 3)


def test_train_model_runs_apes(tmp_path, program_context):
  """Item 8, APES: every user every round with its own ε and a fresh seed; 3 rounds."""
  arrays = client_arrays(4)
  eps = [1.0, 2.0, 4.0, 8.0]
  source = ApesDataSource(arrays, eps, batch_size=4, rounds=3)
  process = tff_idp.build_apes_process(
      small_model_fn, mechanism="clip_laplace", client_learning_rate=0.1, clip=0.1,
      epsilons=eps)
  _check_trained(process, _train(process, source, 4, 3, tmp_path), source, 3)


def test_iterators_draw_fresh_secret_seeds_and_resume_from_bytes():
  """Each round's seeds are fresh; two iterators draw different secrets; to_bytes resumes."""
  arrays = client_arrays(3, examples=5)
  source = RecordDpDataSource(arrays, [np.ones(5)] * 3, client_rate=1.0, rounds=10)
  it = source.iterator()

  def seeds(inputs):
    return [tuple(next(iter(d))["seed"].numpy()[0]) for d in inputs]

  first, second = seeds(it.select(3)), seeds(it.select(3))
  assert len(set(first + second)) == 6
  assert seeds(source.iterator().select(3)) != first   # a fresh secret per iterator
  saved = copy.deepcopy(it)
  restored = type(it).from_bytes(it.to_bytes())
  assert restored == it
  assert seeds(restored.select(3)) == seeds(saved.select(3)) == seeds(it.select(3))


def test_data_sources_refuse_bad_input():
  arrays = client_arrays(3)
  with pytest.raises(ToolkitValueError, match="one sampling rate per client"):
    IdpFedAvgDataSource(arrays, [0.5, 0.5], rounds=3)
  with pytest.raises(ToolkitValueError, match=r"\(0, 1\]"):
    IdpFedAvgDataSource(arrays, [0.5] * 3, clip_scales=[0.5, 1.5, 1.0], rounds=3)
  with pytest.raises(ToolkitValueError, match=r"\[0, 1\]"):
    RecordDpDataSource(arrays, [np.full(12, 2.0)] * 3, client_rate=0.5, rounds=3)
  with pytest.raises(ToolkitValueError, match="one ε per user"):
    ApesDataSource(arrays, [1.0, 2.0], rounds=3)


@pytest.mark.parametrize("family", ["idp_fedavg", "rpdp", "ino_sgd", "apes"])
def test_api_pipeline_examples_run(family, tmp_path):
  """docs/api.md's "Using the pieces in your own TFF pipeline" examples, executed as printed.

  The names each block leaves to the reader (``clients``, ``model_fn``,
  ``state_dir``) are supplied; the block must train 3 rounds under
  ``train_model`` (the program state's last version is 3).
  """
  import os  # pylint: disable=g-import-not-at-top
  import re  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  text = open(os.path.join(root, "docs", "api.md"), encoding="utf-8").read()
  match = re.search(rf"<!-- pipeline-example: {family} -->\n```python\n(.*?)```", text, re.S)
  assert match, f"docs/api.md lost its {family} pipeline example"
  scope = dict(clients=client_arrays(8), model_fn=small_model_fn, state_dir=str(tmp_path))
  exec(compile(match.group(1), f"docs/api.md:{family}", "exec"), scope)  # pylint: disable=exec-used
  versions = asyncio.run(tff.program.FileProgramStateManager(str(tmp_path)).get_versions())
  assert versions and max(versions) == 3


def test_api_stock_fedavg_example_trains_and_evaluates_as_printed():
  """Issue 51: the stock-FedAvg snippet had no imports (NameError: name 'tff') and no example
  evaluated the model; it now runs alone given the reader's ``clients`` and ``model_fn``."""
  import os  # pylint: disable=g-import-not-at-top
  import re  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  text = open(os.path.join(root, "docs", "api.md"), encoding="utf-8").read()
  match = re.search(r"<!-- pipeline-example: stock_fedavg -->\n```python\n(.*?)```", text, re.S)
  assert match, "docs/api.md lost its stock FedAvg example"
  scope = dict(clients=client_arrays(4), model_fn=small_model_fn)
  exec(compile(match.group(1), "docs/api.md:stock_fedavg", "exec"), scope)  # pylint: disable=exec-used
  assert scope["metrics"]["current_round_metrics"]["num_examples"] == 24
  assert np.isfinite(scope["metrics"]["current_round_metrics"]["loss"])


def test_a_source_refuses_rounds_past_its_calibration():
  """``rounds=T``: the T+1-th selection is refused (the rates' privacy covers T rounds)."""
  source = RecordDpDataSource(client_arrays(3, examples=5), [np.ones(5)] * 3, client_rate=1.0,
                              rounds=2)
  it = source.iterator()
  it.select(3)
  it.select(3)
  with pytest.raises(ToolkitValueError, match="calibrated for 2 rounds"):
    it.select(3)
  restored = type(it).from_bytes(it.to_bytes())
  with pytest.raises(ToolkitValueError, match="calibrated for 2 rounds"):
    restored.select(3)
  with pytest.raises(ToolkitValueError, match="rounds"):
    RecordDpDataSource(client_arrays(3, examples=5), [np.ones(5)] * 3, client_rate=1.0,
                       rounds=0)


@pytest.mark.parametrize("build", [
    lambda arrays, **kw: IdpFedAvgDataSource(arrays, [0.5] * 3, **kw),
    lambda arrays, **kw: RecordDpDataSource(arrays, [np.ones(5)] * 3, client_rate=1.0, **kw),
    lambda arrays, **kw: ApesDataSource(arrays, [1.0, 2.0, 4.0], **kw)],
    ids=["idp_fedavg", "rpdp", "apes"])
def test_every_source_needs_its_calibrated_rounds_or_an_explicit_no_limit(build, caplog):
  """A source built without ``rounds`` is refused, saying what to give: without a limit,
  ``train_model`` runs as many rounds as it is told, past the rates' privacy analysis.
  ``rounds=None`` is the explicit, logged opt-out. Bugs caught: ``rounds`` optional again
  (silently unlimited), or a non-integer count (True, 2.5) taken as a limit."""
  arrays = client_arrays(3, examples=5)
  with pytest.raises(ToolkitValueError, match=r"give rounds=T.*rounds=None"):
    build(arrays)
  for bad in (0, True, 2.5, "3"):
    with pytest.raises(ToolkitValueError, match="rounds="):
      build(arrays, rounds=bad)
  assert build(arrays, rounds=np.int64(2)).iterator().rounds == 2
  with caplog.at_level(logging.WARNING):
    unlimited = build(arrays, rounds=None).iterator()
  assert "rounds=None" in caplog.text and "keep that count" in caplog.text
  for _ in range(4):  # past any calibration: the caller keeps the count
    unlimited.select(unlimited.clients_per_round)
