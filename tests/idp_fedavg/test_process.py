"""IDP-FedAvg LearningProcess builders: type signatures and one round per mode."""
import collections

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tff = pytest.importorskip("tensorflow_federated")

from tff_idp import models  # pylint: disable=g-import-not-at-top
from tff_idp.idp_fedavg import process as process_lib

pytestmark = pytest.mark.usefixtures("tff_runtime")

SPEC = collections.OrderedDict(x=tf.TensorSpec([None, 4], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))
MODEL_FN = models.tff_model_fn(lambda: models.build_logistic_regression(4, 3), SPEC)


def _dataset(seed):
  rng = np.random.default_rng(seed)
  return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=rng.normal(size=(12, 4)).astype(np.float32),
      y=rng.integers(0, 3, 12).astype(np.int32))).batch(4)


def _build(noise, scale=False):
  return process_lib.build_idp_fedavg_process(
      MODEL_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
      noise_multiplier=noise, expected_clients_per_round=10,
      per_client_clip_scale=scale, aggregator_kwargs=dict(noise_seed=0))


def test_dp_process_is_a_learning_process_with_expected_types():
  p = _build(0.5)
  assert isinstance(p, tff.learning.templates.LearningProcess)
  data_type = p.next.type_signature.parameter[1]
  assert str(data_type) == "{<x=float32[?,4],y=int32[?]>*}@CLIENTS"
  agg_metrics = p.next.type_signature.result.metrics.member["aggregator"]
  assert str(agg_metrics) == ("<clip=float32,noise_std=float32,mean_noise_std=float32,"
                              "unclipped_fraction=float32,diagnostics=<num_clients=float32,"
                              "nonfinite_updates=float32,invalid_clip_scales=float32>>")


def test_scale_process_takes_clip_scales_with_the_data():
  p = _build(0.5, scale=True)
  assert str(p.next.type_signature.parameter[1]) == (
      "{<data=<x=float32[?,4],y=int32[?]>*,clip_scale=float32*>}@CLIENTS")
  state = p.initialize()
  out = p.next(state, [process_lib.scaled_client_data(_dataset(i), s)
                       for i, s in enumerate([0.5, 1.0])])
  assert out.metrics["aggregator"]["diagnostics"]["num_clients"] == 2


def test_nonprivate_process_runs_and_has_no_dp_measurements():
  p = _build(None)
  out = p.next(p.initialize(), [_dataset(0), _dataset(1)])
  assert "clip" not in out.metrics["aggregator"]
  assert out.metrics["client_work"]["train"]["num_examples"] == 24


def test_scale_without_noise_is_rejected():
  with pytest.raises(ValueError, match="SCALE is DP"):
    _build(None, scale=True)


# Issue 51: the stock TFF keywords a TFF user reaches for.
def _build_with(noise, scale=False, **stock):
  return process_lib.build_idp_fedavg_process(
      MODEL_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
      noise_multiplier=noise, expected_clients_per_round=10,
      per_client_clip_scale=scale, aggregator_kwargs=dict(noise_seed=0), **stock)


@pytest.mark.parametrize("stock,match", [
    (dict(client_execution="tff"), r"client_execution='tff' belongs to "
     r"build_idp_fedavg_driver_process\(\)"),
    (dict(parallel_clients=2), "parallel_clients=2 belongs to build_idp_fedavg_driver_process"),
    (dict(model_aggregator=object()), "would replace the adaptive-clip DP mean"),
    (dict(client_weighting=tff.learning.ClientWeighting.NUM_EXAMPLES),
     "weights every sampled client equally"),
])
def test_a_dp_process_refuses_what_would_bypass_its_dp_mean_naming_the_fix(stock, match):
  with pytest.raises(ValueError, match=match):
    _build_with(0.5, **stock)


def test_stock_keywords_work_where_they_apply():
  """metrics_aggregator reaches every run's client work; the non-private run takes a model
  aggregator and a weighting as build_weighted_fed_avg does; UNIFORM is DP's own."""
  seen = []

  def counting_sum_then_finalize(*args, **kwargs):
    seen.append(1)
    return tff.learning.metrics.sum_then_finalize(*args, **kwargs)

  dp = _build_with(0.5, scale=True, metrics_aggregator=counting_sum_then_finalize,
                   client_weighting=tff.learning.ClientWeighting.UNIFORM)
  assert seen and isinstance(dp, tff.learning.templates.LearningProcess)
  plain = _build_with(None, model_aggregator=tff.aggregators.MeanFactory(),
                      client_weighting=tff.learning.ClientWeighting.UNIFORM)
  out = plain.next(plain.initialize(), [_dataset(0), _dataset(1)])
  assert out.metrics["client_work"]["train"]["num_examples"] == 24


@pytest.mark.parametrize("data,scale,match", [
    ("dataset", 1.5, r"clip_scale=1.5 must be in \(0, 1\]"),
    ("dataset", 0.0, "must be in"),
    ("dataset", float("nan"), "must be in"),
    ("array", 0.5, "takes the client's tf.data.Dataset, got ndarray"),
    ("scaled", 0.5, "already"),
])
def test_scaled_client_data_refuses_a_bad_input_when_it_is_built(data, scale, match):
  """Issue 51: a scale of 1.5 was accepted here and refused at the round, in terms of
  example counts."""
  given = {"dataset": _dataset(0), "array": np.zeros(3),
           "scaled": process_lib.scaled_client_data(_dataset(0), 0.5)}[data]
  with pytest.raises(ValueError, match=match):
    process_lib.scaled_client_data(given, scale)
