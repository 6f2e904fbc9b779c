"""rPDP-FL's in-process client execution (issue 23) equals its TFF round within float tolerance.

Both processes start from the same state and get equal client datasets (the
records, their rates q_j and the client's secret seed): the record sampling
and the DP-SGD noise come from that seed through stateless ops, so the noised
updates are comparable. Tolerance 1e-5 (float32 training of the same ops in
the TFF worker and in this process).
"""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp.engine import in_process_round
from tff_idp.rpdp import client_work
from tff_idp.rpdp import in_process

from tests import tree_checks  # pylint: disable=g-bad-import-order

pytestmark = pytest.mark.usefixtures("tff_runtime")

ATOL = 1e-5
SPEC = collections.OrderedDict(x=tf.TensorSpec([None, 6], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))
MLP_FN = models.tff_model_fn(lambda: models.build_mlp(6, 3, hidden=8), SPEC)


def _client(i, round_num, n=None, q=0.5):
  rng = np.random.default_rng(100 * round_num + i)
  n = 12 + 3 * i if n is None else n  # clients of different sizes: one trace for all
  return client_work.record_dataset(
      rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32),
      rng.uniform(0.2, 0.9, n) if q is None else np.full(n, q), (i, round_num), batch_size=5)


def _build(execution, parallel=None, steps=3, model_fn=MLP_FN, **kw):
  return client_work.build_rpdp_fedavg_driver_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.2),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=steps,
      noise_multiplier=0.7, clip_norm=1.0, client_execution=execution,
      parallel_clients=parallel, **kw)


def _assert_close(a, b):
  tree_checks.assert_trees_close(a, b, ATOL)


@pytest.mark.parametrize("parallel", [1, 2])
def test_rounds_equal_the_tff_rounds(parallel):
  reference, local = _build("tff"), _build("in_process", parallel=parallel)
  assert isinstance(local, in_process_round.InProcessLearningProcess)
  state = reference.initialize()
  local_state = state
  for r in range(3):
    cohort = lambda: [_client(i, r, q=None) for i in range(4)]  # noqa: E731
    ref, out = reference.next(state, cohort()), local.next(local_state, cohort())
    _assert_close(ref.state, out.state)
    assert tf.nest.map_structure(lambda *_: None, ref.metrics) == \
        tf.nest.map_structure(lambda *_: None, out.metrics)
    _assert_close(ref.metrics, out.metrics)
    state, local_state = ref.state, out.state
  moved = local.get_model_weights(local_state).trainable[0]
  assert np.any(moved != local.get_model_weights(local.initialize()).trainable[0])


def test_empty_and_all_excluded_clients_have_weight_zero_as_in_tff():
  reference, local = _build("tff"), _build("in_process", parallel=1)
  state = reference.initialize()
  cohort = lambda: [_client(0, 1), _client(1, 1, n=0), _client(2, 1, q=0.0)]  # noqa: E731
  ref, out = reference.next(state, cohort()), local.next(state, cohort())
  _assert_close(ref.state, out.state)
  _assert_close(ref.metrics, out.metrics)
  assert out.metrics["client_work"]["train"]["participating_clients"] == 1.0
  update = local.client_updates[0]
  _, weight, stats = update(np.int64(1), local.get_model_weights(state), _client(3, 1, n=0))
  assert weight == 0.0 and stats["participating"] == 0.0 and stats["steps"] == 0


def test_an_all_padding_cohort_leaves_the_model_unchanged():
  local = _build("in_process")
  state = local.initialize()
  out = local.next(state, [_client(0, 1, n=0)] * 2)
  _assert_close(local.get_model_weights(state).trainable,
                local.get_model_weights(out.state).trainable)


