"""Federations from numpy arrays: `from_arrays(x, y, ...)` -> a split object.

  split = datasets.from_arrays(x, y, partition="dirichlet", num_clients=50,
                               alpha=0.5, seed=0, test_x=tx, test_y=ty)
  train = split.train_client_data()      # ClientData of OrderedDict(x, y)
  saved = split.save("splits/my-data")   # train.sqlite, test.sqlite, manifest
  again = datasets.resolve("splits/my-data")   # or loader.open_split(...)

Partitions (reusing `datasets.partition`, seeded with
`np.random.default_rng(seed)`, so the same seed gives the same clients):

* "iid": `partition.iid_equal`, a random permutation dealt into
  `num_clients` clients of ⌊n/K⌋ or ⌈n/K⌉ examples.
* "dirichlet": `partition.dirichlet_turns` with per-class concentration
  `alpha` (default 0.1, the paper's CIFAR-10 split); sizes ⌊n/K⌋ or ⌈n/K⌉.
* "natural": one client per distinct value of `groups` (a natural owner per
  example, e.g. writer or hospital; `partition.from_groups`), client ids
  `str(value)` in sorted order, examples in source order.

Features x may have any shape [n, ...] (tabular [n, d], images [n, H, W, C]).
They are handed out as float32: float64 is rounded to float32 (values beyond
float32's range are an error), float16/bool/integers convert exactly (integers
must lie within ±2**24); uint8 images are stored as bytes (0..255, not
rescaled; their `rescale` defaults to 1/255, the factor a model that
rescales inside applies). NaN or inf is an error. Labels y are class ids
0..num_classes-1 (`num_classes` defaults to max label + 1): int64 or
integer-valued floats convert to int32 exactly; non-integers, negative ids,
ids >= num_classes, or ids beyond int32 are errors. Every error is a
`tff_idp.errors.ToolkitValueError` that names the argument (x, y, groups,
test_x, ...), the first offending example, and what to change.

The result, `ArraySplit`, is an in-memory split with the interface of
`datasets.loader.FederatedSplit` (`train_client_data()`, `test_arrays()`,
`test_dataset()`, `num_classes`, `element_shape`, `feature_spec`,
`client_ids`, `num_clients`, `label_counts()`, `info`, `manifest`), and
`save(directory)` writes it as a split directory in the builders' format
(version 2 manifest, which adds a `data_spec`: feature spec, element shape,
dtypes, number of classes, label names, rescale factor), returning the
opened `FederatedSplit`.
"""
from __future__ import annotations

import collections
import hashlib
import numbers
import os
import re
import time
from typing import Optional, Sequence

import numpy as np

from datasets import builder
from datasets import integrity
from datasets import loader
from datasets import partition as partition_lib
from datasets import specs
from datasets import sql_split
from tff_idp import client_arrays as array_backed
from tff_idp.errors import ToolkitValueError

PARTITIONS = ("iid", "dirichlet", "natural")
DEFAULT_ALPHA = 0.1
ARRAYS_DATASET = "arrays"
_MAX_EXACT_INT = 2 ** 24            # integers float32 holds exactly
_F32_MAX = float(np.finfo(np.float32).max)
_I32_MAX = int(np.iinfo(np.int32).max)


