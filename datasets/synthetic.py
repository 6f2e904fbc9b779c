"""Synthetic(alpha, beta) federated classification data (FedProx / LEAF).

This is the embedded default federation of `tff_idp`: it is generated
deterministically from a seed with numpy only, so it needs no network access
and no files on disk.

Reference: T. Li, A. K. Sahu, M. Zaheer, M. Sanjabi, A. Talwalkar, V. Smith,
"Federated Optimization in Heterogeneous Networks", MLSys 2020 (FedProx),
Section 5.1 and Appendix C.1; the same generator ships with the LEAF benchmark
(S. Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018,
`data/synthetic`).

Definition (d = `num_features` = 60, C = `num_classes` = 10, K = `num_clients`)
------------------------------------------------------------------------------
All normal distributions below are written N(mean, standard deviation), as
in the reference implementation (`np.random.normal(mean, alpha)`), so alpha
and beta are *standard deviations*.

* Client sizes (LEAF power law): n_k = min(50 + floor(L_k), max_client_size)
  with L_k ~ LogNormal(mu=4, sigma=2), i.i.d. over clients. The cap
  (default 180) is ours: LEAF/FedProx do not cap, which gives a mean of
  50 + e^6 ~ 450 examples per client, dominated by a few enormous clients
  (max_client_size=1000 gives ~800k examples for 3,383 clients). With the
  default cap the 3,383 clients hold 389,329 examples for seed 0 (~394k in
  expectation; 311,485 train / 77,844 test; median 100, mean 115 per
  client; about one third of the clients sit at the cap).
* Non-i.i.d. "Synthetic(alpha, beta)" (`iid=False`): for each client k,
  u_k ~ N(0, alpha) and B_k ~ N(0, beta);
  W_k in R^{C x d} with entries ~ N(u_k, 1); b_k in R^C with entries
  ~ N(u_k, 1); v_k in R^d with entries ~ N(B_k, 1).
  alpha controls how much the local models differ, beta how much the local
  feature distributions differ.
* i.i.d. "Synthetic IID" (`iid=True`): one W in R^{C x d} and one b in R^C
  with entries ~ N(0, 1), shared by all clients, and feature mean v = 0
  (alpha and beta are ignored). v = 0 is what the FedProx reference code
  does (it runs `generate_synthetic(alpha=0, beta=0, iid=1)`, so
  `mean_x = B_k * ones = 0`). A random shared v ~ N(0, 1) would make the
  labels degenerate: W v + b then dominates the logits, and one class
  often takes most of the data (58-99% in our draws).
* Features: x ~ N(v_k, Sigma) with Sigma diagonal, Sigma_jj = j^(-1.2),
  j = 1..d (v_k = 0 in the i.i.d. variant).
* Labels: y = argmax(softmax(W_k x + b_k)) = argmax(W_k x + b_k), computed
  in float64 from the stored float32 features (so the stored (x, y) pairs
  satisfy the definition exactly).
* Split: the last n_test,k = clip(floor(test_fraction * n_k + 1/2), 1,
  n_k - 1)
  examples of every client are held out as that client's test data (examples
  within a client are i.i.d., so "last" is as good as random); the
  centralized test set is the concatenation of all held-out examples.

Random draws all come from one `np.random.default_rng(seed)` in a fixed
order (sizes, per-client or shared parameters, feature noise), so a config
determines the data bit for bit.

Public API: `SyntheticConfig`, `generate_arrays`, `client_sizes`,
`load_synthetic`, `client_id`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import numbers
from typing import Any

import numpy as np

from tff_idp import client_arrays as array_backed

# LEAF / FedProx client-size law: n_k = 50 + floor(LogNormal(4, 2)).
_SIZE_OFFSET = 50
_SIZE_LOGNORMAL_MEAN = 4.0
_SIZE_LOGNORMAL_SIGMA = 2.0
# Diagonal feature covariance Sigma_jj = j ** _COV_EXPONENT.
_COV_EXPONENT = -1.2
_CLIENT_ID_PREFIX = 'client_'


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Configuration of the Synthetic(alpha, beta) federation.

  Attributes:
    num_clients: Number of clients K (default 3383).
    alpha: Std of u_k, the per-client mean of the model entries (non-i.i.d.
      only).
    beta: Std of B_k, the per-client mean of the feature means (non-i.i.d.
      only).
    iid: If True, generate the "Synthetic IID" variant (one shared W, b and
      feature mean v = 0; alpha and beta are ignored).
    seed: Seed for `np.random.default_rng`.
    num_features: Feature dimension d.
    num_classes: Number of classes C.
    test_fraction: Fraction of each client's examples held out as test data.
    max_client_size: Cap on a client's total (train + test) examples; sizes
      are min(50 + floor(LogNormal(4, 2)), max_client_size).
  """

  num_clients: int = 3383
  alpha: float = 1.0
  beta: float = 1.0
  iid: bool = False
  seed: int = 0
  num_features: int = 60
  num_classes: int = 10
  test_fraction: float = 0.2
  max_client_size: int = 180

  def __post_init__(self):
    def is_int(v: Any) -> bool:
      return isinstance(v, numbers.Integral) and not isinstance(v, bool)

    def is_real(v: Any) -> bool:
      return isinstance(v, numbers.Real) and not isinstance(v, bool)

    if not is_int(self.num_clients) or self.num_clients < 1:
      raise ValueError(
          f'num_clients must be an integer >= 1, got {self.num_clients!r}.')
    for name in ('alpha', 'beta'):
      value = getattr(self, name)
      if not is_real(value) or not np.isfinite(value) or value < 0:
        raise ValueError(
            f'{name} must be a finite number >= 0 (it is a standard '
            f'deviation), got {value!r}.')
    if not isinstance(self.iid, (bool, np.bool_)):
      raise ValueError(f'iid must be a bool, got {self.iid!r}.')
    if not is_int(self.seed) or self.seed < 0:
      raise ValueError(
          f'seed must be a non-negative integer, got {self.seed!r}.')
    if not is_int(self.num_features) or self.num_features < 1:
      raise ValueError(
          f'num_features must be an integer >= 1, got {self.num_features!r}.')
    if not is_int(self.num_classes) or self.num_classes < 2:
      raise ValueError(
          f'num_classes must be an integer >= 2, got {self.num_classes!r}.')
    if (not is_real(self.test_fraction)
        or not 0.0 < self.test_fraction < 1.0):
      raise ValueError(
          'test_fraction must satisfy 0 < test_fraction < 1, got '
          f'{self.test_fraction!r}.')
    if not is_int(self.max_client_size) or self.max_client_size < 2:
      raise ValueError(
          'max_client_size must be an integer >= 2 (each client needs at '
          'least one train and one test example), got '
          f'{self.max_client_size!r}.')


