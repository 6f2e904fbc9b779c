"""The client works' seed counter: a secret start at every initialize(), +1 per round (issue 48)."""
import collections

import numpy as np
import pytest

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


@pytest.mark.parametrize("start", [-1, 2**62, True])
def test_with_seed_counter_start_refuses_starts_that_can_overflow(start):
  with pytest.raises(ValueError, match=r"\[0, 2\^62\)"):
    tff_composition.WithSeedCounterStart(_Process(), start)