# ----------------------------------------------------------------------------
# Argument checks (each error names the argument and what to change).
# ----------------------------------------------------------------------------
def _features(x, name: str) -> np.ndarray:
  """x as uint8 (images) or float32 [n, ...]; ToolkitValueError naming `name`."""
  try:
    a = np.asarray(x)
  except (ValueError, TypeError) as e:
    raise ToolkitValueError(f"{name}: not an array ({e}); pass a numpy array of shape "
                            "[num_examples, ...] with the same shape for every "
                            "example.") from None
  if a.dtype.kind not in "biuf":
    raise ToolkitValueError(f"{name}: features must be numbers, got dtype {a.dtype}; "
                            "encode categories as numbers first.")
  if a.ndim < 2:
    raise ToolkitValueError(
        f"{name}: expected shape [num_examples, ...features], got {a.shape}; for one "
        f"scalar feature per example pass {name}.reshape(-1, 1).")
  if a.shape[0] == 0 or 0 in a.shape[1:]:
    raise ToolkitValueError(f"{name}: has shape {a.shape}; every example needs at least "
                            "one feature and there must be at least one example.")
  if a.dtype == np.uint8:
    return a
  if a.dtype.kind == "f":
    finite = np.isfinite(a).reshape(len(a), -1).all(axis=1)
    if not finite.all():
      i = int(np.flatnonzero(~finite)[0])
      raise ToolkitValueError(f"{name}: example {i} holds NaN or inf "
                              f"({int((~finite).sum())} examples do); drop or impute "
                              "them first.")
    if a.dtype.itemsize > 4:
      big = np.abs(a).reshape(len(a), -1).max(axis=1) > _F32_MAX
      if big.any():
        i = int(np.flatnonzero(big)[0])
        raise ToolkitValueError(f"{name}: example {i} holds values beyond float32's "
                                f"range (±{_F32_MAX:.3g}); rescale the features.")
    return a.astype(np.float32)
  if a.dtype.kind in "iu" and a.size and (int(a.min()) < -_MAX_EXACT_INT
                                          or int(a.max()) > _MAX_EXACT_INT):
    i = int(np.flatnonzero((np.abs(a.reshape(len(a), -1).astype(np.float64))
                            > _MAX_EXACT_INT).any(axis=1))[0])
    raise ToolkitValueError(f"{name}: example {i} holds integers beyond ±2**24, which "
                            "float32 cannot hold exactly; rescale them or pass floats.")
  return a.astype(np.float32)


def _labels(y, name: str, n: int, x_name: str) -> np.ndarray:
  """y as int32 [n] class ids >= 0; ToolkitValueError naming `name`."""
  try:
    a = np.asarray(y)
  except (ValueError, TypeError) as e:
    raise ToolkitValueError(f"{name}: not an array ({e}); pass integer class ids, one "
                            "per example.") from None
  if a.ndim == 2 and a.shape[1] == 1:
    a = a[:, 0]
  if a.ndim != 1:
    raise ToolkitValueError(
        f"{name}: expected one class id per example, shape [{n}], got {a.shape}; for "
        f"one-hot labels pass {name}.argmax(axis=1).")
  if len(a) != n:
    raise ToolkitValueError(f"{name}: has {len(a)} labels but {x_name} has {n} examples; "
                            "pass one label per example.")
  if a.dtype.kind not in "biuf":
    raise ToolkitValueError(
        f"{name}: class ids must be integers 0..num_classes-1, got dtype {a.dtype}; map "
        f"names to ids first, e.g. names, {name} = np.unique({name}, return_inverse=True).")
  if a.dtype.kind == "f":
    bad = ~np.isfinite(a) | (a != np.round(a))
    if bad.any():
      i = int(np.flatnonzero(bad)[0])
      raise ToolkitValueError(f"{name}: label {a[i]!r} of example {i} is not an integer "
                              "class id; pass integer ids 0..num_classes-1.")
  if a.size and a.min() < 0:
    i = int(np.flatnonzero(a < 0)[0])
    raise ToolkitValueError(f"{name}: label {a[i]!r} of example {i} is negative; class "
                            "ids are 0..num_classes-1.")
  if a.size and a.max() > _I32_MAX:
    i = int(np.argmax(a))
    raise ToolkitValueError(f"{name}: label {a[i]!r} of example {i} does not fit int32; "
                            "class ids are 0..num_classes-1.")
  return a.astype(np.int32)


def _check_range(y: np.ndarray, name: str, num_classes: int) -> None:
  bad = np.flatnonzero(y >= num_classes)
  if bad.size:
    i = int(bad[0])
    raise ToolkitValueError(f"{name}: label {int(y[i])} of example {i} is >= "
                            f"num_classes={num_classes}; pass a larger num_classes or fix "
                            "the labels.")


