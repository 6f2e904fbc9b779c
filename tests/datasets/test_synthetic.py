"""Tests for the embedded Synthetic(alpha, beta) federation (FedProx / LEAF).

No TFF computation is executed here (that would start a `worker_binary`
process); building `ClientData` and iterating tf.data datasets is plain TF.
"""

import collections
import time

import numpy as np
import pytest

from datasets import synthetic

SMALL = synthetic.SyntheticConfig(num_clients=150, seed=3)
SMALL_IID = synthetic.SyntheticConfig(num_clients=150, seed=3, iid=True)


@pytest.fixture(scope='module')
def small():
  return synthetic.generate_arrays(SMALL)


@pytest.fixture(scope='module')
def small_iid():
  return synthetic.generate_arrays(SMALL_IID)


@pytest.fixture(scope='module')
def default_arrays():
  start = time.perf_counter()
  arrays = synthetic.generate_arrays(synthetic.SyntheticConfig())
  return arrays, time.perf_counter() - start


def _label_tv_to_global(arrays, num_classes=10):
  """Mean over clients of TV(client label distribution, global one)."""
  num_clients = int(arrays['client'].max()) + 1
  counts = np.zeros((num_clients, num_classes))
  np.add.at(counts, (arrays['client'], arrays['y']), 1)
  per_client = counts / counts.sum(axis=1, keepdims=True)
  pooled = counts.sum(axis=0) / counts.sum()
  return 0.5 * np.abs(per_client - pooled).sum(axis=1).mean()


# ----------------------------------------------------------------- arrays ---


@pytest.mark.parametrize('iid', [False, True])
def test_same_seed_is_bit_identical(iid):
  config = synthetic.SyntheticConfig(num_clients=60, seed=11, iid=iid)
  a = synthetic.generate_arrays(config)
  b = synthetic.generate_arrays(config)
  assert a.keys() == b.keys() == {'x', 'y', 'client', 'is_test'}
  for key in a:
    assert a[key].dtype == b[key].dtype
    assert a[key].tobytes() == b[key].tobytes(), key


@pytest.mark.parametrize('iid', [False, True])
def test_different_seed_differs(iid):
  a = synthetic.generate_arrays(
      synthetic.SyntheticConfig(num_clients=60, seed=1, iid=iid))
  b = synthetic.generate_arrays(
      synthetic.SyntheticConfig(num_clients=60, seed=2, iid=iid))
  assert not np.array_equal(a['client'], b['client'])  # sizes differ
  n = min(len(a['y']), len(b['y']))
  assert not np.allclose(a['x'][:n], b['x'][:n])
  assert not np.array_equal(a['y'][:n], b['y'][:n])


def test_dtypes_and_shapes(small):
  n = len(small['y'])
  assert small['x'].dtype == np.float32 and small['x'].shape == (n, 60)
  assert small['y'].dtype == np.int32 and small['y'].shape == (n,)
  assert small['client'].dtype == np.int32 and small['client'].shape == (n,)
  assert small['is_test'].dtype == np.bool_ and small['is_test'].shape == (n,)
  assert np.all(np.isfinite(small['x']))


@pytest.mark.parametrize('fixture', ['small', 'small_iid'])
def test_labels_in_range(fixture, request):
  y = request.getfixturevalue(fixture)['y']
  assert y.min() >= 0 and y.max() < 10
  # Not degenerate: several classes actually occur.
  assert len(np.unique(y)) >= 5


def test_every_example_belongs_to_one_client_and_split(small):
  config = SMALL
  client, is_test = small['client'], small['is_test']
  # Client indices are exactly 0..K-1, every client present, examples sorted.
  assert np.array_equal(np.unique(client), np.arange(config.num_clients))
  assert np.all(np.diff(client) >= 0)
  total = np.bincount(client, minlength=config.num_clients)
  test = np.bincount(client, weights=is_test, minlength=config.num_clients)
  train = total - test
  # Each client has train and test examples, test ~ test_fraction.
  assert np.all(train >= 1) and np.all(test >= 1)
  np.testing.assert_allclose(test / total, config.test_fraction, atol=0.02)
  # The train/test partition covers every example once.
  assert int(train.sum() + test.sum()) == len(client)
  # client_sizes() agrees with the arrays (train examples per client).
  np.testing.assert_array_equal(synthetic.client_sizes(config), train)
  # Sizes follow min(50 + floor(lognormal), cap).
  assert total.min() >= 50 and total.max() <= config.max_client_size


def test_num_clients_is_configurable():
  for k in (1, 7, 40):
    arrays = synthetic.generate_arrays(
        synthetic.SyntheticConfig(num_clients=k, seed=5))
    assert len(np.unique(arrays['client'])) == k
    assert len(synthetic.client_sizes(
        synthetic.SyntheticConfig(num_clients=k, seed=5))) == k


