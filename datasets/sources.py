"""Raw sources of the paper's datasets: where the files are, and reading them.

IDP-FedAvg paper, Sec. V-B. Each source is looked up on local disk *first*;
with no local copy, `locate` raises `SourceNotFoundError` at once, naming
the files to download, their URLs and where to put them. Nothing is fetched
unless `download=True` (the build CLI's `--download`), so an offline machine
gets its answer in well under a second instead of hanging on retries.

Looked-up files (under `data_dir`, or `data_dir/<dataset>`):

* FMNIST = federated EMNIST, digits only (TFF `tff.simulation.datasets.emnist`,
  whose cache dir defaults to `~/.tff`):
  - `emnist_all.sqlite` (TFF >= 0.20; decompressed
    https://storage.googleapis.com/tff-datasets-public/emnist_all.sqlite.lzma),
    splits `digits_only_train` / `digits_only_test`, 3,383 writers,
    341,873 train and 40,832 test examples; or
  - the legacy h5 pair `fed_emnist_digitsonly_train.h5` and
    `fed_emnist_digitsonly_test.h5` (from `fed_emnist_digitsonly.tar.bz2`,
    optionally inside a `datasets/` folder), groups `examples/<writer>/
    {pixels,label}`.
  Pixels are float32 in [0, 1] with 1.0 the background, as TFF ships them.
* CIFAR-10: `cifar-10-batches-py/` (`data_batch_1` .. `data_batch_5`,
  `test_batch`; Python pickles) or the archive `cifar-10-python.tar.gz`
  (https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz), read in place.
  50,000 train / 10,000 test images, uint8.
* SVHN (cropped digits): the Stanford `.mat` files `train_32x32.mat`,
  `test_32x32.mat` and `extra_32x32.mat` (http://ufldl.stanford.edu/
  housenumbers/), label 10 meaning digit 0; or a TFDS-prepared
  `svhn_cropped/<version>/` folder (`svhn_cropped-{train,test,extra}.tfrecord*`,
  PNG images), read with plain tf.data, so tensorflow-datasets is not needed.
  train + extra = 73,257 + 531,131 = 604,388 images ("over 600,000",
  Sec. V-B); test 26,032.

Source order (which the partition indices refer to): EMNIST by writer id,
then row order within a writer; CIFAR-10 batches 1..5 in file order; SVHN
train then extra in file order.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import pickle
import socket
import tarfile
import urllib.request
from typing import Optional, Sequence

import numpy as np

from tff_idp.errors import TffIdpError

DEFAULT_DATA_DIR = os.path.join(os.path.expanduser("~"), ".tff")

EMNIST_URL = "https://storage.googleapis.com/tff-datasets-public/emnist_all.sqlite.lzma"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
SVHN_URL = "http://ufldl.stanford.edu/housenumbers/{split}_32x32.mat"
_DOWNLOAD_TIMEOUT_S = 60

CIFAR10_LABELS = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                  "horse", "ship", "truck")
DIGIT_LABELS = tuple(str(d) for d in range(10))


class SourceNotFoundError(TffIdpError, FileNotFoundError):
  """No local copy of a dataset source (and downloading was not allowed)."""


class SourceFormatError(TffIdpError, ValueError):
  """A source file exists but is not what it should be."""


@dataclasses.dataclass
class SourceData:
  """One dataset's examples in source order.

  Attributes:
    train_x / test_x: uint8 [n, 32, 32, 3] (CIFAR-10, SVHN) or float32
      [n, 28, 28] (EMNIST).
    train_y / test_y: int64 labels in [0, 10).
    train_groups / test_groups: natural client (writer) index per example,
      or None where the source has no clients.
    group_ids: writer ids, indexed by the groups (EMNIST only).
    files: the files read.
    splits: the source splits that make up the training set.
  """
  train_x: np.ndarray
  train_y: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  files: list[str]
  splits: list[str]
  train_groups: Optional[np.ndarray] = None
  test_groups: Optional[np.ndarray] = None
  group_ids: Optional[list[str]] = None


def _candidates(data_dir: str, name: str) -> list[str]:
  return [data_dir, os.path.join(data_dir, name)]


def _not_found(dataset: str, data_dir: str, what: str) -> SourceNotFoundError:
  return SourceNotFoundError(
      f"{dataset}: no local copy found under {os.path.abspath(data_dir)} "
      f"(also looked in its '{dataset}/' subfolder). This machine does not "
      f"download unless asked.\n{what}\nThen pass --data_dir=<that folder>, "
      "or rerun with --download on a machine with internet access.")


# ----------------------------------------------------------------------------
# FMNIST (federated EMNIST digits)
# ----------------------------------------------------------------------------
def locate_emnist(data_dir: str) -> dict:
  for d in _candidates(data_dir, "fmnist"):
    path = os.path.join(d, "emnist_all.sqlite")
    if os.path.isfile(path):
      return {"kind": "sqlite", "files": [path]}
    for sub in (d, os.path.join(d, "datasets")):
      train = os.path.join(sub, "fed_emnist_digitsonly_train.h5")
      test = os.path.join(sub, "fed_emnist_digitsonly_test.h5")
      if os.path.isfile(train) and os.path.isfile(test):
        return {"kind": "h5", "files": [train, test]}
  raise _not_found(
      "fmnist", data_dir,
      "Download the federated EMNIST database that TFF uses,\n"
      f"  {EMNIST_URL}\n"
      "and decompress it to <data_dir>/emnist_all.sqlite (xz -d / unlzma), or run\n"
      "  python -c \"import tensorflow_federated as tff; "
      "tff.simulation.datasets.emnist.load_data(cache_dir='<data_dir>')\"\n"
      "(TFF's default cache dir is ~/.tff). The legacy h5 pair "
      "fed_emnist_digitsonly_{train,test}.h5 is accepted too.")


def _parse_emnist_protos(serialized: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  spec = {"pixels": tf.io.FixedLenFeature((28, 28), tf.float32),
          "label": tf.io.FixedLenFeature((), tf.int64)}
  xs, ys = [], []
  for lo in range(0, len(serialized), 8192):
    parsed = tf.io.parse_example(serialized[lo:lo + 8192], spec)
    xs.append(parsed["pixels"].numpy())
    ys.append(parsed["label"].numpy())
  if not xs:
    return np.zeros((0, 28, 28), np.float32), np.zeros(0, np.int64)
  return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64)


def _read_emnist_sqlite(path: str, split: str):
  import sqlite3  # pylint: disable=g-import-not-at-top
  try:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT client_id, serialized_example_proto FROM examples "
        "WHERE split_name = ? ORDER BY client_id, rowid", (split,)).fetchall()
    con.close()
  except sqlite3.DatabaseError as e:
    raise SourceFormatError(
        f"{path} is not a readable TFF EMNIST database ({e}). Delete it and "
        f"download {EMNIST_URL} again.") from None
  if not rows:
    raise SourceFormatError(f"{path} has no examples in split {split!r}; it is not "
                            "TFF's emnist_all.sqlite.")
  ids = [r[0] for r in rows]
  x, y = _parse_emnist_protos([r[1] for r in rows])
  return ids, x, y


def _read_emnist_h5(path: str):
  import h5py  # pylint: disable=g-import-not-at-top
  ids, xs, ys = [], [], []
  with h5py.File(path, "r") as f:
    if "examples" not in f:
      raise SourceFormatError(f"{path} has no 'examples' group; not a TFF EMNIST h5.")
    for cid in sorted(f["examples"].keys()):
      g = f["examples"][cid]
      x = np.asarray(g["pixels"], dtype=np.float32)
      xs.append(x)
      ys.append(np.asarray(g["label"], dtype=np.int64).reshape(-1))
      ids.extend([cid] * len(x))
  return ids, np.concatenate(xs), np.concatenate(ys)


def _groups(ids: list[str], id_index: dict[str, int]) -> np.ndarray:
  return np.asarray([id_index[i] for i in ids], dtype=np.int64)


def read_emnist(location: dict) -> SourceData:
  if location["kind"] == "sqlite":
    path = location["files"][0]
    tr_ids, tr_x, tr_y = _read_emnist_sqlite(path, "digits_only_train")
    te_ids, te_x, te_y = _read_emnist_sqlite(path, "digits_only_test")
  else:
    tr_ids, tr_x, tr_y = _read_emnist_h5(location["files"][0])
    te_ids, te_x, te_y = _read_emnist_h5(location["files"][1])
  writers = sorted(set(tr_ids) | set(te_ids))
  index = {w: i for i, w in enumerate(writers)}
  return SourceData(train_x=tr_x, train_y=tr_y, test_x=te_x, test_y=te_y,
                    files=location["files"], splits=["digits_only_train"],
                    train_groups=_groups(tr_ids, index),
                    test_groups=_groups(te_ids, index), group_ids=writers)


def count_emnist_writers(location: dict) -> int:
  """Writers in the source (cheap: metadata only); TFF's has 3,383."""
  if location["kind"] == "sqlite":
    import sqlite3  # pylint: disable=g-import-not-at-top
    try:
      con = sqlite3.connect(f"file:{location['files'][0]}?mode=ro", uri=True)
      try:
        return int(con.execute(
            "SELECT COUNT(DISTINCT client_id) FROM client_metadata "
            "WHERE split_name IN ('digits_only_train', 'digits_only_test')").fetchone()[0])
      finally:
        con.close()
    except sqlite3.DatabaseError as e:
      raise SourceFormatError(f"{location['files'][0]} is not a readable TFF EMNIST "
                              f"database ({e}).") from None
  import h5py  # pylint: disable=g-import-not-at-top
  ids = set()
  for path in location["files"]:
    with h5py.File(path, "r") as f:
      ids |= set(f["examples"].keys())
  return len(ids)


