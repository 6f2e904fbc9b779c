"""The program-API data sources' shared part: Poisson sampling at each client's own rate,
and one source spending its calibrated rounds once over all its iterators (issue 48).

The sampling test is statistical and seeded (``insecure_seed``): with the seed
fixed the outcome is deterministic, and for a random secret a correct sampler
fails it with probability below 1e-6 (stated at the test). The iterators here
build no ``tf.data`` input per client (``client_input`` returns the client's
index and seed), so hundreds of rounds take milliseconds.
"""
import copy
import inspect
import io
import json
import pickle

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
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
  Also: clients join independently (two clients of a group join together at q²,
  each such check at the same α: < 6e-7 < 1e-6 in all), the cohort is Poisson
  (its size varies) and each round's seeds differ.
  """
  rates = np.repeat([0.05, 0.3, 0.8], 10)
  groups = np.repeat([0, 1, 2], 10)
  rounds = 300
  it = IndexSource(rates, rounds=None, insecure_seed=11).iterator()
  counts = np.zeros(rates.size)
  both = np.zeros(3)                              # rounds where a group's first two joined
  sizes, seeds = [], set()
  for _ in range(rounds):
    release = _release(it.select(it.clients_per_round))
    counts[[i for i, _ in release]] += 1
    chosen = {i for i, _ in release}
    both += [{10 * g, 10 * g + 1} <= chosen for g in range(3)]
    sizes.append(len(release))
    seeds.update(seed for _, seed in release)
  alpha = 1e-7
  for g, q in enumerate([0.05, 0.3, 0.8]):
    n = rounds * int(np.sum(groups == g))
    k = int(counts[groups == g].sum())
    assert stats.binom.cdf(k, n, q) > alpha / 2 and stats.binom.sf(k - 1, n, q) > alpha / 2, (
        f"group {g}: {k} inclusions of {n} at q={q} (expected {n * q:.0f})")
    # Independently: two clients of the group join together with probability q², not q
    # (one uniform draw shared by all clients would give q: group 0 at ~15 of 300, not ~1).
    k = int(both[g])
    assert (stats.binom.cdf(k, rounds, q * q) > alpha / 2
            and stats.binom.sf(k - 1, rounds, q * q) > alpha / 2), (g, k, rounds * q * q)
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
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    lone.select(2)                               # its own T, with no source


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


# -- arguments ----------------------------------------------------------------------


def test_rounds_must_be_given_and_be_a_count(caplog):
  """Not given: refused naming the source; not a count >= 1: refused; None: logged."""
  with pytest.raises(ToolkitValueError, match=r"^IndexSource: give rounds=T"):
    IndexSource([0.5] * 2)
  for bad in (0, -1, True, 1.5, "3"):
    with pytest.raises(ToolkitValueError, match=r"must be an integer >= 1"):
      IndexSource([0.5] * 2, rounds=bad)
  for good in (1, np.int64(2)):
    source = IndexSource([0.5] * 2, rounds=good)
    assert source.rounds == source.iterator().rounds == good
    assert type(source.rounds) is int
  with caplog.at_level("WARNING"):
    IndexSource([0.5] * 2, rounds=None)
  assert ("IndexSource built with rounds=None: it will select any number of rounds, so "
          "nothing stops train_model past the rounds its rates were calibrated for; keep "
          "that count yourself.") in [r.getMessage() for r in caplog.records]


def test_all_rounds_spent_before_leaves_none():
  source = IndexSource([0.5] * 2, rounds=3, rounds_spent=3)
  assert source.rounds_spent == 3
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    source.iterator().select(1)


def test_the_source_passes_its_settings_to_every_iterator():
  """k, T and the federated type: the source's are its iterators'."""
  source = IndexSource([0.25] * 4, rounds=3, clients_per_round=3)
  it = source.iterator()
  assert source.clients_per_round == it.clients_per_round == 3
  assert source.rounds == it.rounds == 3
  want = tff.FederatedType(tff.SequenceType(np.int64), tff.CLIENTS)
  assert source.federated_type == it.federated_type == want
  it.select(3)
  it.select()                                    # k not given: accepted
  with pytest.raises(ToolkitValueError, match=r"select it with k=3 .*not k=1\.$"):
    it.select(1)
  assert it.rounds_spent == 2                    # the refused k spent nothing
  assert IndexSource([0.25] * 4, rounds=3).clients_per_round == 1   # default: Σ q rounded


def test_insecure_seed_reproduces_the_cohorts_and_seeds_and_only_it_does():
  """The debug mode: sources built with one seed release the same cohorts and seeds (per
  family: another family's source on that seed draws others); without it, every source
  draws its own."""
  def releases(source):
    it = source.iterator()
    return [_release(it.select(it.clients_per_round)) for _ in range(4)]

  class OtherSource(IndexSource):
    pass

  first = releases(IndexSource([0.5] * 8, rounds=None, insecure_seed=5))
  assert releases(IndexSource([0.5] * 8, rounds=None, insecure_seed=5)) == first
  assert releases(OtherSource([0.5] * 8, rounds=None, insecure_seed=5)) != first
  assert releases(IndexSource([0.5] * 8, rounds=None, insecure_seed=6)) != first
  assert releases(IndexSource([0.5] * 8, rounds=None)) != releases(
      IndexSource([0.5] * 8, rounds=None))


def test_an_empty_cohort_gets_one_padding_client():
  it = IndexSource([0.0] * 3, rounds=None).iterator()
  inputs = it.select(0)
  assert len(inputs) == 1 and isinstance(inputs[0], tf.data.Dataset)
  assert inputs[0].cardinality() == 0


def test_the_refusal_names_what_the_next_round_would_spend():
  class PricedIterator(IndexIterator):
    def privacy_at(self, rounds):
      return f"ε={0.5 * rounds:g}"

  class PricedSource(IndexSource):
    iterator_cls = PricedIterator

  it = PricedSource([0.5] * 2, rounds=2).iterator()
  it.select(1)
  it.select(1)
  with pytest.raises(ToolkitValueError, match=(
      r"^this data source's rates were calibrated for 2 rounds and 2 have been selected; "
      r"round 3 would spend ε=1\.5, over the privacy budget\. Calibrate for more rounds")):
    it.select(1)


def test_check_client_arrays():
  """Pairs or dicts become {"x", "y"} arrays; rows, trailing shapes and dtypes must agree."""
  out = program_data_source.check_client_arrays(
      [([[1.0, 2.0]], [3]), {"x": np.zeros((2, 2)), "y": [0, 1], "extra": 9}])
  assert [sorted(c) for c in out] == [["x", "y"], ["x", "y"]]
  np.testing.assert_array_equal(out[0]["x"], [[1.0, 2.0]])
  np.testing.assert_array_equal(out[1]["y"], [0, 1])
  with pytest.raises(ToolkitValueError, match=r"^client 1: x has 2 rows but y has 1"):
    program_data_source.check_client_arrays([(np.zeros((1, 2)), [0]), (np.zeros((2, 2)), [0])])
  with pytest.raises(ToolkitValueError, match="at least one client"):
    program_data_source.check_client_arrays([])
  for clients in ([(np.zeros((1, 2)), [0]), (np.zeros((1, 3)), [0])],       # x's width
                  [(np.zeros((1, 2)), [0]), (np.zeros((1, 2)), [[0, 1]])],  # y's shape
                  [(np.zeros((1, 2)), [0]), (np.zeros((1, 2), np.float32), [0])]):
    with pytest.raises(ToolkitValueError, match="same trailing shape and dtype"):
      program_data_source.check_client_arrays(clients)


def test_clients_may_be_tff_datasets_and_non_finite_features_are_refused():
  """Issue 51: a TFF user's clients are tf.data.Datasets (batched or not), and NaN/inf
  features were accepted without a word."""
  import collections  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  x = np.arange(12, dtype=np.float32).reshape(6, 2)
  y = np.arange(6, dtype=np.int32)
  ds = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y, w=y))
  out = program_data_source.check_client_arrays([ds, ds.batch(4), (x, y)])
  for client in out:
    np.testing.assert_array_equal(client["x"], x)
    np.testing.assert_array_equal(client["y"], y)
    assert client["x"].dtype == np.float32 and client["y"].dtype == np.int32
  exact = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y))
  np.testing.assert_array_equal(program_data_source.check_client_arrays([exact])[0]["y"], y)
  pairs = tf.data.Dataset.from_tensor_slices((x, y))
  no_label = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, label=y))
  for bad in (pairs, no_label):
    with pytest.raises(ToolkitValueError, match=r"^client 0: a dataset's elements must be dicts"):
      program_data_source.check_client_arrays([bad])
  with pytest.raises(ToolkitValueError, match=r"^client 0: x must be numeric \(got dtype <U1\)"):
    program_data_source.check_client_arrays([(np.array([["a"], ["b"]]), [0, 1])])
  for bad in (np.nan, np.inf, -np.inf):
    dirty = x.copy()
    dirty[3, 1] = bad
    with pytest.raises(ToolkitValueError, match=r"^client 1: x holds NaN or infinite values"):
      program_data_source.check_client_arrays([(x, y), (dirty, y)])
  ints = program_data_source.check_client_arrays([(np.ones((2, 2), np.int64), [0, 1])])
  assert ints[0]["x"].dtype == np.int64  # integer features: nothing to check, kept as given


def test_check_rates():
  """One rate per client, each in [0, 1] (ends included), as float64."""
  rates = program_data_source.check_rates([[0, 1], [1, 0]], 4, "rate")
  assert rates.dtype == np.float64 and rates.tolist() == [0.0, 1.0, 1.0, 0.0]
  for bad in ([0.5, np.nan], [0.5, np.inf], [0.5, -0.1], [0.5, 1.01], [0.5, 1.5]):
    with pytest.raises(ToolkitValueError, match=r"^every rate must lie in \[0, 1\]\.$"):
      program_data_source.check_rates(bad, 2, "rate")
  with pytest.raises(ToolkitValueError, match="give one rate per client: got 3 for 2"):
    program_data_source.check_rates([0.5] * 3, 2, "rate")


def test_rates_changed_after_the_source_is_built_do_not_change_its_sampling():
  """Privacy (issue 48): a source samples at the rates it was built (calibrated) with.

  Bug caught: the source (or ``check_rates``) keeping a view of the caller's
  array, so a sweep that reuses the array changes the rates of a built source.
  Rates 0/1 make the cohort deterministic: clients 2 and 3, every round.
  """
  rates = np.array([0.0, 0.0, 1.0, 1.0])
  checked = program_data_source.check_rates(rates, 4, "rate")
  source = IndexSource(rates, rounds=3)
  rates[:] = [1.0, 1.0, 0.0, 0.0]
  assert checked.tolist() == [0.0, 0.0, 1.0, 1.0]
  iterator = source.iterator()
  for _ in range(3):
    assert sorted(i for i, _ in _release(iterator.select(iterator.clients_per_round))) == [2, 3]


def test_the_federated_type_of_structured_inputs():
  """A dict of datasets is a struct of sequences, with the dict as its Python container;
  anything else is refused."""
  class DictIterator(IndexIterator):
    def padding_input(self):
      return {"a": tf.data.Dataset.range(0),
              "b": tf.data.Dataset.from_tensors(np.zeros(2, np.float32)).take(0)}

  class DictSource(IndexSource):
    iterator_cls = DictIterator

  member = DictSource([0.5], rounds=1).federated_type.member
  assert member == tff.StructWithPythonType(
      [("a", tff.SequenceType(np.int64)), ("b", tff.SequenceType(tff.TensorType(
          np.float32, [2])))], dict)
  assert member.python_container is dict

  class ArrayIterator(IndexIterator):
    def padding_input(self):
      return np.zeros(0)

  class ArraySource(IndexSource):
    iterator_cls = ArrayIterator

  with pytest.raises(TypeError, match="a dataset or a dict of datasets"):
    ArraySource([0.5], rounds=1)


def test_rounds_shows_as_required_in_the_signature():
  signature = inspect.signature(program_data_source.ClientArraysDataSource)
  assert str(signature.parameters["rounds"]) == "rounds: 'Any' = <required>"


# -- equality, copies and saved state --------------------------------------------------

_CLIENTS = [{"x": np.arange(2.0), "y": np.array([0, 1])},
            {"x": np.arange(3.0), "y": np.array([1, 0, 1])}]


def _make(cls=IndexIterator, clients=_CLIENTS, rates=(0.5, 0.25), options=None, seed=1,
          sampler=7, **kwargs):
  kwargs = {"clients_per_round": 2, "rounds": 3, "token": "t", **kwargs}
  return cls(clients, np.asarray(rates), {"batch": 2} if options is None else options,
             PrivacyRandomness.from_seed(seed, "eq"),
             sampler_state=np.random.PCG64(sampler).state, **kwargs)


class SubIndexIterator(IndexIterator):
  pass


def test_iterators_are_equal_exactly_when_their_whole_state_is():
  """Equal: same class, clients' fields and arrays, rates, options, round, k, T, id,
  sampler state and secret; a difference in any one of them makes them unequal."""
  it = _make()
  assert it == _make() and not it != _make()
  assert it == copy.deepcopy(it)
  assert it.__eq__(object()) is NotImplemented and it != object()
  variants = {
      "class": _make(SubIndexIterator),
      "an array": _make(clients=[_CLIENTS[0], {**_CLIENTS[1], "x": np.arange(3.0) + 1}]),
      "a field more": _make(clients=[{**_CLIENTS[0], "w": np.ones(2)}, _CLIENTS[1]]),
      "a client less": _make(clients=_CLIENTS[:1], rates=(0.5,)),
      "rates": _make(rates=(0.5, 0.3)),
      "options": _make(options={"batch": 3}),
      "round": _make(round_num=1),
      "k": _make(clients_per_round=1),
      "T": _make(rounds=4),
      "id": _make(token="u"),
      "sampler state": _make(sampler=8),
      "secret": _make(seed=2),
  }
  for what, other in variants.items():
    assert it != other and not it == other, what
    assert other != it, what


def test_a_saved_iterator_comes_back_equal_and_continues_identically():
  """to_bytes/from_bytes keeps everything (k, T, options, id, sampler, secret, in either
  mode), so the restored iterator selects what the original would have."""
  for insecure_seed in (3, None):
    source = IndexSource([0.25] * 4, rounds=3, clients_per_round=3,
                         insecure_seed=insecure_seed)
    it = source.iterator()
    it.select(3)
    restored = type(it).from_bytes(it.to_bytes())
    assert restored == it
    assert (restored.rounds, restored.clients_per_round, restored.round_num) == (3, 3, 1)
    assert restored.options == it.options == {}
    assert _release(restored.select(3)) == _release(it.select(3))
  it = _make()
  assert type(it).from_bytes(it.to_bytes()).options == {"batch": 2}


def _rewrite(buffer, header=None, **arrays):
  """The saved iterator ``buffer`` with its header edited by ``header`` and ``arrays`` set."""
  with np.load(io.BytesIO(buffer)) as data:
    saved = dict(data)
  head = json.loads(bytes(saved.pop("__header__")).decode())
  if header:
    header(head)
  saved.update(arrays)
  out = io.BytesIO()
  np.savez(out, **saved, __header__=np.frombuffer(json.dumps(head).encode(), np.uint8))
  return out.getvalue()


def test_saved_state_is_read_without_unpickling():
  """The program state is data: an object array in it (a pickle) is refused, not loaded."""
  saved = _make().to_bytes()
  with pytest.raises(ValueError, match="allow_pickle"):
    IndexIterator.from_bytes(_rewrite(saved, rates=np.array([0.5, 0.25], dtype=object)))


def test_state_saved_without_a_ledger_still_loads():
  """State saved before the round ledger (no ledger, rounds or id in it) loads: no limit,
  a ledger of its own, the same cohorts."""
  it = IndexSource([0.5] * 6, rounds=3, insecure_seed=1).iterator()
  it.select(3)

  def old(head):
    for key in ("ledger", "rounds", "token"):
      del head[key]

  restored = IndexIterator.from_bytes(_rewrite(it.to_bytes(), old))
  assert restored.rounds is None and restored.rounds_spent == 0
  assert _release(restored.select(3)) == _release(it.select(3))
  assert restored.rounds_spent == 2              # its own round 2: rounds 1 and 2 counted


def test_restoring_an_earlier_state_does_not_lower_the_count():
  source = IndexSource([0.5] * 4, rounds=3)
  it = source.iterator()
  it.select(2)
  saved = it.to_bytes()
  it.select(2)
  type(it).from_bytes(saved)
  assert source.rounds_spent == 2


def test_restored_iterators_rejoin_their_own_sources_count():
  """Two live sources: an iterator restored in this process charges its own source."""
  a, b = IndexSource([0.5] * 4, rounds=3), IndexSource([0.5] * 4, rounds=3)
  it = a.iterator()
  it.select(2)
  restored = type(it).from_bytes(it.to_bytes())
  restored.select(2)
  assert (a.rounds_spent, b.rounds_spent) == (2, 0)


def test_iterators_restored_in_a_new_process_share_one_rebuilt_count():
  source = IndexSource([0.5] * 4, rounds=3)
  a, b = source.iterator(), source.iterator()
  a.select(2)
  b.select(2)
  saved_a, saved_b = a.to_bytes(), b.to_bytes()
  program_data_source._LEDGERS.clear()          # pylint: disable=protected-access
  ra, rb = type(a).from_bytes(saved_a), type(b).from_bytes(saved_b)
  ra.select(2)
  assert rb.rounds_spent == 3
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    rb.select(2)


def test_a_pickled_source_keeps_its_count():
  """Pickled (to another process), a source keeps T, its ledger's id and the rounds spent;
  the copy counts on from there and refuses past T."""
  source = IndexSource([0.5] * 4, rounds=3, rounds_spent=1)
  source.iterator().select(2)
  copied = pickle.loads(pickle.dumps(source))
  ledger = copied._ledger                        # pylint: disable=protected-access
  assert ledger.snapshot() == source._ledger.snapshot()  # pylint: disable=protected-access
  assert (copied.rounds, copied.rounds_spent) == (3, 2)
  copied.iterator().select(2)
  assert (copied.rounds_spent, source.rounds_spent) == (3, 2)
  with pytest.raises(ToolkitValueError, match="calibrated for 3 rounds"):
    copied.iterator().select(2)


def test_deep_copies_keep_shared_objects_shared():
  """A structure holding an iterator twice, or a source and its copy, copies to the same."""
  it = IndexSource([0.5] * 4, rounds=3).iterator()
  first, second = copy.deepcopy([it, it])
  assert first is second and first is not it and first == it
  source = IndexSource([0.5] * 4, rounds=3)
  twin = copy.deepcopy(source)
  source_copy, twin_copy = copy.deepcopy((source, twin))
  twin_copy.iterator().select(2)
  assert source.rounds_spent == source_copy.rounds_spent == twin_copy.rounds_spent == 1