def _groups(groups, n: int) -> tuple[np.ndarray, list[str]]:
  """(group index per example, client id per group), ids str(value), sorted by value."""
  try:
    g = np.asarray(groups)
  except (ValueError, TypeError) as e:
    raise ToolkitValueError(f"groups: not an array ({e}); pass one owner id per "
                            "example.") from None
  if g.ndim != 1 or len(g) != n:
    raise ToolkitValueError(f"groups: expected one owner id per example, shape [{n}], got "
                            f"{g.shape}.")
  if g.dtype.kind == "f" and not np.isfinite(g).all():
    i = int(np.flatnonzero(~np.isfinite(g))[0])
    raise ToolkitValueError(f"groups: example {i} has owner {g[i]!r}; every example "
                            "needs an owner id.")
  if g.dtype.kind == "O" and any(v is None for v in g):
    i = next(i for i, v in enumerate(g) if v is None)
    raise ToolkitValueError(f"groups: example {i} has owner None; every example needs "
                            "an owner id.")
  try:
    values, codes = np.unique(g, return_inverse=True)
  except TypeError as e:
    raise ToolkitValueError(f"groups: owner ids must be comparable, all numbers or all "
                            f"strings ({e}).") from None
  ids = [str(v) for v in values.tolist()]
  if len(set(ids)) != len(ids):
    raise ToolkitValueError("groups: two different owner ids have the same text "
                            f"({sorted(ids)[:5]}...); use ids that differ as strings.")
  return codes.astype(np.int64).reshape(-1), ids


def _count(value, name: str, minimum: int = 1) -> int:
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ToolkitValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
  return int(value)


def _sha256_labels(y: np.ndarray) -> str:
  return hashlib.sha256(np.ascontiguousarray(y, dtype="<i8").tobytes()).hexdigest()


# ----------------------------------------------------------------------------
# The in-memory split.
# ----------------------------------------------------------------------------
class ArraySplit(loader.SplitViews):
  """A federation held in memory; see the module doc. Made by `from_arrays`."""

  directory = None

  def __init__(self, *, x: np.ndarray, y: np.ndarray, offsets: np.ndarray,
               client_ids: Sequence[str], test_x: np.ndarray, test_y: np.ndarray,
               info: specs.DatasetInfo, manifest: dict):
    self._x, self._y, self._offsets = x, y, offsets
    self._ids = list(client_ids)
    self._test_x, self._test_y = test_x, test_y
    self.info = info
    self.manifest = manifest

  @property
  def dataset(self) -> str:
    return self.manifest["dataset"]

  @property
  def num_clients(self) -> int:
    return len(self._ids)

  @property
  def client_ids(self) -> list[str]:
    return list(self._ids)

  def client_arrays(self, client_id: str) -> tuple[np.ndarray, np.ndarray]:
    """One client's (x float32 [m, *element_shape], y int32 [m])."""
    if getattr(self, "_index_of", None) is None:  # one dict: a round reads ~1,000 clients
      self._index_of = {cid: i for i, cid in enumerate(self._ids)}
    i = self._index_of.get(client_id)
    if i is None:
      raise ToolkitValueError(f"unknown client id {client_id!r}; see .client_ids "
                              f"(e.g. {self._ids[:3]}).")
    lo, hi = self._offsets[i], self._offsets[i + 1]
    return self._x[lo:hi].astype(np.float32), self._y[lo:hi].copy()

  def train_client_data(self):
    """ClientData of OrderedDict(x=float32 [*element_shape], y=int32), built lazily.

    Marked as array-backed (:mod:`tff_idp.client_arrays`): the
    vectorized rounds index these arrays instead of a pipeline per client.
    """
    return array_backed.attach(
        _client_data(self._x, self._y, self._offsets, self._ids),
        lambda cid: collections.OrderedDict(zip(("x", "y"), self.client_arrays(cid))))

  def train_arrays(self) -> "collections.OrderedDict[str, tuple[np.ndarray, np.ndarray]]":
    """Every client's ``client_arrays``, in ``client_ids`` order (``SplitViews.train_arrays``)."""
    return collections.OrderedDict((c, self.client_arrays(c)) for c in self._ids)

  def test_arrays(self) -> tuple[np.ndarray, np.ndarray]:
    """The centralized test set as (x float32 [n, *element_shape], y int32 [n])."""
    return self._test_x.astype(np.float32), self._test_y.copy()

  def label_counts(self) -> tuple[list[str], np.ndarray]:
    """(client ids, [K, C] label counts)."""
    return (list(self._ids),
            np.asarray(self.manifest["client_label_counts"], dtype=np.int64))

  def save(self, directory: str, overwrite: bool = False) -> loader.FederatedSplit:
    """Writes train.sqlite, test.sqlite and manifest.json; returns the opened split."""
    directory = os.path.expanduser(directory)
    loader._prepare_output_dir(directory, overwrite)  # pylint: disable=protected-access
    spec = self.info.features
    train_sha = sql_split.write_sqlite(
        os.path.join(directory, builder.TRAIN_FILE), self._ids,
        [np.arange(lo, hi) for lo, hi in zip(self._offsets[:-1], self._offsets[1:])],
        self._x, self._y, "train", spec=spec)
    n_test = len(self._test_y)
    test_sha = sql_split.write_sqlite(
        os.path.join(directory, builder.TEST_FILE), ["test"] if n_test else [],
        [np.arange(n_test)] if n_test else [], self._test_x, self._test_y, "test",
        spec=spec)
    manifest = dict(self.manifest)
    manifest[integrity.ROWS_SHA256] = {"train": train_sha, "test": test_sha}
    builder.write_manifest(directory, manifest)
    return loader.open_split(directory)

  def __repr__(self) -> str:
    return (f"ArraySplit({self.manifest['name']!r}: {self.num_clients} clients, "
            f"{len(self._y)} train / {len(self._test_y)} test examples, x "
            f"{list(self.element_shape)}, {self.num_classes} classes)")


