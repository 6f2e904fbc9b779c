"""Loading a federated split: one call gives train `ClientData` and the test set.

IDP-FedAvg paper, Sec. V-B/V-C. `load_federated("cifar10", "pachinko")`
opens the split directory when it holds a complete split (checking the
manifest against what was asked for, and the sqlite files against the
manifest), builds it from the local source files otherwise, and returns

  (train, test): train is a `tff.simulation.datasets.ClientData` whose
  clients yield OrderedDict(x=float32 [H, W, C], y=int32); test is the
  centralized original test set as a `tf.data.Dataset` of the same elements.

With `batch_size` (and `local_epochs`) it applies the paper's client
preprocessing: shuffle, repeat for the local epochs, batch (Sec. V-C: 15
epochs of batch 128); the test set is batched too. Pixels keep their stored
scale (0..255 for CIFAR-10/SVHN, [0, 1] for EMNIST) because the paper's CNN
rescales inside the model (`DatasetInfo.rescale`, 1/255 or 1);
`rescale=True` applies that factor here instead, for models without it.

A directory with `train.sqlite` and `test.sqlite` but no manifest (e.g. the
paper's published `datasets_custom/cifar10`) is opened as an external split:
the files are checked for the dataset's format, the partition cannot be.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import numpy as np

from datasets import builder
from datasets import sources
from datasets import specs
from datasets import sql_split

DEFAULT_SPLITS_DIR = os.path.join(os.path.expanduser("~"), ".tff_idp", "splits")


class SplitMismatchError(sql_split.SplitFormatError):
  """The split on disk was built with other settings than the ones asked for."""


@dataclasses.dataclass
class FederatedSplit:
  """A complete split directory, checked. `manifest` is None for external ones."""
  directory: str
  dataset: str
  manifest: Optional[dict]

  @property
  def info(self) -> specs.DatasetInfo:
    return specs.info(self.dataset)

  @property
  def train_path(self) -> str:
    return os.path.join(self.directory, builder.TRAIN_FILE)

  @property
  def test_path(self) -> str:
    return os.path.join(self.directory, builder.TEST_FILE)

  @property
  def num_clients(self) -> Optional[int]:
    if self.manifest is not None:
      return int(self.manifest["num_clients"])
    return len(sql_split.client_sizes(self.train_path))

  def train_client_data(self):
    """ClientData of OrderedDict(x=float32 [H, W, C], y=int32), stored pixel scale."""
    return sql_split.load_client_data(self.train_path, self.info.features)

  def test_arrays(self) -> tuple[np.ndarray, np.ndarray]:
    """The centralized test set as (x float32 [n, H, W, C], y int32 [n])."""
    a = sql_split.read_arrays(self.test_path, self.info.features)
    x = a["x"].astype(np.float32).reshape((-1,) + self.info.input_shape)
    return x, a["y"].astype(np.int32)

  def test_dataset(self):
    import collections  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    x, y = self.test_arrays()
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y))

  def label_counts(self) -> tuple[list[str], np.ndarray]:
    """(client ids, [K, C] label counts) from the manifest, or from the file."""
    if self.manifest is not None:
      return (list(self.manifest["client_ids"]),
              np.asarray(self.manifest["client_label_counts"], dtype=np.int64))
    a = sql_split.read_arrays(self.train_path, self.info.features, keys=("y", "client"))
    ids = sorted(set(a["client"]))
    index = {c: i for i, c in enumerate(ids)}
    counts = np.zeros((len(ids), self.info.num_classes), dtype=np.int64)
    np.add.at(counts, ([index[c] for c in a["client"]], a["y"]), 1)
    return ids, counts


def _read_manifest(path: str) -> dict:
  try:
    with open(path) as f:
      m = json.load(f)
  except (OSError, ValueError) as e:
    raise sql_split.SplitFormatError(
        f"{path} is not a readable split manifest ({e}). Delete "
        f"{os.path.dirname(path)} and rebuild it.") from None
  if not isinstance(m, dict) or m.get("format") != builder.FORMAT:
    raise sql_split.SplitFormatError(
        f"{path} is not a tff_idp split manifest (format "
        f"{m.get('format') if isinstance(m, dict) else None!r}).")
  return m


def _compare(m: dict, spec: specs.FederationSpec, directory: str) -> None:
  want = spec.resolved()
  diffs = []
  for key, asked in (("dataset", want.dataset), ("partition", want.partition),
                     ("seed", want.seed)):
    if m.get(key) != asked:
      diffs.append(f"{key} {m.get(key)!r} (asked for {asked!r})")
  if want.num_clients is not None and m.get("num_clients") != want.num_clients:
    diffs.append(f"num_clients {m.get('num_clients')} (asked for {want.num_clients})")
  if m.get("params") != want.params:
    diffs.append(f"params {m.get('params')} (asked for {want.params})")
  if diffs:
    raise SplitMismatchError(
        f"the split in {directory} was built with " + "; ".join(diffs) +
        ". Pass another --split_dir (or none, for one per setting), or delete it.")


def open_split(directory: str, expected: Optional[specs.FederationSpec] = None,
               dataset: Optional[str] = None) -> FederatedSplit:
  """Opens and checks a complete split (raises if incomplete, corrupt or other)."""
  manifest_path = os.path.join(directory, builder.MANIFEST)
  train = os.path.join(directory, builder.TRAIN_FILE)
  test = os.path.join(directory, builder.TEST_FILE)
  if os.path.exists(os.path.join(directory, builder.INCOMPLETE)):
    raise FileNotFoundError(f"{directory} holds an unfinished build; rebuild it.")
  if os.path.isfile(manifest_path):
    m = _read_manifest(manifest_path)
    if expected is not None:
      _compare(m, expected, directory)
    ds = m["dataset"]
    features = specs.info(ds).features
    sql_split.check_sqlite(train, features, m["num_clients"], m["num_train_examples"])
    sql_split.check_sqlite(test, features, m["test"]["num_clients"],
                           m["test"]["num_examples"])
    return FederatedSplit(directory, ds, m)
  if os.path.isfile(train) and os.path.isfile(test):
    ds = expected.dataset if expected is not None else dataset
    if ds is None:
      raise ValueError(f"{directory} has no manifest; say which dataset it holds.")
    for path in (train, test):
      sql_split.check_sqlite(path, specs.info(ds).features)
    return FederatedSplit(directory, ds, None)
  raise FileNotFoundError(f"no split in {directory} (expected {builder.MANIFEST}, "
                          f"{builder.TRAIN_FILE} and {builder.TEST_FILE}).")


def default_split_dir(spec: specs.FederationSpec) -> str:
  return os.path.join(DEFAULT_SPLITS_DIR, spec.name)


def has_split(directory: str) -> bool:
  return (not os.path.exists(os.path.join(directory, builder.INCOMPLETE)) and (
      os.path.isfile(os.path.join(directory, builder.MANIFEST))
      or (os.path.isfile(os.path.join(directory, builder.TRAIN_FILE))
          and os.path.isfile(os.path.join(directory, builder.TEST_FILE)))))


def prepare_split(spec: specs.FederationSpec, data_dir: Optional[str] = None,
                  split_dir: Optional[str] = None, download: bool = False,
                  progress: bool = True) -> FederatedSplit:
  """Opens the split if it exists, else builds it from local source files."""
  spec = spec.resolved()
  split_dir = split_dir or default_split_dir(spec)
  if has_split(split_dir):
    return open_split(split_dir, expected=spec)
  manifest = builder.build_split(spec, data_dir or sources.DEFAULT_DATA_DIR, split_dir,
                                 download=download, progress=progress)
  if progress:
    print(builder.summary_text(manifest), flush=True)
  return open_split(split_dir, expected=spec)


def load_federated(dataset: str, partition: Optional[str] = None, *,
                   num_clients: Optional[int] = None, seed: int = 0,
                   data_dir: Optional[str] = None, split_dir: Optional[str] = None,
                   download: bool = False, local_epochs: Optional[int] = None,
                   batch_size: Optional[int] = None, shuffle_buffer: int = 1024,
                   shuffle_seed: Optional[int] = None, rescale: bool = False,
                   progress: bool = True, **params):
  """(train ClientData, centralized test tf.data.Dataset); see module doc.

  Args:
    dataset: 'fmnist', 'cifar10' or 'svhn'.
    partition: see `datasets.specs` (default: the dataset's non-i.i.d. one).
    num_clients, seed, **params: the `FederationSpec`.
    data_dir: where the source files are (default ~/.tff).
    split_dir: the split directory (default ~/.tff_idp/splits/<spec name>).
    download: fetch missing source files (never done otherwise).
    local_epochs, batch_size: client preprocessing (shuffle, repeat, batch).
    shuffle_buffer, shuffle_seed: the client shuffle.
    rescale: multiply pixels by the dataset's factor here (the paper's CNN
      does it inside the model, so keep False for it).
    progress: progress bars and the manifest summary while building.
  """
  spec = specs.FederationSpec(dataset, partition, num_clients, seed, params)
  split = prepare_split(spec, data_dir, split_dir, download, progress)
  train, test = split.train_client_data(), split.test_dataset()
  if rescale:
    import collections  # pylint: disable=g-import-not-at-top
    factor = split.info.rescale

    def scale(e):
      return collections.OrderedDict(x=e["x"] * factor, y=e["y"])

    train = train.preprocess(lambda ds: ds.map(scale))
    test = test.map(scale)
  if batch_size is not None:
    epochs = local_epochs or 1
    train = train.preprocess(
        lambda ds: ds.shuffle(shuffle_buffer, seed=shuffle_seed).repeat(epochs)
        .batch(batch_size))
    test = test.batch(batch_size)
  elif local_epochs is not None:
    raise ValueError("local_epochs needs batch_size.")
  return train, test


def to_arrays(dataset) -> tuple:
  """A dataset of single examples (``x``, ``y``) as (x float32, y int32) numpy arrays.

  Reads in chunks of 4,096, so memory stays at the size of the result.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  xs, ys = [], []
  for batch in dataset.batch(4096):
    xs.append(batch["x"].numpy().astype(np.float32))
    ys.append(batch["y"].numpy().astype(np.int32).reshape(-1))
  if not xs:
    raise ValueError("the split has a client or test set without examples.")
  return np.concatenate(xs), np.concatenate(ys)
