"""Training metrics fit for a release (issue 48 C): un-noised ones never pass.

Under ``train_model(train_metrics_manager=...)`` IDP-FedAvg and rPDP-FL
release the cohort's exact loss, ``num_examples``, sampled-record and
clipped counts. ``ReleaseMetricsManager`` passes on only the allow-listed
paths the DP analysis covers.
"""
import asyncio
import collections
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tff_idp
from tff_idp.engine import release_metrics
from tff_idp.errors import ToolkitValueError

OD = collections.OrderedDict

# The structures train_model released in TFF 0.87 (round 1 of each process).
IDP_FEDAVG = OD(
    distributor=(), client_work=OD(),
    aggregator=OD(clip=0.1, noise_std=0.05, mean_noise_std=0.0167, unclipped_fraction=-2.07,
                  diagnostics=OD(num_clients=4.0, nonfinite_updates=0.0,
                                 invalid_clip_scales=0.0)),
    finalizer=OD(update_non_finite=0),
    model_metrics=OD(loss=2.86, sparse_categorical_accuracy=0.25, num_examples=40,
                     num_batches=12))
RPDP = OD(
    distributor=(), client_work=OD(), aggregator=OD(mean_value=(), mean_weight=()),
    finalizer=OD(update_non_finite=0),
    model_metrics=OD(loss=2.8, sampled_records=5.0, clipped_fraction=1.0,
                     mean_expected_batch=5.0, participating_clients=1.0))


def _paths(value, prefix=""):
  if not isinstance(value, dict):
    return [prefix]
  return [p for k, v in value.items() for p in _paths(v, f"{prefix}/{k}" if prefix else k)]


def _released(manager_value, key=1):
  memory = tff.program.MemoryReleaseManager()
  asyncio.run(tff_idp.ReleaseMetricsManager(memory).release(manager_value, key))
  return memory.values()


def test_unnoised_metrics_are_dropped_and_covered_ones_pass():
  """Bug caught: model_metrics (exact loss, counts) or the exact cohort size released."""
  released = _released(IDP_FEDAVG)
  assert list(released) == [1]
  assert sorted(_paths(released[1])) == [
      "aggregator/clip", "aggregator/mean_noise_std", "aggregator/noise_std",
      "aggregator/unclipped_fraction", "finalizer/update_non_finite"]
  assert released[1]["aggregator"]["clip"] == 0.1
  assert isinstance(released[1]["aggregator"], OD)
  assert _paths(_released(RPDP)[1]) == ["finalizer/update_non_finite"]
  for path in release_metrics.UNNOISED_METRICS:
    assert path not in release_metrics.COVERED_METRICS, path


def test_unknown_metrics_are_dropped_and_nothing_covered_releases_nothing():
  value = OD(model_metrics=OD(loss=1.0), aggregator=OD(new_exact_count=3.0),
             finalizer=7)   # not a mapping where the allowed path goes deeper
  assert _released(value) == {}


def test_a_covered_list_of_ones_own():
  memory = tff.program.MemoryReleaseManager()
  manager = tff_idp.ReleaseMetricsManager(memory, covered=["aggregator"])
  asyncio.run(manager.release(IDP_FEDAVG, 3))
  assert manager.covered == frozenset({"aggregator"})
  assert list(memory.values()[3]) == ["aggregator"]
  assert memory.values()[3]["aggregator"]["diagnostics"]["num_clients"] == 4.0  # yours to cover


@pytest.mark.parametrize("args", [(object(),), (None,),
                                  (tff.program.MemoryReleaseManager(), [""]),
                                  (tff.program.MemoryReleaseManager(), [3])])
def test_bad_arguments_are_refused(args):
  with pytest.raises(ToolkitValueError):
    tff_idp.ReleaseMetricsManager(*args)


def test_train_model_releases_only_covered_idp_fedavg_metrics(tmp_path, tff_runtime):
  """IDP-FedAvg, one round under train_model: the noised clip passes, the cohort's exact
  loss, num_examples and num_clients do not."""
  spec = OD(x=tf.TensorSpec([None, 3], tf.float32), y=tf.TensorSpec([None], tf.int32))

  def model_fn():
    keras = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(3,)),
                                 tf.keras.layers.Dense(2)])
    return tff.learning.models.from_keras_model(
        keras, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=spec)

  rng = np.random.default_rng(0)
  clients = [(rng.normal(size=(4, 3)).astype(np.float32),
              rng.integers(0, 2, 4).astype(np.int32)) for _ in range(3)]
  source = tff_idp.IdpFedAvgDataSource(clients, np.ones(3), batch_size=2, rounds=1)
  process = tff_idp.build_idp_fedavg_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), noise_multiplier=0.5,
      expected_clients_per_round=3.0, aggregator_kwargs=dict(clipped_count_stddev=5.0))
  everything, kept = tff.program.MemoryReleaseManager(), tff.program.MemoryReleaseManager()
  with tff_runtime.program_context():
    asyncio.run(tff.learning.programs.train_model(
        train_process=process, train_data_source=source,
        train_per_round_clients=source.clients_per_round, train_total_rounds=1,
        program_state_manager=tff_idp.PrivateFileProgramStateManager(str(tmp_path)),
        model_output_manager=tff.program.MemoryReleaseManager(),
        train_metrics_manager=tff.program.GroupingReleaseManager(
            [everything, tff_idp.ReleaseMetricsManager(kept)]),
        evaluation_manager=None, evaluation_periodicity=1))
  raw = set(_paths(everything.values()[1]))
  assert {"model_metrics/loss", "model_metrics/num_examples",
          "aggregator/diagnostics/num_clients"} <= raw   # what train_model would release
  assert set(_paths(kept.values()[1])) == {
      "aggregator/clip", "aggregator/noise_std", "aggregator/mean_noise_std",
      "aggregator/unclipped_fraction", "finalizer/update_non_finite"}


def test_the_kept_structure_keeps_each_mappings_type():
  """A dict stays a dict, an OrderedDict an OrderedDict; a mapping that cannot be built from
  its pairs (a read-only view) comes back as an OrderedDict of the kept pairs."""
  covered = ["aggregator/clip", "finalizer/update_non_finite"]
  plain = {"aggregator": {"clip": 0.1, "noise_std": 0.05}, "model_metrics": {"loss": 2.0},
           "finalizer": {"update_non_finite": 0}}
  kept = release_metrics.keep_covered(plain, covered)
  assert kept == {"aggregator": {"clip": 0.1}, "finalizer": {"update_non_finite": 0}}
  assert type(kept) is dict and type(kept["aggregator"]) is dict
  view = types.MappingProxyType({"aggregator": types.MappingProxyType(
      {"clip": 0.1, "noise_std": 0.05}), "model_metrics": {"loss": 2.0}})
  kept = release_metrics.keep_covered(view, covered)
  assert kept == OD(aggregator=OD(clip=0.1))
  assert type(kept) is OD and type(kept["aggregator"]) is OD
