"""rPDP-FL's client data (tff_idp.rpdp.records): records, rates, the secret seed, the round fold."""
import collections

import numpy as np
import pytest
import tensorflow as tf

from tff_idp.rpdp import records

X = np.arange(12, dtype=np.float32).reshape(6, 2)
Y = np.array([0, 1, 0, 1, 1, 0], np.int32)
Q = np.array([0.1, 0.2, 0.0, 1.0, 0.5, 0.3])


def test_element_spec_adds_rates_and_seed_and_optionally_canaries():
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 2], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  plain = records.record_element_spec(spec)
  assert list(plain) == ["x", "y", "q", "seed"]
  assert plain["q"] == tf.TensorSpec([None], tf.float32)
  assert plain["seed"] == tf.TensorSpec([None, 2], tf.int64)
  with_canaries = records.record_element_spec((spec["x"], spec["y"]), with_canaries=True)
  assert list(with_canaries) == ["x", "y", "q", "seed", "canary"]
  assert with_canaries["canary"] == tf.TensorSpec([None], tf.int32)
  assert with_canaries["x"] == spec["x"]


def test_secret_client_seeds_are_fresh_63_bit_pairs():
  seeds = [records.secret_client_seed() for _ in range(20)]
  assert len(set(seeds)) == 20
  assert all(len(s) == 2 and all(0 <= v < 2**63 for v in s) for s in seeds)
  assert any(v >= 2**62 for s in seeds for v in s)  # all 63 bits used (fails w.p. 2^-40)


def test_round_seed_is_the_stateless_fold_of_the_counter():
  seed = tf.constant([3, 4], tf.int64)
  got = records.round_seed(seed, tf.constant(7, tf.int64)).numpy()
  np.testing.assert_array_equal(
      got, tf.random.experimental.stateless_fold_in(seed, tf.constant(7, tf.int64)).numpy())
  assert not np.array_equal(got, records.round_seed(seed, 8).numpy())
  np.testing.assert_array_equal(records.round_seed(np.array([3, 4], np.int32), 7).numpy(), got)


def test_record_dataset_batches_every_record_with_its_rate_and_the_clients_seed():
  ds = records.record_dataset(X, Y, Q, (5, 9), batch_size=4)
  batches = list(ds)
  assert [len(b["y"]) for b in batches] == [4, 2]
  x, y, q, seed = (t.numpy() for t in records.collect_records_eagerly(ds))
  np.testing.assert_array_equal(x, X)
  np.testing.assert_array_equal(y, Y)
  np.testing.assert_allclose(q, Q.astype(np.float32))
  assert q.dtype == np.float32
  np.testing.assert_array_equal(seed, [5, 9])
  assert all(np.all(b["seed"].numpy() == [5, 9]) for b in batches)
  default = records.record_dataset(X, Y, Q)
  assert len(list(default)) == 1  # batch 512
  assert not np.array_equal(next(iter(default))["seed"].numpy()[0], [5, 9])


def test_record_dataset_with_canaries_and_its_refusals():
  ds = records.record_dataset(X, Y, Q, (1, 2), canary_index=np.array([-1, 0, -1, 1, -1, -1]))
  x, y, q, seed, canary = records.collect_records(ds)
  np.testing.assert_array_equal(canary.numpy(), [-1, 0, -1, 1, -1, -1])
  assert canary.dtype == tf.int32
  with pytest.raises(ValueError, match="two integers"):
    records.record_dataset(X, Y, Q, (1.0, 2.0))
  with pytest.raises(ValueError, match="two integers"):
    records.record_dataset(X, Y, Q, (1, 2, 3))
  with pytest.raises(ValueError, match=r"one row per record \(got 6, 5, 6\)"):
    records.record_dataset(X, Y[:5], Q, (1, 2))
  with pytest.raises(ValueError, match=r"one row per record \(got 6, 6, 5\)"):
    records.record_dataset(X, Y, Q[:5], (1, 2))
  with pytest.raises(ValueError, match=r"one row per record \(got 5, 6, 6\)"):
    records.record_dataset(X[:5], Y, Q, (1, 2))
  with pytest.raises(ValueError, match=r"one entry per record \(got 2 for 6\)"):
    records.record_dataset(X, Y, Q, (1, 2), canary_index=np.array([0, 1]))


