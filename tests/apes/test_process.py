"""APES / S-APES learning process: FedProx locally, the client's own randomizer before upload.

Checks that nothing unrandomized crosses from the clients to the server (on
the computation and on values), that a round equals the NumPy reference
randomizer plus the reference de-bias, and seeded determinism.
"""
import collections

import numpy as np
import pytest

tff = pytest.importorskip("tensorflow_federated")
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_idp import models  # pylint: disable=g-import-not-at-top
from tff_idp.accounting.shuffle import clip_laplace_reference as ref  # pylint: disable=g-import-not-at-top
from tff_idp.errors import ToolkitValueError  # pylint: disable=g-import-not-at-top
from tff_idp.apes import (build_apes_process, build_ldp_client_work, clip_laplace,  # pylint: disable=g-import-not-at-top
                         make_client_input, make_round_inputs, sparsify)
from tff_idp.engine.privacy_randomness import PrivacyRandomness  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.usefixtures("tff_runtime")

C = 0.1
FEATURES, CLASSES = 6, 3
D = FEATURES * CLASSES + CLASSES
EPS = [0.05, 0.5, 1.0]
SEEDS = [[11, 1], [11, 2], [11, 3]]
MODEL_FN = models.tff_model_fn(lambda: models.build_logistic_regression(FEATURES, CLASSES),
                               models.input_spec_for((FEATURES,)))


def _dataset(seed, shift=0.0):
  rng = np.random.default_rng(seed)
  x = (rng.normal(size=(12, FEATURES)) + shift).astype(np.float32)
  y = rng.integers(0, CLASSES, 12).astype(np.int32)
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y)).batch(32)


DATASETS = [_dataset(i) for i in range(3)]


def _inputs(datasets=None, eps=None, seeds=None):
  datasets = datasets or DATASETS
  return [make_client_input(d, e, s)
          for d, e, s in zip(datasets, eps or EPS, seeds or SEEDS)]


def _flat(update):
  return np.concatenate([np.ravel(v) for v in update])


def _client_reports(mechanism, inputs, round_num=0, **kwargs):
  """Per-client results of the client work alone (a simulation returns CLIENTS values)."""
  work = build_ldp_client_work(
      MODEL_FN, mechanism=mechanism, clip=kwargs.pop("clip", C),
      client_optimizer=tff.learning.optimizers.build_sgdm(learning_rate=1.0), **kwargs)
  weights = tff.learning.models.ModelWeights.from_model(MODEL_FN())
  out = work.next(np.int64(round_num), [weights] * len(inputs), inputs)
  assert out.state == round_num + 1
  return [_flat(r.update["ldp_report"]) for r in out.result]


def _global_weights():
  return _flat(tff.learning.models.ModelWeights.from_model(MODEL_FN()).trainable)


def test_client_work_signature_sends_only_the_report():
  work = build_ldp_client_work(MODEL_FN, mechanism="clip_laplace", clip=C,
                               client_optimizer=tff.learning.optimizers.build_sgdm(1.0))
  result = work.next.type_signature.result
  assert str(result.result) == (
      "{<update=<ldp_report=<float32[6,3],float32[3]>>,update_weight=float32>}@CLIENTS")
  assert str(result.measurements) == "<>@SERVER"   # no unrandomized training metrics
  assert str(result.state) == "int64@SERVER"
  assert str(work.next.type_signature.parameter[2]) == (
      "{<data=<x=float32[?,6],y=int32[?]>*,privacy=<epsilon=float32,seed=int64[2]>*>}@CLIENTS")


def _intrinsic_calls(comp):
  calls = []

  def visit(node):
    if isinstance(node, tff.framework.Call) and isinstance(node.function, tff.framework.Intrinsic):
      calls.append((node.function.uri, node.argument))
    return node, False

  tff.framework.transform_postorder(comp.to_building_block(), visit)
  return calls


@pytest.mark.parametrize("mechanism", ["clip_laplace", "sparse_clip_laplace",
                                       "sparse_clip_laplace_top_b", "laplace"])