def download_emnist(data_dir: str) -> None:
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tff.simulation.datasets.emnist.load_data(only_digits=True, cache_dir=data_dir)


# ----------------------------------------------------------------------------
# CIFAR-10
# ----------------------------------------------------------------------------
_CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
_CIFAR_TEST = ["test_batch"]


def locate_cifar10(data_dir: str) -> dict:
  for d in _candidates(data_dir, "cifar10"):
    folder = os.path.join(d, "cifar-10-batches-py")
    if all(os.path.isfile(os.path.join(folder, b)) for b in _CIFAR_TRAIN + _CIFAR_TEST):
      return {"kind": "pickles", "files": [os.path.join(folder, b)
                                           for b in _CIFAR_TRAIN + _CIFAR_TEST]}
    archive = os.path.join(d, "cifar-10-python.tar.gz")
    if os.path.isfile(archive):
      return {"kind": "tar", "files": [archive]}
  raise _not_found(
      "cifar10", data_dir,
      f"Download {CIFAR10_URL} (163 MB) and put cifar-10-python.tar.gz itself "
      "into <data_dir> (it is read in place), or extract it there so that "
      "<data_dir>/cifar-10-batches-py/ holds data_batch_1 .. data_batch_5 and "
      "test_batch.")


def _unpickle_batch(blob: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
  try:
    d = pickle.loads(blob, encoding="bytes")
    data = np.asarray(d[b"data"], dtype=np.uint8)
    labels = np.asarray(d[b"labels"], dtype=np.int64)
  except Exception as e:  # pylint: disable=broad-except
    raise SourceFormatError(f"{name} is not a CIFAR-10 python batch ({e}).") from None
  if data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
    raise SourceFormatError(f"{name}: expected data [n, 3072] and n labels, got "
                            f"{data.shape} and {len(labels)}.")
  # Rows are channel-major (1024 R, 1024 G, 1024 B), as the CIFAR site says.
  return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).copy(), labels


