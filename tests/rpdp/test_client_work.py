"""rPDP-FL client work as TFF computations: signatures and behaviour."""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp.rpdp import client_work as process

pytestmark = pytest.mark.usefixtures("tff_runtime")

SPEC = collections.OrderedDict(x=tf.TensorSpec([None, 4], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))
MODEL_FN = models.tff_model_fn(lambda: models.build_logistic_regression(4, 3, seed=0), SPEC)


def _client(seed, n=20, q=0.5, round_num=1):
  rng = np.random.default_rng(seed)
  return process.record_dataset(rng.normal(size=(n, 4)).astype(np.float32),
                                rng.integers(0, 3, n).astype(np.int32),
                                np.full(n, q), (seed, round_num), batch_size=7)


def _empty():
  return process.record_dataset(np.zeros((0, 4), np.float32), np.zeros(0, np.int32),
                                np.zeros(0), (0, 0))


@pytest.fixture(scope="module")
def client_work():
  return process.build_record_dp_client_work(
      MODEL_FN, tff.learning.optimizers.build_sgdm(0.1), local_steps=3,
      noise_multiplier=1.0, clip_norm=1.0)


def test_client_work_type_signature(client_work):
  assert isinstance(client_work, tff.learning.templates.ClientWorkProcess)
  assert str(client_work.initialize.type_signature) == "( -> int64@SERVER)"
  state, weights, data = client_work.next.type_signature.parameter
  assert str(state) == "int64@SERVER"
  assert str(data) == "{<x=float32[?,4],y=int32[?],q=float32[?],seed=int64[?,2]>*}@CLIENTS"
  assert str(weights) == "{<trainable=<float32[4,3],float32[3]>,non_trainable=<>>}@CLIENTS"
  result = client_work.next.type_signature.result
  assert str(result.result) == ("{<update=<float32[4,3],float32[3]>,update_weight=float32>}"
                                "@CLIENTS")
  assert str(result.measurements) == (
      "<train=<loss=float32,sampled_records=float32,clipped_fraction=float32,"
      "mean_expected_batch=float32,participating_clients=float32>>@SERVER")


def test_update_weights_are_one_for_trained_clients_and_zero_for_empty(client_work):
  weights = tff.learning.models.ModelWeights(
      trainable=[np.zeros((4, 3), np.float32), np.zeros(3, np.float32)], non_trainable=[])
  out = client_work.next(client_work.initialize(), [weights] * 3,
                         [_client(1), _empty(), _client(2, q=0.0)])
  assert [r.update_weight for r in out.result] == [1.0, 0.0, 0.0]
  assert np.all(out.result[1].update[0] == 0) and np.all(out.result[2].update[0] == 0)
  train = out.measurements["train"]
  assert train["participating_clients"] == 1.0
  assert train["mean_expected_batch"] == pytest.approx(10.0)  # 20 records × q = 0.5
  assert train["sampled_records"] > 0


def _noise_only_updates(work, state, data, rounds):
  """The clients' updates of ``rounds`` successive rounds on the *same* datasets."""
  weights = tff.learning.models.ModelWeights(
      trainable=[np.zeros((4, 3), np.float32), np.zeros(3, np.float32)], non_trainable=[])
  updates = []
  for _ in range(rounds):
    out = work.next(state, [weights] * len(data), data)
    state = out.state
    updates.append([np.concatenate([np.ravel(u) for u in r.update]) for r in out.result])
  return state, updates


def test_same_client_datasets_every_round_draw_fresh_noise():
  """Privacy (issue 31 item 1): a stock loop that feeds the same datasets twice gets fresh noise.

  Bug caught: the client work drawing with the data's seed alone (no round
  counter), as before issue 31: round 1 and round 2 were then bit-identical,
  and differencing them cancels the noise. With σ = 50 and q = 1e-3 the
  update is almost pure noise (std ~ 50·1/0.02·lr per coordinate), so two
  independent rounds differ by about √2 of their norm; identical ones by 0.
  Deterministic given the fixed seeds: no flake.
  """
  work = process.build_record_dp_client_work(
      MODEL_FN, tff.learning.optimizers.build_sgdm(0.1), local_steps=1,
      noise_multiplier=50.0, clip_norm=1.0)
  data = [_client(3, n=20, q=1e-3), _client(4, n=20, q=1e-3)]
  start = work.initialize()
  state, (first, second) = _noise_only_updates(work, start, data, 2)
  assert state == start + 2
  for a, b in zip(first, second):
    assert np.linalg.norm(a) > 1.0
    assert np.linalg.norm(a - b) > 0.5 * np.linalg.norm(a)
  # Replaying the same round (same state, same data) replays the same release.
  _, (again,) = _noise_only_updates(work, start, data, 1)
  np.testing.assert_array_equal(first[0], again[0])