def test_max_client_size_caps_sizes():
  config = synthetic.SyntheticConfig(num_clients=300, max_client_size=60)
  totals = np.bincount(synthetic.generate_arrays(config)['client'])
  assert totals.max() == 60 and totals.min() >= 50


def test_default_federation_size(default_arrays):
  arrays, _ = default_arrays
  config = synthetic.SyntheticConfig()
  assert config.num_clients == 3383
  assert len(np.unique(arrays['client'])) == 3383
  n = len(arrays['y'])
  assert 300_000 < n < 400_000, n
  assert int(synthetic.client_sizes(config).sum()) == int(
      (~arrays['is_test']).sum())


def test_iid_feature_distribution_matches_definition(small_iid):
  # x ~ N(0, diag(j^-1.2)) in the i.i.d. variant.
  x = small_iid['x'].astype(np.float64)
  expected_var = np.arange(1, 61) ** -1.2
  np.testing.assert_allclose(x.var(axis=0), expected_var, rtol=0.06)
  assert np.all(np.abs(x.mean(axis=0)) < 4 * np.sqrt(expected_var / len(x)))


def test_iid_labels_are_a_shared_linear_argmax(small_iid):
  # One shared (W, b): a single linear argmax labels every client perfectly,
  # i.e. the pooled data are linearly separable -> least squares on one-hot
  # targets with enough data gets far above chance (checked in the LR test).
  # Here: the per-client label distributions only differ by sampling noise.
  assert _label_tv_to_global(small_iid) < 0.2


def test_non_iid_is_more_label_heterogeneous_than_iid(small, small_iid):
  tv_non_iid = _label_tv_to_global(small)
  tv_iid = _label_tv_to_global(small_iid)
  # Measured (seed 3, 150 clients): ~0.82 vs ~0.11.
  assert tv_non_iid > 0.6, tv_non_iid
  assert tv_non_iid > 3 * tv_iid, (tv_non_iid, tv_iid)


def test_non_iid_feature_means_differ_between_clients(small, small_iid):
  def spread_of_client_means(arrays):
    x, client = arrays['x'].astype(np.float64), arrays['client']
    k = client.max() + 1
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, client, x)
    means = sums / np.bincount(client)[:, None]
    return means[:, 0].std()  # feature 1 has unit noise variance

  # v_k ~ N(B_k, 1), B_k ~ N(0, 1): client means spread with std ~sqrt(2).
  assert spread_of_client_means(small) > 1.0
  assert spread_of_client_means(small_iid) < 0.3


def test_alpha_beta_zero_is_less_heterogeneous():
  hetero = synthetic.generate_arrays(
      synthetic.SyntheticConfig(num_clients=150, alpha=1.0, beta=1.0))
  homo = synthetic.generate_arrays(
      synthetic.SyntheticConfig(num_clients=150, alpha=0.0, beta=0.0))
  assert _label_tv_to_global(homo) < _label_tv_to_global(hetero)


def test_logistic_regression_beats_chance(small_iid):
  """Softmax regression (numpy, full-batch GD) on pooled i.i.d. data."""
  x, y, is_test = small_iid['x'], small_iid['y'], small_iid['is_test']
  x = x.astype(np.float64)
  mean, std = x[~is_test].mean(axis=0), x[~is_test].std(axis=0)
  x = (x - mean) / std
  x_tr, y_tr, x_te, y_te = x[~is_test], y[~is_test], x[is_test], y[is_test]
  w = np.zeros((60, 10))
  b = np.zeros(10)
  onehot = np.eye(10)[y_tr]
  for _ in range(100):
    logits = x_tr @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    grad = (p - onehot) / len(y_tr)
    w -= 1.0 * (x_tr.T @ grad)
    b -= 1.0 * grad.sum(axis=0)
  accuracy = np.mean(np.argmax(x_te @ w + b, axis=1) == y_te)
  majority = np.bincount(y_tr, minlength=10).max() / len(y_tr)
  # Measured (seed 3): accuracy ~0.91 after 100 steps, majority class ~0.42.
  assert accuracy > 0.75, accuracy
  assert accuracy > majority + 0.3, (accuracy, majority)


# ---------------------------------------------------------------- configs ---


@pytest.mark.parametrize('kwargs, message', [
    (dict(num_clients=0), 'num_clients must be an integer >= 1'),
    (dict(num_clients=2.5), 'num_clients must be an integer >= 1'),
    (dict(alpha=-0.1), 'alpha must be a finite number >= 0'),
    (dict(beta=-1.0), 'beta must be a finite number >= 0'),
    (dict(beta=float('nan')), 'beta must be a finite number >= 0'),
    (dict(test_fraction=0.0), '0 < test_fraction < 1'),
    (dict(test_fraction=1.0), '0 < test_fraction < 1'),
    (dict(test_fraction=-0.2), '0 < test_fraction < 1'),
    (dict(seed=-1), 'seed must be a non-negative integer'),
    (dict(num_features=0), 'num_features must be an integer >= 1'),
    (dict(num_classes=1), 'num_classes must be an integer >= 2'),
    (dict(max_client_size=1), 'max_client_size must be an integer >= 2'),
    (dict(iid='yes'), 'iid must be a bool'),
])
def test_bad_config_raises(kwargs, message):
  with pytest.raises(ValueError, match=message):
    synthetic.SyntheticConfig(**kwargs)