def test_only_randomized_reports_reach_the_server(mechanism):
  """On the computation: the only CLIENTS→SERVER intrinsics are the sum of the
  reports and the count of reports, and the one client computation that reads
  client data (training + randomizer) draws stateless uniforms before
  returning its update."""
  process = build_apes_process(
      MODEL_FN, mechanism=mechanism, clip=C, epsilons=[5.0, 10.0],
      keep=5 if mechanism.startswith("sparse") else None, client_learning_rate=1.0)
  calls = _intrinsic_calls(process.next)
  uploads = [(uri, str(arg.type_signature)) for uri, arg in calls
             if uri in ("federated_sum", "federated_aggregate", "federated_mean",
                        "federated_weighted_mean", "federated_secure_sum",
                        "federated_secure_sum_bitwidth", "federated_secure_modular_sum",
                        "federated_min", "federated_max", "federated_select")]
  assert sorted(uploads) == sorted([
      ("federated_sum", "{<ldp_report=<float32[6,3],float32[3]>>}@CLIENTS"),
      ("federated_sum", "{int32}@CLIENTS")])
  readers = [arg for uri, arg in calls
             if uri == "federated_map" and "privacy=" in str(arg.type_signature)]
  assert len(readers) == 1
  client_fn = readers[0][0]
  assert str(client_fn.type_signature.result) == (
      "<update=<ldp_report=<float32[6,3],float32[3]>>,update_weight=float32>")
  assert b"StatelessRandomUniform" in client_fn.proto.SerializeToString()


def test_round_matches_the_reference_randomizer_and_debias():
  """On values: reports = reference inverse-CDF of the clipped FedProx delta with the
  client's uniforms; the new model = w − Ē⁻¹(mean report) (reference grid)."""
  raw = _client_reports("none", _inputs())
  reports = _client_reports("clip_laplace", _inputs())
  expected = []
  for delta, eps, seed in zip(raw, EPS, SEEDS):
    u = tf.random.stateless_uniform([D], seed=clip_laplace.round_seed(seed, 0)).numpy()
    expected.append(ref.sample(np.clip(delta, -C, C).astype(np.float64), eps, C,
                               u.astype(np.float64)))
  for got, want in zip(reports, expected):
    np.testing.assert_allclose(got, want, atol=1e-6)
  assert np.max(np.abs(np.clip(raw[0], -C, C) - reports[0])) > 1e-3  # really randomized

  process = build_apes_process(MODEL_FN, mechanism="clip_laplace", clip=C, epsilons=EPS,
                               client_learning_rate=1.0)
  # The seed counter at 0 (initialize() draws a secret start), as the expected reports use.
  out = process.next(process.initialize()._replace(client_work=np.int64(0)), _inputs())
  new = _flat(process.get_model_weights(out.state).trainable)
  debiased = ref.invert_averaged_mean(np.mean(expected, axis=0), *ref.debias_grid(EPS, C))
  np.testing.assert_allclose(new, _global_weights() - debiased, atol=1e-5)
  assert out.metrics["aggregator"]["reports"] == 3
  assert out.metrics["client_work"] == ()


def test_tiny_epsilon_reports_do_not_depend_on_the_data():
  """Same seeds, very different data: at ε = 1e-3 the reports move by O(εC)
  (the report is essentially noise); at ε = 5 they differ visibly."""
  other = [_dataset(100 + i, shift=3.0) for i in range(3)]
  for d_a, d_b in zip(_client_reports("none", _inputs()), _client_reports("none", _inputs(other))):
    assert np.max(np.abs(np.clip(d_a, -C, C) - np.clip(d_b, -C, C))) > 0.05
  tiny = [1e-3] * 3
  a = _client_reports("clip_laplace", _inputs(eps=tiny))
  b = _client_reports("clip_laplace", _inputs(other, eps=tiny))
  for r_a, r_b in zip(a, b):
    assert np.max(np.abs(r_a - r_b)) < 2e-4
  a = _client_reports("clip_laplace", _inputs(eps=[5.0] * 3))
  b = _client_reports("clip_laplace", _inputs(other, eps=[5.0] * 3))
  assert max(np.max(np.abs(r_a - r_b)) for r_a, r_b in zip(a, b)) > 1e-2