def _check_config(config: Any) -> SyntheticConfig:
  if not isinstance(config, SyntheticConfig):
    raise TypeError(
        f'config must be a SyntheticConfig, got {type(config).__name__}.')
  return config


def _draw_sizes(
    rng: np.random.Generator, config: SyntheticConfig
) -> tuple[np.ndarray, np.ndarray]:
  """Draws (total, test) example counts per client; the rng's first draw."""
  raw = rng.lognormal(
      _SIZE_LOGNORMAL_MEAN, _SIZE_LOGNORMAL_SIGMA, config.num_clients)
  # The cap is applied in float64, before the int cast, so no overflow.
  total = np.minimum(_SIZE_OFFSET + np.floor(raw),
                     config.max_client_size).astype(np.int64)
  num_test = np.floor(config.test_fraction * total + 0.5).astype(np.int64)
  num_test = np.clip(num_test, 1, total - 1)
  return total, num_test


def client_sizes(config: SyntheticConfig = SyntheticConfig()) -> np.ndarray:
  """Number of *train* examples of each client, as an int64 array [K].

  Cheap (draws only the sizes) and consistent with `generate_arrays`.
  """
  config = _check_config(config)
  total, num_test = _draw_sizes(np.random.default_rng(config.seed), config)
  return total - num_test


