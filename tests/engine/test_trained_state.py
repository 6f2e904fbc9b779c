"""Loading train_model's saved program state through the toolkit's public call (issue 51)."""
import asyncio

import numpy as np
import pytest
import tensorflow_federated as tff
# Only to save a state as train_model does, the way the test's "earlier run" would.
from tensorflow_federated.python.learning.programs import training_program_logic

import tff_idp
from tests.engine import test_program_state
from tff_idp.errors import ToolkitValueError


@pytest.fixture(name="process_and_source", scope="module")
def process_and_source_fixture():
  return test_program_state.tiny_rpdp_process_and_source()


def test_the_latest_saved_version_comes_back_with_its_round_and_iterator(
    tmp_path, tff_runtime, process_and_source):
  process, source = process_and_source
  manager = tff_idp.PrivateFileProgramStateManager(str(tmp_path / "state"))
  iterator = source.iterator()

  async def save_two_versions():  # as train_model saves after rounds 1 and 2
    initial = await tff.program.materialize_value(process.initialize())
    weights = await tff.program.materialize_value(process.get_model_weights(initial))
    moved = tff.learning.models.ModelWeights(
        trainable=[w + 1.0 for w in weights.trainable], non_trainable=[])
    later = await tff.program.materialize_value(process.set_model_weights(initial, moved))
    for version, state in ((1, initial), (2, later)):
      await manager.save(training_program_logic.ProgramState(state, version, 0, iterator),
                         version)
    return moved

  with tff_runtime.program_context():
    moved = asyncio.run(save_two_versions())
    loaded = tff_idp.load_trained_state(manager, process, source)
  assert (loaded.version, loaded.round_number) == (2, 2)
  for got, want in zip(loaded.state.global_model_weights.trainable, moved.trainable):
    np.testing.assert_allclose(got, want)
  assert type(loaded.data_iterator) is type(iterator)


def test_a_manager_with_nothing_saved_is_refused_in_one_line(tmp_path, tff_runtime,
                                                            process_and_source):
  process, source = process_and_source
  manager = tff.program.FileProgramStateManager(str(tmp_path / "empty"))
  with tff_runtime.program_context(), pytest.raises(ToolkitValueError,
                                                    match="no saved program state in"):
    tff_idp.load_trained_state(manager, process, source)


def test_inside_a_running_loop_it_points_to_the_async_form(tmp_path, process_and_source):
  process, source = process_and_source

  async def inside():
    tff_idp.load_trained_state(object(), process, source)
  with pytest.raises(ToolkitValueError, match="await load_trained_state_async"):
    asyncio.run(inside())