def read_cifar10(location: dict) -> SourceData:
  blobs = {}
  if location["kind"] == "pickles":
    for path in location["files"]:
      with open(path, "rb") as f:
        blobs[os.path.basename(path)] = (f.read(), path)
  else:
    archive = location["files"][0]
    try:
      with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
          base = os.path.basename(member.name)
          if base in _CIFAR_TRAIN + _CIFAR_TEST and member.isfile():
            blobs[base] = (tar.extractfile(member).read(), f"{archive}:{member.name}")
    except (tarfile.TarError, OSError, EOFError) as e:
      raise SourceFormatError(f"{archive} is not a readable CIFAR-10 archive ({e}); "
                              f"download {CIFAR10_URL} again.") from None
    missing = [b for b in _CIFAR_TRAIN + _CIFAR_TEST if b not in blobs]
    if missing:
      raise SourceFormatError(f"{archive} lacks {missing}; download {CIFAR10_URL} again.")
  train = [_unpickle_batch(*blobs[b]) for b in _CIFAR_TRAIN]
  test_x, test_y = _unpickle_batch(*blobs["test_batch"])
  return SourceData(train_x=np.concatenate([t[0] for t in train]),
                    train_y=np.concatenate([t[1] for t in train]),
                    test_x=test_x, test_y=test_y, files=location["files"],
                    splits=["train"])


def _fetch(url: str, path: str) -> None:
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = path + ".part"
  print(f"downloading {url} -> {path}")
  with urllib.request.urlopen(url, timeout=_DOWNLOAD_TIMEOUT_S) as r, open(tmp, "wb") as f:
    while True:
      chunk = r.read(1 << 20)
      if not chunk:
        break
      f.write(chunk)
  os.replace(tmp, path)


def download_cifar10(data_dir: str) -> None:
  _fetch(CIFAR10_URL, os.path.join(data_dir, "cifar-10-python.tar.gz"))