def test_config_is_frozen_and_has_documented_defaults():
  config = synthetic.SyntheticConfig()
  assert (config.num_clients, config.alpha, config.beta, config.iid,
          config.seed, config.num_features, config.num_classes,
          config.test_fraction) == (3383, 1.0, 1.0, False, 0, 60, 10, 0.2)
  with pytest.raises(Exception):
    config.seed = 1  # frozen dataclass


def test_non_config_argument_is_rejected():
  with pytest.raises(TypeError, match='SyntheticConfig'):
    synthetic.generate_arrays({'num_clients': 3})


# ------------------------------------------------------------- ClientData ---


@pytest.fixture(scope='module')
def loaded():
  config = synthetic.SyntheticConfig(num_clients=40, seed=8)
  return config, synthetic.generate_arrays(config), synthetic.load_synthetic(
      config)


def _as_numpy(dataset):
  xs, ys = [], []
  for element in dataset.as_numpy_iterator():
    xs.append(element['x'])
    ys.append(element['y'])
  return np.stack(xs), np.array(ys)


def test_client_data_ids_and_element_spec(loaded):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  config, _, (train, test, central) = loaded
  expected_ids = [f'client_{i:04d}' for i in range(config.num_clients)]
  spec = collections.OrderedDict(
      x=tf.TensorSpec([60], tf.float32), y=tf.TensorSpec([], tf.int32))
  for data in (train, test):
    assert isinstance(data, tff.simulation.datasets.ClientData)
    assert data.client_ids == expected_ids
    assert data.element_type_structure == spec
    assert isinstance(data.element_type_structure, collections.OrderedDict)
  assert isinstance(central, tf.data.Dataset)
  assert central.element_spec == spec


def test_client_ids_width_grows_with_num_clients():
  assert synthetic.client_id(7, 3383) == 'client_0007'
  assert synthetic.client_id(7, 12000) == 'client_00007'


def test_client_datasets_match_arrays(loaded):
  config, arrays, (train, test, central) = loaded
  for index in (0, 17, config.num_clients - 1):
    cid = synthetic.client_id(index, config.num_clients)
    for data, want_test in ((train, False), (test, True)):
      mask = (arrays['client'] == index) & (arrays['is_test'] == want_test)
      x, y = _as_numpy(data.create_tf_dataset_for_client(cid))
      np.testing.assert_array_equal(x, arrays['x'][mask])
      np.testing.assert_array_equal(y, arrays['y'][mask])
  x, y = _as_numpy(central)
  np.testing.assert_array_equal(x, arrays['x'][arrays['is_test']])
  np.testing.assert_array_equal(y, arrays['y'][arrays['is_test']])
  sizes = synthetic.client_sizes(config)
  assert train.create_tf_dataset_for_client(
      'client_0017').cardinality().numpy() == sizes[17]


def test_serializable_dataset_fn_works_in_graph_mode(loaded):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  config, arrays, (train, _, _) = loaded

  @tf.function
  def count_and_sum(cid):
    dataset = train.serializable_dataset_fn(cid)
    return dataset.reduce(
        (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
        lambda acc, e: (acc[0] + 1, acc[1] + tf.cast(e['y'], tf.int64)))

  mask = (arrays['client'] == 5) & ~arrays['is_test']
  count, label_sum = count_and_sum(tf.constant('client_0005'))
  assert int(count) == int(mask.sum())
  assert int(label_sum) == int(arrays['y'][mask].sum())
  # All clients through the graph path (tf.data flat_map over ids).
  everything = train.create_tf_dataset_from_all_clients(seed=0)
  assert int(everything.reduce(0, lambda n, _: n + 1)) == int(
      (~arrays['is_test']).sum())


def test_unknown_client_id_raises(loaded):
  _, _, (train, _, _) = loaded
  with pytest.raises(ValueError):
    train.create_tf_dataset_for_client('client_9999')
  with pytest.raises(ValueError, match='Unknown client id'):
    train.serializable_dataset_fn('nobody')


def test_the_vectorized_rounds_read_the_same_examples_as_each_clients_dataset():
  """Issue 49: the embedded federation's ClientData is array-backed; its arrays are exactly
  each client's dataset (keys, dtypes, values, order)."""
  from tests.datasets import array_backed_checks  # pylint: disable=g-import-not-at-top
  train, _, _ = synthetic.load_synthetic(synthetic.SyntheticConfig(num_clients=6, seed=2))
  array_backed_checks.assert_arrays_are_each_clients_dataset(train)
