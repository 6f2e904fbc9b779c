"""The centralized record-level DP-SGD trainer (IDP-SGD / INO-SGD, INO-SGD Alg. 1)."""
import numpy as np
import pytest
import tensorflow as tf

from tff_idp import models
from tff_idp.accounting.owner import plan as owner_plan
from tff_idp.ino_sgd import importance
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.centralized import trainer as centralized


def _data(n=300, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 6)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.int32) + 2 * (x[:, 1] > 0).astype(np.int32)
  return x, y


def _builder():
  return models.build_logistic_regression(6, 4, seed=0)


def _weights(run):
  return [np.asarray(w) for w in run.final_weights.trainable]


def _train(q, clip_norms=None, weight_fn=None, seed=0, steps=12, eval_every=5):
  x, y = _data()
  return centralized.train_record_dp_sgd(
      _builder, x, y, q, 1.0, 1.0, 0.5, steps, PrivacyRandomness.from_seed(seed, "t"),
      lambda m: 0.5, eval_every, clip_norms=clip_norms, example_weight_fn=weight_fn)


def test_gamma_zero_reproduces_idp_sgd_bit_for_bit():
  """INO-SGD with γ = 0 is IDP-SGD (Alg. 1 as γ → 0): same noise, same batches, same model."""
  q = np.full(300, 0.2, np.float32)
  thresholds = np.where(np.arange(300) % 2 == 0, 0.4, 1.0).astype(np.float32)
  idp = _train(q, thresholds)
  ino0 = _train(q, thresholds, importance.ino_example_weight_fn(0.0))
  for a, b in zip(_weights(idp), _weights(ino0)):
    np.testing.assert_array_equal(a, b)
  ino = _train(q, thresholds, importance.ino_example_weight_fn(20.0))
  assert any(not np.array_equal(a, b) for a, b in zip(_weights(idp), _weights(ino)))


def test_chunks_history_and_diagnostics():
  run = _train(np.full(300, 0.1, np.float32), steps=12, eval_every=5)
  assert [s for s, _ in run.history] == [5, 10, 12]
  assert [s for s, _ in run.chunk_diagnostics] == [5, 10, 12]
  assert run.history[-1][1] == {"accuracy": 0.5}
  assert 5 < run.mean_batch < 60  # E = 30 per step
  assert 0.0 <= run.clipped_fraction <= 1.0
  assert centralized.eval_chunks(12, 0) == [12]


def test_secret_randomness_differs_between_runs():
  q = np.full(300, 0.2, np.float32)
  x, y = _data()
  runs = [centralized.train_record_dp_sgd(_builder, x, y, q, 1.0, 1.0, 0.5, 3,
                                          PrivacyRandomness.secret(), lambda m: 0.0)
          for _ in range(2)]
  assert any(not np.array_equal(a, b) for a, b in zip(_weights(runs[0]), _weights(runs[1])))


def test_scale_plan_thresholds_reach_the_step_and_are_checked():
  x, y = _data()
  owners = (y >= 2).astype(int)
  plan = owner_plan.plan_owners([0.5, 2.0], np.bincount(owners), 1e-5, 10, 30,
                                mechanism="scale")
  run = _train(plan.record_rates(owners), plan.record_thresholds(owners), steps=4,
               eval_every=0)
  assert len(run.history) == 1
  with pytest.raises(tf.errors.InvalidArgumentError, match="must not exceed clip_norm"):
    _train(np.full(300, 0.2, np.float32), np.full(300, 1.5, np.float32), steps=2)


def test_rates_must_match_records():
  with pytest.raises(ValueError, match="one rate per record"):
    _train(np.full(10, 0.2, np.float32))
