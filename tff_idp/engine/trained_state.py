"""Loading what ``tff.learning.programs.train_model`` saved, without TFF's private API (issue 51).

``train_model`` saves a ``ProgramState`` (the learning process's state, the
round number, the next evaluation's time and the data source's iterator)
through its ``program_state_manager``. Loading it back needs that structure
as a template, and TFF 0.87 exports neither the structure nor a loader:
:func:`load_trained_state` builds the template from the process and the data
source, loads the latest saved version and returns it as a
:class:`TrainedState` (the model's weights are
``process.get_model_weights(trained.state)``). It reads state only: the restored iterator keeps the
secret sampler key it was saved with, so resuming through ``train_model``
stays the same run (docs/api.md, "Composing runs").
"""
from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import tensorflow_federated as tff
# The one place the toolkit reaches into TFF's structure of a saved program (0.87).
from tensorflow_federated.python.learning.programs import training_program_logic

from tff_idp.errors import ToolkitValueError


@dataclasses.dataclass(frozen=True)
class TrainedState:
  """The latest program state ``train_model`` saved (``version`` = its round)."""
  state: Any
  round_number: int
  data_iterator: Any
  version: int


async def load_trained_state_async(manager: Any, process: Any, data_source: Any
                                   ) -> TrainedState:
  """:func:`load_trained_state` for code already inside an event loop."""
  initial = await tff.program.materialize_value(process.initialize())
  template = training_program_logic.ProgramState(initial, 0, 0, data_source.iterator())
  saved, version = await manager.load_latest(template)
  if saved is None:
    where = getattr(manager, "_root_dir", None) or type(manager).__name__
    raise ToolkitValueError(
        f"no saved program state in {where}: train with train_model(..., "
        "program_state_manager=<this manager>) first, or point the manager at the folder "
        "that run saved into.")
  return TrainedState(saved.state, int(saved.round_number), saved.data_iterator, int(version))


def load_trained_state(manager: Any, process: Any, data_source: Any) -> TrainedState:
  """The latest state ``train_model`` saved with ``manager`` for ``process`` and ``data_source``.

  Call it inside the program context the training ran in (e.g.
  ``runtime.program_context()``): building the template runs
  ``process.initialize()``. ``manager`` is any ``tff.program.ProgramStateManager``
  (``tff_idp.PrivateFileProgramStateManager`` or TFF's file manager); a
  manager with nothing saved is refused in one line.
  """
  try:
    asyncio.get_running_loop()
  except RuntimeError:
    return asyncio.run(load_trained_state_async(manager, process, data_source))
  raise ToolkitValueError("load_trained_state runs its own event loop; inside a running "
                          "loop, await load_trained_state_async(...) instead.")