# ----------------------------------------------------------------------------
# SVHN (cropped digits)
# ----------------------------------------------------------------------------
def locate_svhn(data_dir: str, splits: Sequence[str]) -> dict:
  needed = list(splits) + ["test"]
  for d in _candidates(data_dir, "svhn"):
    mats = [os.path.join(d, f"{s}_32x32.mat") for s in needed]
    if all(os.path.isfile(m) for m in mats):
      return {"kind": "mat", "files": mats, "splits": needed}
  for d in _candidates(data_dir, "svhn") + [os.path.join(data_dir, "tensorflow_datasets")]:
    for version_dir in sorted(glob.glob(os.path.join(d, "svhn_cropped", "*")), reverse=True):
      files = {s: sorted(glob.glob(os.path.join(version_dir, f"svhn_cropped-{s}.tfrecord*")))
               for s in needed}
      if all(files[s] for s in needed):
        return {"kind": "tfds", "files": sum((files[s] for s in needed), []),
                "by_split": files, "splits": needed}
  names = ", ".join(f"{s}_32x32.mat" for s in needed)
  raise _not_found(
      "svhn", data_dir,
      f"Download {names} from http://ufldl.stanford.edu/housenumbers/ "
      "(train 182 MB, test 64 MB, extra 1.3 GB) into <data_dir>, or prepare the "
      "TFDS dataset there with `tfds build svhn_cropped --data_dir=<data_dir>` "
      "(files svhn_cropped/<version>/svhn_cropped-{train,test,extra}.tfrecord*).")


def _read_svhn_mat(path: str) -> tuple[np.ndarray, np.ndarray]:
  import scipy.io  # pylint: disable=g-import-not-at-top
  try:
    m = scipy.io.loadmat(path)
    x = np.asarray(m["X"], dtype=np.uint8)
    y = np.asarray(m["y"], dtype=np.int64).reshape(-1)
  except Exception as e:  # pylint: disable=broad-except
    raise SourceFormatError(f"{path} is not an SVHN cropped-digits .mat file ({e}).") from None
  if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != len(y):
    raise SourceFormatError(f"{path}: expected X [32, 32, 3, n] and n labels, got "
                            f"{x.shape} and {len(y)}.")
  return np.ascontiguousarray(x.transpose(3, 0, 1, 2)), y % 10   # label 10 is digit 0


def _read_svhn_tfds(files: list[str]) -> tuple[np.ndarray, np.ndarray]:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  spec = {"image": tf.io.FixedLenFeature((), tf.string),
          "label": tf.io.FixedLenFeature((), tf.int64)}
  ds = tf.data.TFRecordDataset(files).batch(4096)
  xs, ys = [], []
  for batch in ds:
    parsed = tf.io.parse_example(batch, spec)
    xs.append(np.stack([tf.io.decode_png(b, channels=3).numpy()
                        for b in parsed["image"].numpy()]))
    ys.append(parsed["label"].numpy())
  return np.concatenate(xs).astype(np.uint8), np.concatenate(ys).astype(np.int64)


def read_svhn(location: dict) -> SourceData:
  splits = location["splits"]
  if location["kind"] == "mat":
    parts = {s: _read_svhn_mat(f) for s, f in zip(splits, location["files"])}
  else:
    parts = {s: _read_svhn_tfds(location["by_split"][s]) for s in splits}
  train = [parts[s] for s in splits if s != "test"]
  return SourceData(train_x=np.concatenate([p[0] for p in train]),
                    train_y=np.concatenate([p[1] for p in train]),
                    test_x=parts["test"][0], test_y=parts["test"][1],
                    files=location["files"], splits=[s for s in splits if s != "test"])


def download_svhn(data_dir: str, splits: Sequence[str]) -> None:
  for s in list(splits) + ["test"]:
    path = os.path.join(data_dir, f"{s}_32x32.mat")
    if not os.path.isfile(path):
      _fetch(SVHN_URL.format(split=s), path)


def check_network(host: str = "storage.googleapis.com", timeout: float = 3.0) -> bool:
  """True if `host` resolves and accepts a TCP connection within `timeout` s.

  Runs in a daemon thread, so a hanging DNS lookup cannot stall the caller.
  """
  import threading  # pylint: disable=g-import-not-at-top
  result = []

  def probe():
    try:
      with socket.create_connection((host, 443), timeout=timeout):
        result.append(True)
    except OSError:
      result.append(False)

  t = threading.Thread(target=probe, daemon=True)
  t.start()
  t.join(timeout)
  return bool(result and result[0])