def test_sparse_and_laplace_reports_on_values():
  raw = _client_reports("none", _inputs())
  sparse = _client_reports("sparse_clip_laplace", _inputs(eps=[5.0, 10.0, 20.0]), keep=5)
  top_b = _client_reports("sparse_clip_laplace_top_b", _inputs(eps=[5.0, 10.0, 20.0]), keep=5)
  laplace = _client_reports("laplace", _inputs())
  for i, seed in enumerate(SEEDS):
    s = clip_laplace.round_seed(seed, 0)
    want = sparsify.sparsify_perturb(raw[i], [5.0, 10.0, 20.0][i], C, 5, s).numpy()
    np.testing.assert_allclose(sparse[i], want, atol=1e-6)
    want = sparsify.sparsify_perturb(raw[i], [5.0, 10.0, 20.0][i], C, 5, s,
                                     selection="top_b").numpy()
    np.testing.assert_allclose(top_b[i], want, atol=1e-6)
    kept = np.isclose(top_b[i], clip_laplace.perturb(
        raw[i], [5.0, 10.0, 20.0][i] / 5, C,
        tf.random.experimental.stateless_split(s, 2)[0]).numpy(), atol=1e-6)
    assert kept.sum() == 5
    np.testing.assert_allclose(
        laplace[i], clip_laplace.laplace_perturb(raw[i], EPS[i], C, s).numpy(), atol=1e-6)


def test_seeded_determinism_and_fresh_noise_per_round():
  process = build_apes_process(MODEL_FN, mechanism="clip_laplace", clip=C, epsilons=EPS,
                               client_learning_rate=1.0)
  state = process.initialize()
  a = process.next(state, _inputs())
  b = process.next(state, _inputs())
  wa = _flat(process.get_model_weights(a.state).trainable)
  np.testing.assert_array_equal(wa, _flat(process.get_model_weights(b.state).trainable))
  c = process.next(state, _inputs(seeds=[[12, 1], [12, 2], [12, 3]]))
  assert not np.allclose(wa, _flat(process.get_model_weights(c.state).trainable))
  # Same client seeds in the next round: the round number is folded in (D6 fix).
  round0 = _client_reports("clip_laplace", _inputs(), round_num=0)
  round1 = _client_reports("clip_laplace", _inputs(), round_num=1)
  assert all(np.mean(r0 == r1) < 0.1 for r0, r1 in zip(round0, round1))


def test_none_is_tff_fedprox():
  ours = build_apes_process(MODEL_FN, mechanism="none", client_learning_rate=0.5,
                            proximal_strength=0.01)
  theirs = tff.learning.algorithms.build_unweighted_fed_prox(
      MODEL_FN, 0.01, tff.learning.optimizers.build_sgdm(0.5),
      tff.learning.optimizers.build_sgdm(1.0))
  out_ours = ours.next(ours.initialize(), _inputs())
  out_theirs = theirs.next(theirs.initialize(), DATASETS)
  np.testing.assert_allclose(_flat(ours.get_model_weights(out_ours.state).trainable),
                             _flat(theirs.get_model_weights(out_theirs.state).trainable),
                             atol=1e-6)


def test_stock_optimizers_replace_the_learning_rates():
  """Issue 51: client_optimizer / server_optimizer as the other families' builders take them."""
  ours = build_apes_process(MODEL_FN, mechanism="none",
                            client_optimizer=tff.learning.optimizers.build_adam(0.05),
                            server_optimizer=tff.learning.optimizers.build_sgdm(0.5, 0.9))
  theirs = tff.learning.algorithms.build_unweighted_fed_prox(
      MODEL_FN, 0.01, tff.learning.optimizers.build_adam(0.05),
      tff.learning.optimizers.build_sgdm(0.5, 0.9))
  out_ours = ours.next(ours.initialize(), _inputs())
  out_theirs = theirs.next(theirs.initialize(), DATASETS)
  np.testing.assert_allclose(_flat(ours.get_model_weights(out_ours.state).trainable),
                             _flat(theirs.get_model_weights(out_theirs.state).trainable),
                             atol=1e-6)
  sgd = tff.learning.optimizers.build_sgdm(0.5)
  with pytest.raises(ToolkitValueError, match="exactly one of them"):
    build_apes_process(MODEL_FN, mechanism="none")
  with pytest.raises(ToolkitValueError, match="exactly one of them"):
    build_apes_process(MODEL_FN, mechanism="none", client_learning_rate=0.5,
                       client_optimizer=sgd)
  with pytest.raises(ToolkitValueError, match="drop server_learning_rate"):
    build_apes_process(MODEL_FN, mechanism="none", client_optimizer=sgd,
                       server_optimizer=sgd, server_learning_rate=0.5)


