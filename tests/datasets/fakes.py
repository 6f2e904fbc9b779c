"""Tiny fake sources, written in each source's own on-disk format.

Built with the sources' own tools (tf.train.Example protos, pickle, h5py,
scipy.io.savemat, PNG tfrecords), not with the code under test.
"""
from __future__ import annotations

import os
import pickle
import sqlite3
import tarfile

import numpy as np


def _example(features: dict) -> bytes:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  feat = {}
  for key, value in features.items():
    value = np.asarray(value)
    if value.dtype.kind == "f":
      feat[key] = tf.train.Feature(float_list=tf.train.FloatList(value=value.ravel().tolist()))
    else:
      feat[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=value.ravel().tolist()))
  return tf.train.Example(features=tf.train.Features(feature=feat)).SerializeToString()


def emnist_writers(num_writers: int, seed: int = 0):
  """Per writer: (id, train pixels, train labels, test pixels, test labels)."""
  rng = np.random.default_rng(seed)
  out = []
  for w in range(num_writers):
    n_train, n_test = int(rng.integers(3, 12)), int(rng.integers(1, 4))
    favourite = rng.integers(0, 10, size=2)        # writers skew towards two digits
    def labels(n):
      return np.where(rng.random(n) < 0.7, rng.choice(favourite, n), rng.integers(0, 10, n))
    out.append((f"f{w:04d}_{w % 7:02d}",
                rng.random((n_train, 28, 28), dtype=np.float32), labels(n_train),
                rng.random((n_test, 28, 28), dtype=np.float32), labels(n_test)))
  return out


def write_emnist_sqlite(data_dir: str, num_writers: int = 12, seed: int = 0) -> dict:
  """A fake TFF `emnist_all.sqlite` (splits digits_only_train / _test)."""
  os.makedirs(data_dir, exist_ok=True)
  path = os.path.join(data_dir, "emnist_all.sqlite")
  writers = emnist_writers(num_writers, seed)
  con = sqlite3.connect(path)
  con.execute("CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
              "serialized_example_proto BLOB NOT NULL)")
  con.execute("CREATE TABLE client_metadata (client_id TEXT NOT NULL, split_name TEXT NOT "
              "NULL, num_examples INTEGER NOT NULL)")
  # Writers inserted in reverse order: the reader must sort by writer id.
  for wid, trx, try_, tex, tey in reversed(writers):
    for split, xs, ys in (("digits_only_train", trx, try_), ("digits_only_test", tex, tey)):
      for x, y in zip(xs, ys):
        con.execute("INSERT INTO examples VALUES (?, ?, ?)",
                    (split, wid, _example({"pixels": x, "label": np.int64(y)})))
      con.execute("INSERT INTO client_metadata VALUES (?, ?, ?)", (wid, split, len(xs)))
  # Some other split that must be ignored.
  con.execute("INSERT INTO examples VALUES (?, ?, ?)",
              ("all_train", "zz", _example({"pixels": np.zeros((28, 28), np.float32),
                                            "label": np.int64(40)})))
  con.commit()
  con.close()
  return {"writers": writers, "path": path}


def write_emnist_h5(data_dir: str, num_writers: int = 8, seed: int = 0) -> dict:
  """The legacy TFF h5 pair fed_emnist_digitsonly_{train,test}.h5."""
  import h5py  # pylint: disable=g-import-not-at-top
  os.makedirs(data_dir, exist_ok=True)
  writers = emnist_writers(num_writers, seed)
  for name, i in (("train", 1), ("test", 3)):
    with h5py.File(os.path.join(data_dir, f"fed_emnist_digitsonly_{name}.h5"), "w") as f:
      for w in writers:
        g = f.create_group(f"examples/{w[0]}")
        g["pixels"] = w[i]
        g["label"] = w[i + 1].astype(np.int32)
  return {"writers": writers}