def _client_data(x: np.ndarray, y: np.ndarray, offsets: np.ndarray, ids: list[str]):
  """A lazily materialised `ClientData` over examples sorted by client."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  index_of = {cid: i for i, cid in enumerate(ids)}
  offsets = np.asarray(offsets, dtype=np.int64)

  def from_slices(xs, ys):
    ds = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=xs, y=ys))
    if xs.dtype != tf.float32:
      ds = ds.map(lambda e: collections.OrderedDict(x=tf.cast(e["x"], tf.float32),
                                                    y=e["y"]))
    return ds

  def dataset_fn(cid):
    # Eager: slice in numpy, so the dataset holds only this client's examples.
    if isinstance(cid, tf.Tensor) and tf.executing_eagerly():
      cid = cid.numpy()
    if isinstance(cid, bytes):
      cid = cid.decode("utf-8")
    if isinstance(cid, str):
      if cid not in index_of:
        raise ToolkitValueError(f"unknown client id {cid!r}; see .client_ids.")
      i = index_of[cid]
      lo, hi = offsets[i], offsets[i + 1]
      return from_slices(tf.constant(x[lo:hi]), tf.constant(y[lo:hi]))
    # Traced with a string tensor (TFF dataset computations): the arrays become
    # graph constants, sliced by the id's index.
    table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(ids),
                                            tf.range(len(ids), dtype=tf.int64)), -1)
    i = table.lookup(cid)
    offsets_t = tf.constant(offsets)
    lo, hi = tf.gather(offsets_t, i), tf.gather(offsets_t, i + 1)
    return from_slices(tf.constant(x)[lo:hi], tf.constant(y)[lo:hi])

  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(ids, dataset_fn)


# ----------------------------------------------------------------------------
# from_arrays
# ----------------------------------------------------------------------------
def from_arrays(x, y, partition: str = "iid", num_clients: Optional[int] = None,
                groups=None, seed: int = 0, test_x=None, test_y=None,
                alpha: Optional[float] = None, *, num_classes: Optional[int] = None,
                label_names: Optional[Sequence[str]] = None,
                rescale: Optional[float] = None, name: str = ARRAYS_DATASET,
                source: Optional[dict] = None) -> ArraySplit:
  """A federation of (x, y) partitioned into clients; see the module doc.

  Args:
    x: Features [n, ...] (any numeric dtype; handed out as float32).
    y: Class ids [n] in 0..num_classes-1.
    partition: "iid", "dirichlet" or "natural".
    num_clients: K (required for iid/dirichlet; for natural, if given, must
      equal the number of distinct groups).
    groups: [n] natural owner id per example (partition="natural" only).
    seed: Partition seed (>= 0); same seed, same clients.
    test_x, test_y: Optional centralized test set (both or neither).
    alpha: Dirichlet concentration per class (dirichlet only; default 0.1).
    num_classes: Number of classes (default max label + 1, train and test).
    label_names: Optional names of the classes.
    rescale: Factor a model applies to x inside (default 1/255 for uint8 x,
      else 1); recorded in the split's info, x itself is not changed.
    name: The `dataset` recorded in the manifest (default "arrays").
    source: Extra `source` manifest fields (used by the tfds source).

  Returns:
    An `ArraySplit`.
  """
  t0 = time.time()
  if partition not in PARTITIONS:
    raise ToolkitValueError(f"partition must be one of {list(PARTITIONS)}, got "
                            f"{partition!r}.")
  seed = _count(seed, "seed", 0)
  xa = _features(x, "x")
  n = len(xa)
  ya = _labels(y, "y", n, "x")
  if (test_x is None) != (test_y is None):
    missing = "test_y" if test_y is None else "test_x"
    raise ToolkitValueError(f"{missing}: pass test_x and test_y together (or neither).")
  if test_x is not None:
    txa = _features(test_x, "test_x")
    if txa.shape[1:] != xa.shape[1:]:
      raise ToolkitValueError(f"test_x: examples have shape {list(txa.shape[1:])} but x's "
                              f"have {list(xa.shape[1:])}; they must match.")
    tya = _labels(test_y, "test_y", len(txa), "test_x")
  else:
    txa = np.zeros((0,) + xa.shape[1:], dtype=xa.dtype)
    tya = np.zeros(0, dtype=np.int32)
  if xa.dtype != txa.dtype:           # one storage type for both files
    xa, txa = xa.astype(np.float32), txa.astype(np.float32)

  inferred = int(max(ya.max(), tya.max() if len(tya) else 0)) + 1
  if num_classes is None:
    num_classes = inferred
    if num_classes < 2:
      raise ToolkitValueError("y: every label is 0, so num_classes would be 1; pass "
                              "num_classes=<number of classes>.")
  num_classes = _count(num_classes, "num_classes", 1)
  _check_range(ya, "y", num_classes)
  _check_range(tya, "test_y", num_classes)
  if label_names is None:
    label_names = tuple(str(c) for c in range(num_classes))
  else:
    label_names = tuple(str(v) for v in label_names)
    if len(label_names) != num_classes:
      raise ToolkitValueError(f"label_names: has {len(label_names)} names for "
                              f"{num_classes} classes; pass one name per class.")
  if rescale is None:
    rescale = 1.0 / 255.0 if xa.dtype == np.uint8 else 1.0
  if (isinstance(rescale, bool) or not isinstance(rescale, numbers.Real)
      or not 0 < rescale < float("inf")):
    raise ToolkitValueError(f"rescale must be a finite number > 0, got {rescale!r}.")

  params = {}
  if partition == "natural":
    if groups is None:
      raise ToolkitValueError("groups: partition='natural' needs groups, the owner id of "
                              "every example (e.g. writer or hospital).")
    if alpha is not None:
      raise ToolkitValueError("alpha is only used by partition='dirichlet'; omit it.")
    codes, ids = _groups(groups, n)
    if num_clients is not None and _count(num_clients, "num_clients") != len(ids):
      raise ToolkitValueError(
          f"num_clients: partition='natural' makes one client per distinct group, and "
          f"groups has {len(ids)}; omit num_clients or pass {len(ids)}.")
    assignment = partition_lib.from_groups(codes, len(ids))
  else:
    if groups is not None:
      raise ToolkitValueError(f"groups is only used by partition='natural', not "
                              f"{partition!r}; omit it or pass partition='natural'.")
    if num_clients is None:
      raise ToolkitValueError(f"num_clients: partition={partition!r} needs the number of "
                              "clients, e.g. num_clients=100.")
    k = _count(num_clients, "num_clients")
    if k > n:
      raise ToolkitValueError(f"num_clients: {k} clients for {n} examples would leave "
                              f"clients empty; pass num_clients <= {n}.")
    rng = np.random.default_rng(seed)
    if partition == "iid":
      if alpha is not None:
        raise ToolkitValueError("alpha is only used by partition='dirichlet'; omit it.")
      assignment = partition_lib.iid_equal(n, k, rng)
    else:
      alpha = DEFAULT_ALPHA if alpha is None else alpha
      if (isinstance(alpha, bool) or not isinstance(alpha, numbers.Real)
          or not 0 < alpha < float("inf")):
        raise ToolkitValueError(f"alpha must be a finite number > 0, got {alpha!r}.")
      params = {"alpha": float(alpha)}
      assignment = partition_lib.dirichlet_turns(ya, k, float(alpha), rng,
                                                 num_classes=num_classes)
    ids = [builder.client_id(i, k) for i in range(k)]
  sizes = assignment.sizes
  if (sizes == 0).any():
    i = int(np.flatnonzero(sizes == 0)[0])
    raise ToolkitValueError(f"num_clients: client {ids[i]!r} would get no examples; "
                            "pass fewer clients.")

  order = np.concatenate(assignment.indices)
  offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
  key = "image" if xa.dtype == np.uint8 else "x"
  shape = tuple(int(d) for d in xa.shape[1:])
  features = {key: ("int64" if key == "image" else "float", shape),
              sql_split.LABEL_KEY: ("int64", ())}
  info = specs.DatasetInfo(name, shape, num_classes, float(rescale), features,
                           label_names, len(ids), (partition,))
  k = len(ids)
  seed_part = "" if partition == "natural" else f"-seed{seed}"
  alpha_part = f"-alpha{params['alpha']:g}" if params else ""
  split_name = re.sub(r"[^A-Za-z0-9_.]+", "-",
                      f"{name}-{partition}-k{k}{alpha_part}{seed_part}")
  manifest = {
      "format": builder.FORMAT,
      "version": builder.VERSION_DATA_SPEC,
      "name": split_name,
      "dataset": name,
      "partition": partition,
      "params": params,
      "seed": seed,
      "source": dict({"files": [], "splits": ["train"], "num_examples": n,
                      "labels_sha256": _sha256_labels(ya)}, **(source or {})),
      "num_clients": k,
      "num_train_examples": int(assignment.num_examples),
      "unassigned_examples": int(n - assignment.num_examples),
      "assignment_sha256": assignment.checksum(),
      "test": {"split": "test", "num_clients": 1 if len(tya) else 0,
               "num_examples": int(len(tya))},
      "client_sizes_summary": builder._size_summary(sizes),  # pylint: disable=protected-access
      "numpy_version": np.__version__,
      "build_seconds": round(time.time() - t0, 1),
      "command": None,
      integrity.DATA_SPEC: specs.data_spec(info),
      "client_ids": ids,
      "client_sizes": sizes.tolist(),
      "client_label_counts": assignment.label_counts(ya, num_classes).tolist(),
  }
  return ArraySplit(x=xa[order], y=ya[order], offsets=offsets, client_ids=ids,
                    test_x=txa, test_y=tya, info=info, manifest=manifest)


def save_split(split, directory: str, overwrite: bool = False) -> loader.FederatedSplit:
  """`split.save(directory)`: writes any split object as a split directory."""
  return split.save(directory, overwrite=overwrite)
