"""The program-API data sources' shared part: Poisson sampling at each client's own rate,
and one source spending its calibrated rounds once over all its iterators (issue 48).

The sampling test is statistical and seeded (``insecure_seed``): with the seed
fixed the outcome is deterministic, and for a random secret a correct sampler
fails it with probability below 1e-6 (stated at the test). The iterators here
build no ``tf.data`` input per client (``client_input`` returns the client's
index and seed), so hundreds of rounds take milliseconds.
"""
import copy

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tff_idp.engine import program_data_source
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.errors import ToolkitValueError


class IndexIterator(program_data_source.ClientArraysIterator):
  """A client's input is ``(index, seed)``: what ``select`` chose, without TensorFlow work."""

  def client_input(self, index, seed):
    return (index, seed)

  def padding_input(self):
    return tf.data.Dataset.range(0)


class IndexSource(program_data_source.ClientArraysDataSource):
  iterator_cls = IndexIterator

  def __init__(self, rates, **kwargs):
    clients = [{"x": np.zeros((1, 1), np.float32), "y": np.zeros(1, np.int32)}
               for _ in rates]
    super().__init__(clients, np.asarray(rates, np.float64), {}, **kwargs)


def _release(inputs):
  """``select``'s cohort as ``[(index, seed), ...]`` (``[]``: the padding client alone)."""
  return [tuple(x) for x in inputs if isinstance(x, tuple)]


def test_every_client_is_sampled_at_its_own_rate_not_the_mean():
  """IDP-FedAvg Alg. 2: client i joins each round with probability q_i, its own group's rate.

  Three groups of 10 clients at q = 0.05, 0.3, 0.8 (mean 0.383), 300 rounds:
  each group's inclusions are Binomial(3000, q_g). The check is the exact
  two-sided binomial tail at α = 1e-7 per group, so a correct sampler fails
  the test with probability < 3e-7 < 1e-6 for a random secret (with the seed
  fixed, never). Sampling every client at the mean rate (the planted bug)
  puts group 0 at ~1150 of 3000 where 150 ± 12 is expected: z ≈ 80.
  Also: the cohort is Poisson (its size varies) and each round's seeds differ.
  """
  rates = np.repeat([0.05, 0.3, 0.8], 10)
  groups = np.repeat([0, 1, 2], 10)
  rounds = 300
  it = IndexSource(rates, rounds=None, insecure_seed=11).iterator()
  counts = np.zeros(rates.size)
  sizes, seeds = [], set()
  for _ in range(rounds):
    release = _release(it.select(it.clients_per_round))
    counts[[i for i, _ in release]] += 1
    sizes.append(len(release))
    seeds.update(seed for _, seed in release)
  alpha = 1e-7
  for g, q in enumerate([0.05, 0.3, 0.8]):
    n = rounds * int(np.sum(groups == g))
    k = int(counts[groups == g].sum())
    assert stats.binom.cdf(k, n, q) > alpha / 2 and stats.binom.sf(k - 1, n, q) > alpha / 2, (
        f"group {g}: {k} inclusions of {n} at q={q} (expected {n * q:.0f})")
  assert np.std(sizes) > 1                      # Poisson cohort, not a fixed k
  assert len(seeds) == int(sum(sizes))          # a fresh seed per client and round


def test_two_iterators_of_one_source_share_its_rounds():
  """The auditor's case: a second iterator (a second train_model) gets no fresh budget."""
  source = IndexSource([0.5] * 4, rounds=3)
  first = source.iterator()
  first.select(2)
  first.select(2)
  second = source.iterator()
  second.select(2)                               # round 3 of the source: allowed
  assert source.rounds_spent == 3
  with pytest.raises(ToolkitValueError, match=r"calibrated for 3 rounds and its iterators "
                     r"have already selected 3.*round 4 would exceed"):
    second.select(2)
  with pytest.raises(ToolkitValueError, match="no fresh budget"):
    source.iterator().select(2)
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    first.select(2)


def test_copies_and_restored_iterators_rerun_saved_rounds_free_and_identically():
  """A deepcopy / from_bytes copy keeps the iterator's id: re-selecting a round it already
  selected draws the same cohort and seeds and costs nothing (restore-and-continue)."""
  source = IndexSource([0.5] * 6, rounds=3)
  it = source.iterator()
  it.select(3)
  saved = it.to_bytes()                          # the program state after round 1
  kept = copy.deepcopy(it)                       # train_model's copy before round 2
  crashed = it.select(3)                         # round 2, then the program dies
  restored = type(it).from_bytes(saved)
  assert _release(restored.select(3)) == _release(crashed) == _release(kept.select(3))
  assert source.rounds_spent == 2
  restored.select(3)                             # round 3: the last one
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    restored.select(3)
  again = type(it).from_bytes(saved)
  again.select(3)                                # its rounds 2 and 3 again: free
  again.select(3)
  assert source.rounds_spent == 3
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    again.select(3)


def test_a_run_resumed_in_a_new_process_keeps_its_count():
  """``to_bytes`` carries the ledger: restored where the source's ledger is gone (a new
  process), the iterator rebuilds it and still refuses past T; an iterator unknown to the
  ledger is charged its own earlier rounds."""
  source = IndexSource([0.5] * 4, rounds=3)
  a, b = source.iterator(), source.iterator()
  a.select(2)
  b.select(2)
  saved = a.to_bytes()
  program_data_source._LEDGERS.clear()          # pylint: disable=protected-access
  restored = type(a).from_bytes(saved)
  assert restored.rounds_spent == 2
  restored.select(2)
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    restored.select(2)
  # A fresh ledger that never saw the iterator: its round 3 costs its 3 rounds.
  args = source._args  # pylint: disable=protected-access
  lone = IndexIterator(*args, PrivacyRandomness.secret(), round_num=2, rounds=3)
  lone.select(2)
  assert lone.rounds_spent == 3


def test_rounds_spent_before_the_source_count():
  """A source rebuilt in a new process is told the rounds your ledger says were spent."""
  source = IndexSource([0.5] * 4, rounds=3, rounds_spent=2)
  it = source.iterator()
  it.select(2)
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    it.select(2)
  for bad in (-1, 4, 1.5, True):
    with pytest.raises(ToolkitValueError, match="rounds_spent="):
      IndexSource([0.5] * 4, rounds=3, rounds_spent=bad)


def test_no_limit_counts_but_never_refuses():
  source = IndexSource([0.5] * 4, rounds=None)
  for _ in range(3):
    it = source.iterator()
    for _ in range(4):
      it.select(2)
  assert source.rounds_spent == 12 and source.rounds is None


def test_the_prototype_and_unused_iterators_cost_nothing():
  """``train_model`` calls ``iterator()`` even when it resumes from saved state."""
  source = IndexSource([0.5] * 4, rounds=2)
  for _ in range(5):
    source.iterator()
  assert source.rounds_spent == 0
  it = source.iterator()
  it.select(2)
  it.select(2)
  assert source.rounds_spent == 2


def test_a_copy_of_the_source_shares_its_count():
  """``copy.deepcopy(source)`` is the same calibration: it spends the same rounds."""
  source = IndexSource([0.5] * 4, rounds=2)
  source.iterator().select(2)
  twin = copy.deepcopy(source)
  twin.iterator().select(2)
  assert source.rounds_spent == twin.rounds_spent == 2
  with pytest.raises(ToolkitValueError, match="calibrated for 2 rounds"):
    source.iterator().select(2)
