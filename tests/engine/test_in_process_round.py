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
