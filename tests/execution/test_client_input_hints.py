"""SAMPLE and SCALE client inputs swapped: one line that names the input, not TFF's TypeError."""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tff_idp
from tff_idp.errors import ClientInputError
from tff_idp.execution import client_input_hints


def _model_fn():
  keras = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(3,)),
                               tf.keras.layers.Dense(2)])
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 3], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  return tff.learning.models.from_keras_model(
      keras, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=spec)


def _process(scale):
  return tff_idp.build_idp_fedavg_process(
      _model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), noise_multiplier=1.0,
      expected_clients_per_round=2.0, aggregator_kwargs=dict(clipped_count_stddev=2.0),
      per_client_clip_scale=scale)


DATASET = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
    x=np.zeros((4, 3), np.float32), y=np.zeros(4, np.int32))).batch(2)


def test_a_swapped_input_names_the_input_each_process_takes(tff_runtime):  # pylint: disable=unused-argument
  scale, sample = _process(True), _process(False)
  with pytest.raises(ClientInputError, match="this is a SCALE process .*scaled_client_data"):
    scale.next(scale.initialize(), [DATASET, DATASET])
  with pytest.raises(ClientInputError, match="takes each client's tf.data.Dataset; "
                                             "scaled_client_data.*belong to the SCALE"):
    sample.next(sample.initialize(), [tff_idp.scaled_client_data(DATASET, 0.5)] * 2)
  # The right inputs still run.
  scale.next(scale.initialize(), [tff_idp.scaled_client_data(DATASET, 0.5)] * 2)
  sample.next(sample.initialize(), [DATASET, DATASET])


class _Comp:
  def __init__(self, parameter):
    self.type_signature = tff.FunctionType(parameter, np.float32)


def test_only_those_type_errors_get_a_hint():
  sequence = tff.SequenceType(np.float32)
  sample = _Comp(tff.StructType([("client_data", tff.FederatedType(sequence, tff.CLIENTS))]))
  scale = _Comp(tff.StructType([("client_data", tff.FederatedType(tff.StructType(
      [("data", sequence), ("clip_scale", sequence)]), tff.CLIENTS))]))
  other = _Comp(tff.StructType([("x", tff.FederatedType(sequence, tff.CLIENTS))]))
  struct = TypeError("Unable to convert a Python object of type X into an `Struct`.")
  serialize = TypeError("Cannot serialize Python type numpy.ndarray as TFF type float32*.")
  assert "SCALE process" in client_input_hints.hint_for(scale, struct)
  assert client_input_hints.hint_for(scale, serialize) is None
  hint = client_input_hints.hint_for(sample, serialize)
  assert hint.startswith("this process takes each client's tf.data.Dataset. TFF said:")
  assert client_input_hints.hint_for(sample, struct) is None
  assert client_input_hints.hint_for(other, serialize) is None
  assert client_input_hints.hint_for(object(), serialize) is None

  def raises(comp, arg):
    raise TypeError("unrelated")
  with pytest.raises(TypeError, match="unrelated"):
    client_input_hints.explaining_client_inputs(raises)(sample, None)