def test_local_epochs_repeat_the_data():
  twice = _client_reports("none", _inputs(), local_epochs=2)
  repeated = _client_reports("none", _inputs([d.repeat(2) for d in DATASETS]))
  for a, b in zip(twice, repeated):
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_errors():
  build = lambda **kw: build_apes_process(MODEL_FN, client_learning_rate=1.0, **kw)
  with pytest.raises(ToolkitValueError, match="mechanism"):
    build(mechanism="gaussian", clip=C, epsilons=EPS)
  with pytest.raises(ToolkitValueError, match="epsilons"):
    build(mechanism="clip_laplace", clip=C)
  with pytest.raises(ToolkitValueError, match="epsilons"):
    build(mechanism="clip_laplace", clip=C, epsilons=[0.5, 0.0])
  with pytest.raises(ToolkitValueError, match="clip"):
    build(mechanism="laplace", clip=0.0)
  with pytest.raises(ToolkitValueError, match="clip"):
    build(mechanism="clip_laplace", epsilons=EPS)
  with pytest.raises(ToolkitValueError, match="keep"):
    build(mechanism="sparse_clip_laplace", clip=C, epsilons=EPS)
  with pytest.raises(ToolkitValueError, match="keep"):
    build(mechanism="sparse_clip_laplace", clip=C, epsilons=EPS, keep=D + 1)
  with pytest.raises(ToolkitValueError, match="keep"):
    build(mechanism="sparse_clip_laplace", clip=C, epsilons=EPS, keep=0)
  with pytest.raises(ToolkitValueError, match="keep"):
    build(mechanism="clip_laplace", clip=C, epsilons=EPS, keep=3)
  with pytest.raises(ToolkitValueError, match="'rescale' is its exact de-bias"):
    build(mechanism="sparse_clip_laplace", clip=C, epsilons=EPS, keep=3,
          sparse_debias="threshold")
  with pytest.raises(ToolkitValueError, match="local_epochs"):
    build(mechanism="none", local_epochs=0)
  with pytest.raises(ToolkitValueError, match="proximal_strength"):
    build(mechanism="none", proximal_strength=-1.0)
  with pytest.raises(ToolkitValueError, match="client_learning_rate"):
    build_apes_process(MODEL_FN, mechanism="none", client_learning_rate=0.0)
  with pytest.raises(ToolkitValueError, match="epsilon"):
    make_client_input(DATASETS[0], 0.0, [1, 2])
  with pytest.raises(ToolkitValueError, match="epsilon"):
    make_client_input(DATASETS[0], float("inf"), [1, 2])
  with pytest.raises(ToolkitValueError, match="seed"):
    make_client_input(DATASETS[0], 1.0, [1, 2, 3])


def test_bad_privacy_inputs_fail_inside_the_client_computation():
  """Inputs built by hand (not by make_client_input) are checked at the client."""
  process = build_apes_process(MODEL_FN, mechanism="clip_laplace", clip=C, epsilons=[1.0],
                               client_learning_rate=1.0)
  state = process.initialize()

  def by_hand(privacy):
    return collections.OrderedDict(data=DATASETS[0], privacy=privacy)

  element = collections.OrderedDict(epsilon=tf.constant(-1.0), seed=tf.constant([1, 2], tf.int64))
  with pytest.raises(Exception, match="epsilon must be finite and > 0"):
    process.next(state, [by_hand(tf.data.Dataset.from_tensors(element))])
  valid = collections.OrderedDict(epsilon=tf.constant(1.0), seed=tf.constant([1, 2], tf.int64))
  with pytest.raises(Exception, match="exactly one"):
    process.next(state, [by_hand(tf.data.Dataset.from_tensors(valid).repeat(2))])
  # The runtime is still usable afterwards.
  assert process.next(state, _inputs()[:1]).metrics["aggregator"]["reports"] == 1


