"""The client works' seed counter: a secret start at every initialize(), +1 per round (issue 48)."""
import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp.engine import tff_composition

pytestmark = pytest.mark.usefixtures("tff_runtime")


def test_each_initialize_draws_its_own_secret_start():
  """Bug caught: a constant start (two runs on the same datasets then share noise).

  20 draws from [0, 2^62): a repeat has probability below 1e-16.
  """
  initial, advance = tff_composition.round_counter()
  starts = [int(initial()) for _ in range(20)]
  assert len(set(starts)) == 20
  assert all(0 <= s < tff_composition.SEED_COUNTER_START_BOUND for s in starts)
  assert advance(np.int64(starts[0])) == starts[0] + 1
  # int64 at the server, as the client works broadcast and fold it in.
  assert str(initial.type_signature) == "( -> int64)"
  assert str(advance.type_signature) == "(int64 -> int64)"


class _Process:
  """A stand-in learning process: a state with a ``client_work`` field and one attribute."""

  def __init__(self):
    self.State = collections.namedtuple("State", ["global_model_weights", "client_work"])
    self.label = "inner"

  def initialize(self):
    return self.State(global_model_weights=[1.0], client_work=np.int64(123))


def test_with_seed_counter_start_sets_the_runs_start_and_delegates():
  wrapped = tff_composition.WithSeedCounterStart(_Process(), 2**62 - 1)
  state = wrapped.initialize()
  assert state.client_work == 2**62 - 1 and state.global_model_weights == [1.0]
  assert wrapped.label == "inner"
  assert "secret" in repr(wrapped) and str(2**62 - 1) not in repr(wrapped)


def test_with_seed_counter_start_accepts_the_whole_range():
  for start in (0, 1, np.int64(7)):
    assert tff_composition.WithSeedCounterStart(_Process(), start).initialize().client_work \
        == start


@pytest.mark.parametrize("start", [-1, 2**62, True])
def test_with_seed_counter_start_refuses_starts_that_can_overflow(start):
  with pytest.raises(ValueError, match=r"\[0, 2\^62\)"):
    tff_composition.WithSeedCounterStart(_Process(), start)


def test_map_client_results_post_processes_each_clients_result_with_its_side_input():
  """SCALE's clip scale and the audit's canaries plug in here: each client's own side value."""
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 2], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(lambda: models.build_logistic_regression(2, 2, seed=0), spec)
  inner = tff.learning.templates.build_model_delta_client_work(
      model_fn, tff.learning.optimizers.build_sgdm(0.1),
      client_weighting=tff.learning.ClientWeighting.UNIFORM)
  result_type = inner.next.type_signature.result.result.member

  @tff.tensorflow.computation(result_type, tff.SequenceType(np.float32))
  def scale_weight(result, side):
    scale = side.reduce(tf.constant(0.0), lambda _, x: x)  # a 1-element sequence
    return tff.learning.templates.ClientResult(update=result.update,
                                               update_weight=result.update_weight * scale)

  work = tff_composition.map_client_results(inner, "scale", tff.SequenceType(np.float32),
                                            scale_weight)
  assert str(work.next.type_signature.parameter[2]).startswith("{<data=")
  assert "scale=float32*" in str(work.next.type_signature.parameter[2])
  weights = tff.learning.models.ModelWeights.from_model(model_fn())
  data = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
      x=np.ones((4, 2), np.float32), y=np.zeros(4, np.int32))).batch(2)
  state = work.initialize()
  def side(value):
    return tf.data.Dataset.from_tensor_slices(np.array([value], np.float32))

  out = work.next(state, [weights] * 2, [collections.OrderedDict(data=data, scale=side(0.5)),
                                          collections.OrderedDict(data=data, scale=side(2.0))])
  assert [r.update_weight for r in out.result] == [0.5, 2.0]
  reference = inner.next(state, [weights] * 2, [data, data])
  for got, want in zip(out.result[0].update, reference.result[0].update):
    np.testing.assert_allclose(got, want)
  assert out.state == reference.state
  assert out.measurements == reference.measurements
  assert work.get_hparams(state) == inner.get_hparams(state)
  # The inner client work's hyperparameters (its learning rate) stay settable.
  faster = work.set_hparams(state, collections.OrderedDict(learning_rate=np.float32(0.5)))
  assert work.get_hparams(faster)["learning_rate"] == pytest.approx(0.5)
