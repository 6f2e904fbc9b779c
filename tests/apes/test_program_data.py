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


def batches(dataset):
  return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


def privacy_of(client_input):
  (element,) = list(client_input["privacy"])
  return float(element["epsilon"]), tuple(int(s) for s in element["seed"].numpy())


def test_each_user_gets_its_batches_its_epsilon_and_a_seed():
  """Every user is selected with its (x, y) batches of batch_size, its own ε_i and its seed
  of the round; the same insecure_seed gives the same seeds (debug mode), round by round."""
  data = clients(examples=5)
  source = ApesDataSource(data, np.array([1, 2, 4]), batch_size=2, rounds=2, insecure_seed=7)
  assert source.clients_per_round == 3 and source.iterator().options == dict(
      batch_size=2, epsilons=[1.0, 2.0, 4.0])
  it = source.iterator()
  inputs = it.select(3)
  assert [privacy_of(c)[0] for c in inputs] == [1.0, 2.0, 4.0]
  for (x, y), client in zip(data, inputs):
    got = batches(client["data"])
    assert [sorted(b) for b in got] == [["x", "y"]] * 3
    assert [len(b["y"]) for b in got] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in got]), x)
    np.testing.assert_array_equal(np.concatenate([b["y"] for b in got]), y)
  seeds = [privacy_of(c)[1] for c in inputs]
  assert len(set(seeds)) == 3
  again = ApesDataSource(data, [1.0, 2.0, 4.0], batch_size=2, rounds=2, insecure_seed=7)
  assert [privacy_of(c)[1] for c in again.iterator().select(3)] == seeds
  other = ApesDataSource(data, [1.0, 2.0, 4.0], batch_size=2, rounds=2, insecure_seed=8)
  assert [privacy_of(c)[1] for c in other.iterator().select(3)] != seeds
  assert [privacy_of(c)[1] for c in it.select(3)] != seeds          # round 2: fresh seeds


def test_batch_size_default_and_refusals():
  assert ApesDataSource(clients(), [1.0] * 3, rounds=1).iterator().options["batch_size"] == 16
  one = ApesDataSource(clients(), [1.0] * 3, batch_size=1, rounds=1)
  assert [len(b["y"]) for b in batches(one.iterator().select(3)[0]["data"])] == [1] * 4
  for bad in (0, -1, True, 2.5):
    with pytest.raises(ToolkitValueError, match=rf"^batch_size={bad!r} must be an integer"):
      ApesDataSource(clients(), [1.0] * 3, batch_size=bad, rounds=1)


def test_bad_epsilons_are_refused_by_name():
  with pytest.raises(ToolkitValueError, match=r"^epsilons=array\(\[1\., 0\., 2\.\]\): every "
                     "local budget must be finite and > 0"):
    ApesDataSource(clients(), [1.0, 0.0, 2.0], rounds=1)
  with pytest.raises(ToolkitValueError, match="give one ε per user: got 2 for 3 users"):
    ApesDataSource(clients(), [1.0, 2.0], rounds=1)


def test_a_single_user_and_the_padding_input():
  """One user: its iterator's padding input (the federated type) has no data and that
  user's ε, and fits the federated type of a real input."""
  source = ApesDataSource(clients(num=1), [3.0], batch_size=2, rounds=1)
  it = source.iterator()
  padding = it.padding_input()
  assert batches(padding["data"]) == [] and privacy_of(padding)[0] == 3.0
  (selected,) = it.select(1)
  assert privacy_of(selected)[0] == 3.0 and len(batches(selected["data"])) == 2
