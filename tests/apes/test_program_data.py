"""ApesDataSource spends its rounds once over all its iterators (issue 48).

Every APES round spends each user's ε_i once more; the source knows the rounds
T its ledger covers and refuses the round past T whichever iterator asks (a
second ``train_model`` on one source). No TFF computation.
"""
import numpy as np
import pytest

from tff_idp.apes.program_data import ApesDataSource
from tff_idp.errors import ToolkitValueError


def clients(num=3, examples=4, seed=0):
  rng = np.random.default_rng(seed)
  return [(rng.normal(size=(examples, 3)).astype(np.float32),
           rng.integers(0, 2, examples).astype(np.int32)) for _ in range(num)]


def test_a_second_iterator_gets_no_fresh_rounds():
  source = ApesDataSource(clients(), [1.0, 2.0, 4.0], batch_size=2, rounds=2)
  first = source.iterator()
  first.select(3)
  assert len(source.iterator().select(3)) == 3       # every user, the source's round 2
  with pytest.raises(ToolkitValueError, match=r"calibrated for 2 rounds and its iterators "
                     r"have already selected 2.*round 3 would exceed the privacy budget"):
    first.select(3)
  assert source.rounds_spent == 2


def test_rounds_spent_in_an_earlier_process_count():
  source = ApesDataSource(clients(), [1.0, 2.0, 4.0], rounds=3, rounds_spent=3)
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    source.iterator().select(3)
  with pytest.raises(ToolkitValueError, match="rounds_spent=4 exceeds"):
    ApesDataSource(clients(), [1.0, 2.0, 4.0], rounds=3, rounds_spent=4)