def generate_arrays(
    config: SyntheticConfig = SyntheticConfig(),
) -> dict[str, np.ndarray]:
  """Generates the whole federation as numpy arrays.

  Examples are sorted by client; within a client, train examples come first,
  then the held-out test examples.

  Args:
    config: A `SyntheticConfig`.

  Returns:
    A dict with 'x' float32 [n, d], 'y' int32 [n], 'client' int32 [n] (client
    index in [0, K)) and 'is_test' bool [n].
  """
  config = _check_config(config)
  rng = np.random.default_rng(config.seed)
  k, d, c = config.num_clients, config.num_features, config.num_classes
  total, num_test = _draw_sizes(rng, config)

  if config.iid:
    w = rng.normal(0.0, 1.0, size=(c, d))
    b = rng.normal(0.0, 1.0, size=c)
    v = np.zeros(d)
  else:
    u = rng.normal(0.0, config.alpha, size=k)
    big_b = rng.normal(0.0, config.beta, size=k)
    w = rng.normal(u[:, None, None], 1.0, size=(k, c, d))
    b = rng.normal(u[:, None], 1.0, size=(k, c))
    v = rng.normal(big_b[:, None], 1.0, size=(k, d))

  n = int(total.sum())
  client = np.repeat(np.arange(k, dtype=np.int32), total)
  offsets = np.concatenate([[0], np.cumsum(total)])
  std = np.arange(1, d + 1, dtype=np.float64) ** (_COV_EXPONENT / 2.0)
  noise = rng.standard_normal(size=(n, d))
  x = np.empty((n, d), dtype=np.float32)
  y = np.empty(n, dtype=np.int32)
  # Loop over clients (not examples). Labels are computed from the stored
  # float32 features, so (x, y) is exactly consistent with the definition.
  for i in range(k):
    lo, hi = offsets[i], offsets[i + 1]
    w_i, b_i, v_i = (w, b, v) if config.iid else (w[i], b[i], v[i])
    x[lo:hi] = noise[lo:hi] * std + v_i
    logits = x[lo:hi].astype(np.float64) @ w_i.T + b_i
    y[lo:hi] = np.argmax(logits, axis=1)
  del noise

  # Position of each example inside its client's block.
  starts = np.repeat(np.cumsum(total) - total, total)
  position = np.arange(n) - starts
  is_test = position >= np.repeat(total - num_test, total)

  return {
      'x': x,
      'y': y,
      'client': client,
      'is_test': is_test,
  }


def client_id(index: int, num_clients: int) -> str:
  """The string id of client `index`, e.g. 'client_0007' (at least 4 digits)."""
  width = max(4, len(str(num_clients - 1)))
  return f'{_CLIENT_ID_PREFIX}{index:0{width}d}'


