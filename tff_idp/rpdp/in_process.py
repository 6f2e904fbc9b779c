"""rPDP-FL's in-process client execution: the record-level DP-SGD client update (issue 23).

:class:`RecordDpClientUpdate` runs one sampled client's local training (Alg. 3
lines 9-17: τ steps of Poisson DP-SGD at the records' own rates q_j, clipped
at L, Gaussian noise σ·L) in the driver's process, with the *same* function
the TFF client work runs (:func:`tff_idp.rpdp.dp_sgd.build_local_dp_sgd`) on
the *same* client dataset (records, rates and the client's secret seed,
:mod:`tff_idp.rpdp.records`). The record sampling and the noise are drawn
from that seed with stateless ops, so a client's update equals the TFF
client work's within float tolerance (``tests/rpdp/test_in_process.py``).
Record-level DP adds no server noise, so the server step (the 0/1-weighted
mean and the server optimizer) is the TFF process's own, run by
:class:`tff_idp.engine.in_process_round.InProcessLearningProcess`.

The TFF client work pays ~25 ms per client (shipping the records, starting
the client computation, concatenating the batches in a ``tf.data`` reduce);
here a client costs one call of a traced function.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.engine import in_process_round
from tff_idp.rpdp import dp_sgd
from tff_idp.rpdp import record_stats
from tff_idp.rpdp import records


def next_round(round_num: Any) -> np.int64:
  """The client work's next state: the seed counter plus one (as its TFF ``next`` does)."""
  return np.int64(round_num) + np.int64(1)


class RecordDpClientUpdate:
  """One client's record-level DP-SGD in this process (module doc); one model copy.

  Called as ``(hparams, initial_weights, client_dataset) -> (Δ, weight,
  statistics)``: Δ = initial − final trainable weights as numpy arrays, the
  update weight 1 if the client took steps and 0 if it had no records or only
  excluded ones (so padding clients never move the mean), and the sums of
  :mod:`tff_idp.rpdp.record_stats`. ``hparams`` is the client work's state,
  the seed counter (a secret start per ``initialize()`` plus the round): it
  is folded into the client's seed (:func:`tff_idp.rpdp.records.round_seed`),
  as the TFF client work does.
  """

  def __init__(self, model_fn: Callable[[], tff.learning.models.VariableModel],
               optimizer: tff.learning.optimizers.Optimizer, *, local_steps: int,
               noise_multiplier: float, clip_norm: float,
               loss_fn: dp_sgd.LossFn = dp_sgd.sparse_categorical_crossentropy,
               example_weight_fn: Optional[dp_sgd.ExampleWeightFn] = None):
    self._model = model_fn()
    update = dp_sgd.build_local_dp_sgd(self._model, optimizer, local_steps, noise_multiplier,
                                       clip_norm, loss_fn, example_weight_fn)
    weights = tff.learning.models.ModelWeights.from_model(self._model)
    self._weights_spec = tf.nest.map_structure(lambda v: tf.TensorSpec(v.shape, v.dtype),
                                               weights)
    spec = records.record_element_spec(self._model.input_spec)
    # One trace for every client, whatever its number of records.
    self._update = update.get_concrete_function(
        self._weights_spec, spec["x"], spec["y"], spec[records.RATE_KEY],
        tf.TensorSpec([2], tf.int64))
    _, stats_spec = self._update.structured_outputs
    self.stats_type = tff.types.tensorflow_to_type(record_stats.client_stats(
        {k: tf.TensorSpec(stats_spec[k].shape, stats_spec[k].dtype)
         for k in record_stats.STAT_KEYS}, tf.TensorSpec([], tf.float32)))

  def __call__(self, hparams: Any, initial_weights: Any, client_input: tf.data.Dataset
               ) -> tuple[Any, np.float32, Any]:
    weights = tf.nest.pack_sequence_as(self._weights_spec, tf.nest.flatten(initial_weights))
    x, y, q, seed = records.collect_records_eagerly(client_input,
                                                    in_process_round.client_data_options())
    delta, stats = self._update(weights, x, y, q, records.round_seed(seed, hparams), None, None)
    weight = np.float32(stats["steps"].numpy() > 0)
    return (tf.nest.map_structure(lambda t: t.numpy(), delta), weight,
            tf.nest.map_structure(np.asarray, record_stats.client_stats(
                {k: stats[k].numpy() for k in record_stats.STAT_KEYS}, weight)))