def test_round_inputs_use_the_runs_secret_seeds():
  debug = PrivacyRandomness.from_seed(5, "apes-test")
  inputs = make_round_inputs(DATASETS, EPS, ["a", "b", "c"], debug, round_num=3)
  for item, eps, cid in zip(inputs, EPS, ["a", "b", "c"]):
    element = next(iter(item["privacy"]))
    assert float(element["epsilon"]) == pytest.approx(eps)
    np.testing.assert_array_equal(element["seed"].numpy(),
                                  clip_laplace.client_seed(debug, cid, 3))
  secret = make_round_inputs(DATASETS, EPS, ["a", "b", "c"], PrivacyRandomness.secret(), 3)
  assert not np.array_equal(next(iter(secret[0]["privacy"]))["seed"].numpy(),
                            next(iter(inputs[0]["privacy"]))["seed"].numpy())
  with pytest.raises(ToolkitValueError, match="one entry per client"):
    make_round_inputs(DATASETS, EPS[:2], ["a", "b", "c"], debug, 0)


@pytest.mark.parametrize("execution", ["tff", "vectorized"])
def test_two_runs_with_the_same_client_seeds_share_no_noise(execution):
  """Privacy (issue 48): each initialize() draws a fresh secret folded into every report's seed.

  Bug caught: a seed counter that starts at a constant (0, as before issue
  48): two runs given the same ``make_client_input`` seeds drew identical
  randomizer noise (correlation +1.0000). At ε = 1e-3 a clip-Laplace report
  is almost independent of the data, so the round's model step is noise in
  10,010 coordinates; for independent runs the sample correlation has sd ≈
  0.01 and |r| < 0.05 fails with probability < 1e-6. Not seeded (each
  ``initialize()`` draws from OS entropy): the stated flake rate is the bound.
  """
  from tff_idp.apes import build_apes_driver_process  # pylint: disable=g-import-not-at-top
  features, classes = 999, 10
  model_fn = models.tff_model_fn(
      lambda: models.build_logistic_regression(features, classes, seed=0),
      models.input_spec_for((features,)))
  eps = [1e-3, 1e-3]
  learning_process = build_apes_driver_process(
      model_fn, mechanism="clip_laplace", clip=C, epsilons=eps, client_learning_rate=1.0,
      client_execution=execution)
  rng = np.random.default_rng(0)
  datasets = [tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=rng.normal(size=(6, features)).astype(np.float32),
      y=rng.integers(0, classes, 6).astype(np.int32))).batch(8) for _ in eps]
  inputs = [make_client_input(d, e, [21, i]) for i, (d, e) in enumerate(zip(datasets, eps))]

  def step(state):
    before = _flat(learning_process.get_model_weights(state).trainable)
    out = learning_process.next(state, inputs)
    return _flat(learning_process.get_model_weights(out.state).trainable) - before

  first = step(learning_process.initialize())
  second = step(learning_process.initialize())
  assert np.linalg.norm(first) > 0
  r = np.corrcoef(first, second)[0, 1]
  assert abs(r) < 0.05, f"two runs' noise correlates: r = {r:.4f}"


@pytest.mark.parametrize("stock,match", [
    (dict(client_execution="vectorized"), "belongs to build_apes_driver_process"),
    (dict(model_aggregator=tff.aggregators.MeanFactory()), "would replace the de-biased mean"),
    (dict(client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES),
     "weights every sampled client equally"),
    (dict(metrics_aggregator=tff.learning.metrics.sum_then_finalize), "reports its own"),
])
def test_stock_tff_keywords_are_refused_with_the_reason(stock, match):
  """Issue 51: the stock keywords a TFF user reaches for, refused in one line naming why."""
  with pytest.raises(ToolkitValueError, match=match):
    build_apes_process(MODEL_FN, mechanism="clip_laplace", clip=C, epsilons=EPS,
                       client_learning_rate=0.1, **stock)