def test_auto_picks_vectorized_in_process_or_tff_by_model_and_the_audit():
  # A small dense model: vectorized (issue 35); with per-example weights it is not served: TFF.
  assert _build("auto").cohort_update is not None  # 83 params
  weighted = _build("auto", example_weight_fn=lambda losses, thresholds: tf.ones_like(losses))
  assert not isinstance(weighted, in_process_round.InProcessLearningProcess)
  cnn_spec = collections.OrderedDict(x=tf.TensorSpec([None, 28, 28, 1], tf.float32),
                                     y=tf.TensorSpec([None], tf.int32))
  cnn_fn = models.tff_model_fn(lambda: models.build_rpdp_mnist_cnn(), cnn_spec)
  assert isinstance(_build("auto", model_fn=cnn_fn), in_process_round.InProcessLearningProcess)
  from tff_idp.audit import canary_replacement, directions  # pylint: disable=g-import-not-at-top
  replacement = canary_replacement.CanaryReplacement(directions.canary_seeds(0, 4))
  audit = _build("auto", model_fn=cnn_fn, record_replacement=replacement)
  assert not isinstance(audit, in_process_round.InProcessLearningProcess)
  with pytest.raises(ValueError, match="client_execution='tff'"):
    _build("in_process", record_replacement=replacement)


@pytest.mark.parametrize("kwargs,match", [
    (dict(execution="gpu"), "one of auto, tff, in_process"),
    (dict(execution="in_process", parallel=0), "whole number >= 1"),
])
def test_bad_settings_are_refused(kwargs, match):
  with pytest.raises(ValueError, match=match):
    _build(**kwargs)


def test_client_update_matches_the_local_dp_sgd_function_directly():
  """The in-process update is build_local_dp_sgd on the collected records, nothing else."""
  from tff_idp.rpdp import dp_sgd  # pylint: disable=g-import-not-at-top
  update = in_process.RecordDpClientUpdate(
      MLP_FN, tff.learning.optimizers.build_sgdm(0.2), local_steps=3, noise_multiplier=0.7,
      clip_norm=1.0)
  model = MLP_FN()
  weights = tff.learning.models.ModelWeights.from_model(model)
  initial = tf.nest.map_structure(lambda v: v.numpy(), weights)
  direct = dp_sgd.build_local_dp_sgd(model, tff.learning.optimizers.build_sgdm(0.2), 3, 0.7,
                                     1.0)
  data = _client(1, 2, q=None)
  x, y, q, seed = client_work.collect_records(data)
  want, stats = direct(initial, x, y, q, client_work.records.round_seed(seed, 4))
  got, weight, got_stats = update(np.int64(4), initial, data)
  _assert_close(want, got)
  assert weight == 1.0 and got_stats["steps"] == stats["steps"].numpy() == 3


def test_states_are_interchangeable_with_the_tff_process():
  """A checkpoint of one execution resumes in the other (same state structure and values)."""
  reference, local = _build("tff"), _build("in_process", parallel=1)
  state = reference.initialize()
  assert tf.nest.map_structure(lambda *_: None, state) == \
      tf.nest.map_structure(lambda *_: None, local.initialize())
  after_tff = reference.next(state, [_client(i, 0) for i in range(3)]).state
  crossed = local.next(after_tff, [_client(i, 1) for i in range(3)]).state
  straight = reference.next(after_tff, [_client(i, 1) for i in range(3)]).state
  _assert_close(straight, crossed)


def test_same_client_datasets_every_round_draw_fresh_noise_in_process():
  """Privacy (issue 31 item 1), in-process execution: the round counter advances and is folded in.

  Bug caught: an in-process round that does not advance the client work's
  round counter (or ignores it), so the same datasets fed twice repeat the
  noise bit for bit. q = 1e-3: the update is almost pure noise.
  Deterministic given the seeds.
  """
  local = _build("in_process", parallel=1, steps=1)
  data = [_client(i, 0, q=1e-3) for i in range(2)]
  state = local.initialize()
  first = local.next(state, data)
  second = local.next(first.state, data)
  assert first.state.client_work == state.client_work + 1
  assert second.state.client_work == state.client_work + 2
  w0 = np.concatenate([np.ravel(w) for w in local.get_model_weights(state).trainable])
  w1 = np.concatenate([np.ravel(w) for w in local.get_model_weights(first.state).trainable])
  w2 = np.concatenate([np.ravel(w) for w in local.get_model_weights(second.state).trainable])
  step1, step2 = w1 - w0, w2 - w1
  assert np.linalg.norm(step1) > 0
  assert np.linalg.norm(step1 - step2) > 0.5 * np.linalg.norm(step1)