def test_collect_records_in_a_graph_and_eagerly_agree_also_when_empty():
  ds = records.record_dataset(X, Y, Q, (7, 8), batch_size=5)
  graph = [t.numpy() for t in records.collect_records(ds)]
  eager = [t.numpy() for t in records.collect_records_eagerly(ds, tf.data.Options())]
  assert len(graph) == 4
  for a, b in zip(graph, eager):
    np.testing.assert_array_equal(a, b)
  empty = records.record_dataset(X[:0], Y[:0], Q[:0], (7, 8))
  for collect in (records.collect_records, records.collect_records_eagerly):
    x, y, q, seed = collect(empty)
    assert x.shape == (0, 2) and y.shape == (0,) and q.shape == (0,)
    np.testing.assert_array_equal(seed.numpy(), [0, 0])
    assert seed.dtype == tf.int64


def test_record_arrays_are_the_same_client_and_check_their_fields():
  client = records.RecordArrays(X, Y, Q, [11, 12])
  assert client.seed.dtype == np.int64 and client.q.dtype == np.float32
  x, y, q, seed = (t.numpy() for t in records.collect_records_eagerly(client.dataset(4)))
  np.testing.assert_array_equal(x, X)
  np.testing.assert_array_equal(seed, [11, 12])
  assert [len(b["y"]) for b in client.dataset(4)] == [4, 2]
  assert len(list(client.dataset())) == 1
  with pytest.raises(ValueError, match="two integers"):
    records.RecordArrays(X, Y, Q, [1, 2, 3])
  with pytest.raises(ValueError, match="two integers"):
    records.RecordArrays(X, Y, Q, [1.5, 2.0])
  with pytest.raises(ValueError, match=r"one row per record \(got 6, 5, 6\)"):
    records.RecordArrays(X, Y[:5], Q, [1, 2])
  with pytest.raises(ValueError, match=r"one row per record \(got 6, 6, 5\)"):
    records.RecordArrays(X, Y, Q[:5], [1, 2])


def test_the_model_fields_of_the_spec_are_the_models():
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 2], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  for given in (spec, (spec["x"], spec["y"])):
    out = records.record_element_spec(given)
    assert out["x"] == spec["x"] and out["y"] == spec["y"]


def test_a_one_record_client_keeps_its_seed_in_a_graph_and_eagerly():
  """A client with one record (one batch of one) draws with its own seed, never zeros."""
  ds = records.record_dataset(X[:1], Y[:1], Q[:1], (5, 6))
  for collect in (records.collect_records, records.collect_records_eagerly):
    x, y, q, seed = collect(ds)
    np.testing.assert_array_equal(seed.numpy(), [5, 6])
    np.testing.assert_array_equal(x.numpy(), X[:1])
  one_batch = records.record_dataset(X, Y, Q, (5, 6))  # 6 records, one batch
  x, y, q, seed = records.collect_records_eagerly(one_batch)
  np.testing.assert_array_equal(y.numpy(), Y)
  np.testing.assert_array_equal(seed.numpy(), [5, 6])


def test_an_empty_client_keeps_its_fields_dtypes_eagerly():
  x, y, q, _ = records.collect_records_eagerly(records.record_dataset(X[:0], Y[:0], Q[:0],
                                                                      (1, 2)))
  assert (x.dtype, y.dtype, q.dtype) == (tf.float32, tf.int32, tf.float32)


def test_seeds_are_int64_whatever_integers_they_come_as_and_batches_default_to_512():
  ds = records.record_dataset(X, Y, Q, np.array([1, 2], np.int32))
  assert ds.element_spec["seed"].dtype == tf.int64
  many = np.zeros((600, 2), np.float32)
  labels, rates = np.zeros(600, np.int32), np.full(600, 0.5)
  assert [len(b["y"]) for b in records.record_dataset(many, labels, rates, (1, 2))] == [512, 88]
  arrays = records.RecordArrays(many, labels, rates, [1, 2])
  assert [len(b["y"]) for b in arrays.dataset()] == [512, 88]