def cifar10_arrays(n_train: int, n_test: int, seed: int = 0):
  """Balanced labels; images are the label's colour plus noise (learnable)."""
  rng = np.random.default_rng(seed)
  def make(n):
    y = np.arange(n) % 10
    rng.shuffle(y)
    base = (y[:, None, None, None] * 25 + np.array([0, 40, 80])) % 256
    x = np.clip(base + rng.integers(-20, 20, (n, 32, 32, 3)), 0, 255).astype(np.uint8)
    return x, y
  return make(n_train), make(n_test)


def write_cifar10(data_dir: str, n_train: int = 500, n_test: int = 60, seed: int = 0,
                  as_tar: bool = False) -> dict:
  """`cifar-10-batches-py/` pickles (channel-major rows), or the .tar.gz."""
  (x, y), (tx, ty) = cifar10_arrays(n_train, n_test, seed)
  folder = os.path.join(data_dir, "cifar-10-batches-py")
  os.makedirs(folder, exist_ok=True)
  def dump(name, xs, ys):
    rows = xs.transpose(0, 3, 1, 2).reshape(len(xs), 3072)
    with open(os.path.join(folder, name), "wb") as f:
      pickle.dump({b"batch_label": name.encode(), b"labels": [int(v) for v in ys],
                   b"data": rows, b"filenames": [b"x.png"] * len(xs)}, f)
  for b, part in enumerate(np.array_split(np.arange(n_train), 5)):
    dump(f"data_batch_{b + 1}", x[part], y[part])
  dump("test_batch", tx, ty)
  if as_tar:
    archive = os.path.join(data_dir, "cifar-10-python.tar.gz")
    with tarfile.open(archive, "w:gz") as tar:
      tar.add(folder, arcname="cifar-10-batches-py")
    for name in os.listdir(folder):
      os.remove(os.path.join(folder, name))
    os.rmdir(folder)
  return {"train": (x, y), "test": (tx, ty)}


def svhn_arrays(sizes: dict, seed: int = 0) -> dict:
  rng = np.random.default_rng(seed)
  out = {}
  for split, n in sizes.items():
    y = rng.integers(0, 10, n)
    x = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    out[split] = (x, y)
  return out


def write_svhn_mat(data_dir: str, sizes=None, seed: int = 0) -> dict:
  """Stanford's {train,test,extra}_32x32.mat (X [32,32,3,n], y in 1..10)."""
  import scipy.io  # pylint: disable=g-import-not-at-top
  sizes = sizes or {"train": 70, "extra": 130, "test": 40}
  os.makedirs(data_dir, exist_ok=True)
  arrays = svhn_arrays(sizes, seed)
  for split, (x, y) in arrays.items():
    mat_y = np.where(y == 0, 10, y).astype(np.uint8).reshape(-1, 1)
    scipy.io.savemat(os.path.join(data_dir, f"{split}_32x32.mat"),
                     {"X": x.transpose(1, 2, 3, 0), "y": mat_y})
  return arrays


def write_svhn_tfds(data_dir: str, sizes=None, seed: int = 0, version: str = "3.1.0") -> dict:
  """TFDS-prepared svhn_cropped: PNG images in tfrecord shards."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  sizes = sizes or {"train": 30, "extra": 20, "test": 10}
  folder = os.path.join(data_dir, "svhn_cropped", version)
  os.makedirs(folder, exist_ok=True)
  arrays = svhn_arrays(sizes, seed)
  for split, (x, y) in arrays.items():
    path = os.path.join(folder, f"svhn_cropped-{split}.tfrecord-00000-of-00001")
    with tf.io.TFRecordWriter(path) as w:
      for img, label in zip(x, y):
        png = tf.io.encode_png(img).numpy()
        ex = tf.train.Example(features=tf.train.Features(feature={
            "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png])),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}))
        w.write(ex.SerializeToString())
  with open(os.path.join(folder, "dataset_info.json"), "w") as f:
    f.write('{"name": "svhn_cropped"}')
  return arrays
