"""The state functions built without the round equal the composed TFF process's (issue 52).

For IDP-FedAvg's processes (non-private, DP, SCALE) with an optimizer that
has hyperparameters on both sides, and rPDP-FL's (its client work's state the
secret seed counter): every state function has the TFF
process's type signature, ``initialize`` gives the same state (its secret
parts aside), and each function gives the same result on the TFF process's
state, so states and checkpoints are interchangeable.
"""
import numpy as np
import pytest

tff = pytest.importorskip("tensorflow_federated")
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_idp import models  # pylint: disable=g-import-not-at-top
from tff_idp.engine import state_functions  # pylint: disable=g-import-not-at-top
from tff_idp.engine import in_process_round  # pylint: disable=g-import-not-at-top
from tff_idp.idp_fedavg import process as process_lib  # pylint: disable=g-import-not-at-top
from tff_idp.rpdp import client_work as rpdp_client_work  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.usefixtures("tff_runtime")

MODEL_FN = models.tff_model_fn(lambda: models.build_logistic_regression(4, 3, seed=2),
                               models.input_spec_for((4,)))
FUNCTIONS = ("initialize", "get_model_weights", "set_model_weights", "get_hparams",
             "set_hparams")


def _pair(noise, scale=False):
  kwargs = dict(client_optimizer=tff.learning.optimizers.build_sgdm(0.1, momentum=0.9),
                server_optimizer=tff.learning.optimizers.build_adam(0.01),
                noise_multiplier=noise, expected_clients_per_round=5.0,
                per_client_clip_scale=scale,
                aggregator_kwargs=dict(clipped_count_stddev=1.0) if noise else None)
  tff_process = process_lib.build_idp_fedavg_driver_process(
      MODEL_FN, client_execution="tff", **kwargs)
  fast = process_lib.build_idp_fedavg_driver_process(
      MODEL_FN, client_execution="vectorized", **kwargs)
  return tff_process, fast


def _scaled(structure, factor, shift=0.0):
  """Each value times ``factor`` plus ``shift``, in its own dtype."""
  return tf.nest.map_structure(
      lambda x: np.asarray(np.asarray(x) * factor + shift, dtype=np.asarray(x).dtype), structure)


def _assert_equal(a, b):
  tf.nest.map_structure(np.testing.assert_array_equal, a, b)


def _initial_states(fast, tff_process, equal_parts):
  """Both processes' initial states, after checking the signatures and the parts that must agree."""
  assert isinstance(fast, in_process_round.InProcessLearningProcess)
  assert isinstance(fast.reference, state_functions.StateFunctions)
  for name in FUNCTIONS:
    assert (getattr(fast, name).type_signature
            == getattr(tff_process, name).type_signature), name
  ours, theirs = fast.initialize(), tff_process.initialize()
  for part in equal_parts:
    _assert_equal(getattr(ours, part), getattr(theirs, part))
  return ours, theirs


@pytest.mark.parametrize("noise,scale", [(None, False), (0.5, False), (0.5, True)])
def test_state_functions_equal_the_tff_process(noise, scale):
  """Catches a state part out of order or missing, hparams of another part, or a setter
  that writes the wrong field."""
  tff_process, fast = _pair(noise, scale)
  # The DP aggregator's noise seed is drawn afresh at every initialize (secret).
  _, state = _initial_states(fast, tff_process,
                             ("global_model_weights", "distributor", "client_work", "finalizer"))
  # From here on, the TFF process's state through both processes' functions.
  _assert_equal(fast.get_model_weights(state), tff_process.get_model_weights(state))
  _assert_equal(fast.get_hparams(state), tff_process.get_hparams(state))
  weights = _scaled(tff_process.get_model_weights(state), 1.0, 1.0)
  _assert_equal(fast.set_model_weights(state, weights),
                tff_process.set_model_weights(state, weights))
  hparams = _scaled(tff_process.get_hparams(state), 0.5)
  _assert_equal(fast.set_hparams(state, hparams), tff_process.set_hparams(state, hparams))
  # Round trips that a swapped field would break.
  _assert_equal(fast.get_hparams(fast.set_hparams(state, hparams)), hparams)
  _assert_equal(fast.get_model_weights(fast.set_model_weights(state, weights)), weights)


@pytest.mark.parametrize("execution", ["in_process", "vectorized"])
def test_rpdp_state_functions_equal_the_tff_process(execution):
  """The seed counter's start is a secret drawn at every initialize: its type and the
  other parts must match, and the setters keep it."""
  kwargs = dict(client_optimizer=tff.learning.optimizers.build_sgdm(0.2, momentum=0.5),
                server_optimizer=tff.learning.optimizers.build_adam(0.01), local_steps=2,
                noise_multiplier=0.7, clip_norm=1.0)
  tff_process = rpdp_client_work.build_rpdp_fedavg_driver_process(
      MODEL_FN, client_execution="tff", **kwargs)
  fast = rpdp_client_work.build_rpdp_fedavg_driver_process(
      MODEL_FN, client_execution=execution, **kwargs)
  ours, theirs = _initial_states(fast, tff_process,
                                 ("global_model_weights", "distributor", "aggregator", "finalizer"))
  assert ours.client_work != theirs.client_work  # two secret draws in [0, 2^62)
  _assert_equal(fast.get_hparams(theirs), tff_process.get_hparams(theirs))
  hparams = _scaled(tff_process.get_hparams(theirs), 0.5)
  _assert_equal(fast.set_hparams(theirs, hparams), tff_process.set_hparams(theirs, hparams))


def test_two_initializes_draw_their_own_secrets():
  """Two runs built the same way never share noise: each ``initialize()`` of the state
  functions draws its own DP noise seed (IDP-FedAvg) and seed-counter start (rPDP-FL).

  Catches a seed drawn once at build time and reused by every initialize.
  """
  _, fast = _pair(0.5)
  first, second = fast.initialize(), fast.initialize()
  assert first.aggregator["noise_seed"] != second.aggregator["noise_seed"]
  rpdp = rpdp_client_work.build_rpdp_fedavg_driver_process(
      MODEL_FN, client_optimizer=tff.learning.optimizers.build_sgdm(0.2),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=1,
      noise_multiplier=0.7, clip_norm=1.0, client_execution="vectorized")
  assert rpdp.initialize().client_work != rpdp.initialize().client_work


def test_the_state_functions_have_no_round_and_say_where_it_is():
  _, fast = _pair(None)
  with pytest.raises(AttributeError, match="build_\\*_process"):
    fast.reference.next  # pylint: disable=pointless-statement


def test_model_delta_client_work_state_is_tffs():
  """The client work's state part equals ``build_model_delta_client_work``'s, for an
  optimizer with hyperparameters (momentum SGD) and one without."""
  for optimizer in (tff.learning.optimizers.build_sgdm(0.3, momentum=0.5),
                    tff.learning.optimizers.build_adagrad(0.2)):
    theirs = tff.learning.templates.build_model_delta_client_work(
        MODEL_FN, optimizer, tff.learning.ClientWeighting.UNIFORM)
    ours = state_functions.model_delta_client_work_state(optimizer)
    assert ours.initialize.type_signature == theirs.initialize.type_signature
    _assert_equal(ours.initialize(), theirs.initialize())
    hparams = _scaled(theirs.initialize(), 2.0)
    _assert_equal(ours.set_hparams(theirs.initialize(), hparams), hparams)
    _assert_equal(ours.get_hparams(hparams), theirs.get_hparams(hparams))