def test_fresh_round_noise_is_independent_across_rounds():
  """Statistical: the correlation of round-1 and round-2 noise on the same data is ~0.

  2 rounds × 2 clients × 15 coordinates of pure noise (q = 1e-3, 20
  records: the sampled set is almost always empty); the sample correlation
  of 30 independent normal pairs has sd ≈ 0.18, so |r| < 0.75 fails with
  probability < 1e-4 (identical noise gives r = 1). Seeded: fixed outcome.
  """
  work = process.build_record_dp_client_work(
      MODEL_FN, tff.learning.optimizers.build_sgdm(0.1), local_steps=1,
      noise_multiplier=50.0, clip_norm=1.0)
  data = [_client(5, n=20, q=1e-3), _client(6, n=20, q=1e-3)]
  _, (first, second) = _noise_only_updates(work, work.initialize(), data, 2)
  r = np.corrcoef(np.concatenate(first), np.concatenate(second))[0, 1]
  assert abs(r) < 0.75


def test_record_dataset_without_seed_draws_a_secret_one():
  a = process.record_dataset(np.zeros((3, 4), np.float32), np.zeros(3, np.int32), np.ones(3))
  b = process.record_dataset(np.zeros((3, 4), np.float32), np.zeros(3, np.int32), np.ones(3))
  seed_a = next(iter(a))["seed"].numpy()[0]
  seed_b = next(iter(b))["seed"].numpy()[0]
  assert not np.array_equal(seed_a, seed_b)
  with pytest.raises(ValueError, match="two integers"):
    process.record_dataset(np.zeros((3, 4), np.float32), np.zeros(3, np.int32), np.ones(3),
                           seed=(1, 2, 3))


def test_learning_process_round_and_padding_invariance():
  proc = process.build_rpdp_fedavg_process(
      MODEL_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=2,
      noise_multiplier=0.5, clip_norm=1.0)
  assert isinstance(proc, tff.learning.templates.LearningProcess)
  state = proc.initialize()
  a = proc.next(state, [_client(1), _client(2)])
  b = proc.next(state, [_client(1), _client(2), _empty(), _empty()])
  for u, v in zip(proc.get_model_weights(a.state).trainable,
                  proc.get_model_weights(b.state).trainable):
    np.testing.assert_allclose(u, v, rtol=1e-6, atol=1e-7)
  moved = proc.get_model_weights(a.state).trainable[0]
  assert np.any(moved != proc.get_model_weights(state).trainable[0])
  # An all-padding cohort leaves the model unchanged (no NaN from 0/0).
  c = proc.next(state, [_empty(), _empty()])
  np.testing.assert_array_equal(proc.get_model_weights(c.state).trainable[0],
                                proc.get_model_weights(state).trainable[0])


def test_record_dataset_checks_lengths():
  with pytest.raises(ValueError, match="one row per record"):
    process.record_dataset(np.zeros((3, 4), np.float32), np.zeros(3, np.int32),
                           np.zeros(2), (0, 0))


def test_readme_composition_example():
  """The "compose the client work into your own TFF process" snippet in docs/rpdp.md, as printed.

  The block between ``<!-- compose-example -->`` and the end of its code fence (moved out of
  README.md, issue 9) is executed; the names it leaves to the reader are supplied here.
  """
  import os  # pylint: disable=g-import-not-at-top
  import re  # pylint: disable=g-import-not-at-top
  page = os.path.join("docs", "rpdp.md")
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  text = open(os.path.join(root, page), encoding="utf-8").read()
  match = re.search(r"<!-- compose-example -->\n```python\n(.*?)```", text, re.S)
  assert match, f"{page} lost its <!-- compose-example --> block"
  rng = np.random.default_rng(0)
  scope = dict(model_fn=MODEL_FN,
               x_client=rng.normal(size=(12, 4)).astype(np.float32),
               y_client=rng.integers(0, 3, 12).astype(np.int32),
               q_client=np.full(12, 0.5), client_id="c0", round_num=1)
  exec(compile(match.group(1), f"{page}:compose-example", "exec"), scope)  # pylint: disable=exec-used
  process_, data = scope["process"], scope["data"]
  assert isinstance(process_, tff.learning.templates.LearningProcess)
  state = process_.initialize()
  out = process_.next(state, [data])
  assert out.metrics["client_work"]["train"]["participating_clients"] == 1.0