def _make_client_data(x: np.ndarray, y: np.ndarray, client: np.ndarray,
                      num_clients: int):
  """A lazily materialised `ClientData` over examples sorted by client."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  counts = np.bincount(client, minlength=num_clients)
  offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
  ids = [client_id(i, num_clients) for i in range(num_clients)]
  index_of = {cid: i for i, cid in enumerate(ids)}

  def from_slices(xs, ys):
    return tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=xs, y=ys))

  def dataset_fn(cid):
    # Eager fast path: slice in numpy, so the dataset holds only this
    # client's examples (and stays small when TFF serializes it).
    if isinstance(cid, tf.Tensor) and tf.executing_eagerly():
      cid = cid.numpy()
    if isinstance(cid, bytes):
      cid = cid.decode('utf-8')
    if isinstance(cid, str):
      if cid not in index_of:
        raise ValueError(f'Unknown client id {cid!r}.')
      i = index_of[cid]
      lo, hi = offsets[i], offsets[i + 1]
      return from_slices(x[lo:hi], y[lo:hi])
    # Graph path (inside tf.function / tf.data functions / TFF computations):
    # the arrays are embedded as constants and sliced by the parsed index.
    digits = tf.strings.regex_replace(cid, '^' + _CLIENT_ID_PREFIX, '')
    i = tf.strings.to_number(digits, out_type=tf.int64)
    offsets_t = tf.constant(offsets)
    lo = tf.gather(offsets_t, i)
    hi = tf.gather(offsets_t, i + 1)
    return from_slices(tf.constant(x)[lo:hi], tf.constant(y)[lo:hi])

  def client_arrays(cid):  # what dataset_fn(cid) yields, without a pipeline (issue 49)
    i = index_of.get(cid)
    if i is None:
      raise ValueError(f'Unknown client id {cid!r}.')
    lo, hi = offsets[i], offsets[i + 1]
    return collections.OrderedDict(x=x[lo:hi], y=y[lo:hi])

  return array_backed.attach(
      tff.simulation.datasets.ClientData.from_clients_and_tf_fn(ids, dataset_fn),
      client_arrays)


def load_synthetic(config: SyntheticConfig = SyntheticConfig()):
  """Builds the federation as TFF `ClientData` plus a centralized test set.

  Client datasets are created lazily (on demand), so building is dominated
  by `generate_arrays` (~1 s for the default 3,383 clients).
  `create_tf_dataset_for_client` with a Python id slices numpy arrays, so the
  returned dataset holds only that client's examples. When
  `serializable_dataset_fn` is traced with a string tensor (inside a
  `tf.function`, `create_tf_dataset_from_all_clients`, or
  `dataset_computation`), the whole split is embedded as graph constants and
  sliced by the id's numeric suffix (~75 MB for the default train split).

  Args:
    config: A `SyntheticConfig`.

  Returns:
    `(train, test, central_test)`: train and per-client held-out test
    `tff.simulation.datasets.ClientData` with ids `client_id(i, K)`
    ('client_0000', ...), and a `tf.data.Dataset` of all held-out examples.
    Elements are `OrderedDict(x=float32[d], y=int32[])`.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  config = _check_config(config)
  arrays = generate_arrays(config)
  train_mask = ~arrays['is_test']
  test_mask = arrays['is_test']
  train = _make_client_data(arrays['x'][train_mask], arrays['y'][train_mask],
                            arrays['client'][train_mask], config.num_clients)
  test = _make_client_data(arrays['x'][test_mask], arrays['y'][test_mask],
                           arrays['client'][test_mask], config.num_clients)
  central_test = tf.data.Dataset.from_tensor_slices(
      collections.OrderedDict(
          x=arrays['x'][test_mask], y=arrays['y'][test_mask]))
  return train, test, central_test


def pooled_arrays(train_examples: int, test_examples: int, seed: int = 0,
                  iid: bool = True) -> dict:
  """One silo: the train records of enough Synthetic users pooled, their test records as test.

  Returns ``x``, ``y`` (the first ``train_examples`` train records; 0 = all),
  ``test_x``, ``test_y`` (the first ``test_examples``; 0 = all) and the
  ``config``. About 92 train records per user (LEAF sizes, capped at 180, 80%
  train), so ``ceil(1.25·train_examples/92)`` users (at least 10) are drawn.
  The centralized experiments (rPDP-FL §7.1, INO-SGD) train on this silo.
  """
  if train_examples < 0 or test_examples < 0:
    raise ValueError("train_examples and test_examples must be >= 0 (0 = all).")
  users = max(10, math.ceil(1.25 * max(train_examples, 1) / 92))
  config = SyntheticConfig(num_clients=users, iid=iid, seed=seed)
  arrays = generate_arrays(config)
  train, test = ~arrays["is_test"], arrays["is_test"]
  x, y = arrays["x"][train], arrays["y"][train]
  tx, ty = arrays["x"][test], arrays["y"][test]
  if train_examples:
    x, y = x[:train_examples], y[:train_examples]
  if test_examples:
    tx, ty = tx[:test_examples], ty[:test_examples]
  return {"x": x, "y": y, "test_x": tx, "test_y": ty, "config": config}