def test_ino_client_work_round_equals_the_plain_step_on_the_same_records():
  """INO-SGD inside the ClientWorkProcess: one round = the plain tf.function step."""
  from tff_idp.rpdp import dp_sgd  # pylint: disable=g-import-not-at-top
  from tff_idp.ino_sgd import importance  # pylint: disable=g-import-not-at-top
  weight_fn = importance.ino_example_weight_fn(gamma=3.0)
  work = process.build_record_dp_client_work(
      MODEL_FN, tff.learning.optimizers.build_sgdm(0.1), local_steps=3,
      noise_multiplier=1.0, clip_norm=1.0, example_weight_fn=weight_fn)
  weights = tff.learning.models.ModelWeights(
      trainable=[np.full((4, 3), 0.1, np.float32), np.zeros(3, np.float32)], non_trainable=[])
  out = work.next(np.int64(0), [weights], [_client(4)])  # the seed counter at 0
  rng = np.random.default_rng(4)
  x = rng.normal(size=(20, 4)).astype(np.float32)
  y = rng.integers(0, 3, 20).astype(np.int32)
  plain = {}
  for name, fn in (("ino", weight_fn), ("dp_sgd", None)):
    update = dp_sgd.build_local_dp_sgd(MODEL_FN(), tff.learning.optimizers.build_sgdm(0.1),
                                       3, 1.0, 1.0, example_weight_fn=fn)
    plain[name], _ = update(weights, x, y, np.full(20, 0.5, np.float32),
                            process.records.round_seed(tf.constant([4, 1], tf.int64), 0))
  for got, want in zip(out.result[0].update, plain["ino"]):
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-7)
  # The importance weights really change the step (γ = 3 covers several records).
  assert not np.allclose(plain["ino"][0].numpy(), plain["dp_sgd"][0].numpy())


# Issue 48 item 1: two runs (two initialize() calls, or two processes) fed the *same*
# client dataset objects, default secret seeds (record_dataset(seed=None)) included.
WIDE_FEATURES, WIDE_CLASSES = 999, 10  # 10,000 parameters: enough coordinates for r
WIDE_FN = models.tff_model_fn(
    lambda: models.build_logistic_regression(WIDE_FEATURES, WIDE_CLASSES, seed=0),
    collections.OrderedDict(x=tf.TensorSpec([None, WIDE_FEATURES], tf.float32),
                            y=tf.TensorSpec([None], tf.int32)))


def _wide_client(seed):
  rng = np.random.default_rng(seed)
  return process.record_dataset(rng.normal(size=(10, WIDE_FEATURES)).astype(np.float32),
                                rng.integers(0, WIDE_CLASSES, 10).astype(np.int32),
                                np.full(10, 1e-3))  # seed=None: the dataset's own secret


def _model_step(learning_process, state, data):
  before = np.concatenate([np.ravel(w) for w in
                           learning_process.get_model_weights(state).trainable])
  out = learning_process.next(state, data)
  after = np.concatenate([np.ravel(w) for w in
                          learning_process.get_model_weights(out.state).trainable])
  return after - before


@pytest.mark.parametrize("execution", ["tff", "in_process", "vectorized"])
def test_two_runs_on_the_same_datasets_share_no_noise(execution):
  """Privacy (issue 48): each initialize() draws a fresh secret that every client seed folds in.

  Bug caught: a seed counter that starts at a constant (0, as before issue
  48): two runs (a sweep over L on the same datasets) then drew identical
  noise, correlation +1.0000, and Δ_A·Σq/L_A − Δ_B·Σq/L_B cancels it. With
  q = 1e-3 the round's model step is pure noise (σ = 50) in 10,010
  coordinates; for independent runs the sample correlation has sd ≈ 0.01, so
  |r| < 0.05 fails with probability < 1e-6 (a 5-sd event). Each
  ``initialize()`` draws from OS entropy, so this is not seeded: the stated
  flake rate is the bound.
  """
  learning_process = process.build_rpdp_fedavg_driver_process(
      WIDE_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=1,
      noise_multiplier=50.0, clip_norm=1.0, client_execution=execution)
  data = [_wide_client(i) for i in range(2)]
  first = _model_step(learning_process, learning_process.initialize(), data)
  second = _model_step(learning_process, learning_process.initialize(), data)
  assert np.linalg.norm(first) > 0 and np.linalg.norm(second) > 0
  r = np.corrcoef(first, second)[0, 1]
  assert abs(r) < 0.05, f"two runs' noise correlates: r = {r:.4f}"


@pytest.mark.parametrize("stock,match", [
    (dict(client_execution="in_process"), "belongs to build_rpdp_fedavg_driver_process"),
    (dict(model_aggregator=tff.aggregators.MeanFactory()), "would replace the 0/1-weighted"),
    (dict(client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES),
     "weights every sampled client equally"),
    (dict(metrics_aggregator=tff.learning.metrics.sum_then_finalize), "reports its own sums"),
])
def test_stock_tff_keywords_are_refused_with_the_reason(stock, match):
  """Issue 51: code written for build_weighted_fed_avg (or the earlier builder) got Python's
  bare "unexpected keyword argument"."""
  with pytest.raises(ValueError, match=match):
    process.build_rpdp_fedavg_process(
        MODEL_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.5),
        server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=2,
        noise_multiplier=1.0, clip_norm=1.0, **stock)
