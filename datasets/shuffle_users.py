"""Users for the shuffle-model runs (APES paper Tables 3-4): a few records each.

Two builders, both returning a :class:`UserFederation`:

* :func:`synthetic_users`: the LEAF Synthetic(1, 1) / IID data with every
  user at exactly ``samples_per_user`` records (the paper's 12, 10 train + 2
  test), unit-L2 rows by default as the reference code's QMNIST images;
* :func:`mnist_users`: the reference code's QMNIST split (notes §2.4) on
  MNIST-shaped images read from ``mnist.npz`` or a prepared TFDS directory.

Moved here from the APES run module (issue 22): the library never imports
``datasets``; ``experiments.apes`` builds the users and hands them over.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

import numpy as np

from datasets import synthetic
from tff_idp.errors import ToolkitValueError


@dataclasses.dataclass(frozen=True)
class UserFederation:
  """Users with a few records each (the paper: 10,000 users × 12 samples).

  ``x[cid]``/``y[cid]`` are a user's train records; ``test_x``/``test_y``
  pool every user's held-out records (the paper's pooled test accuracy).
  """
  client_ids: list
  x: dict
  y: dict
  test_x: np.ndarray
  test_y: np.ndarray
  num_features: int
  num_classes: int
  name: str = "users"

  @property
  def num_users(self) -> int:
    return len(self.client_ids)

  @property
  def num_params(self) -> int:
    """d of softmax regression: weights and biases."""
    return self.num_features * self.num_classes + self.num_classes


def synthetic_users(users: int, samples_per_user: int = 12, test_per_user: int = 2,
                    seed: int = 0, iid: bool = True, normalize: bool = True) -> UserFederation:
  """Synthetic IID (or Synthetic(1, 1)) users with ``samples_per_user`` records each.

  Every user gets exactly ``samples_per_user`` records (the LEAF size draw is
  capped there), of which ``test_per_user`` are held out, as the paper's
  QMNIST split (10 train + 2 test per user). ``normalize`` scales every
  record to unit L2 norm, as the reference code does to QMNIST images
  (notes §2.4), so that a local update's coordinates are of the order of
  the clip C = 0.1 rather than far above it.
  """
  if users < 2:
    raise ValueError(f"users={users}: the shuffle model needs at least 2 users.")
  if samples_per_user < 2 or not 1 <= test_per_user < samples_per_user:
    raise ValueError("samples_per_user must be >= 2 and 1 <= test_per_user < "
                     "samples_per_user (each user needs train and test records).")
  config = synthetic.SyntheticConfig(
      num_clients=users, seed=seed, iid=iid, max_client_size=samples_per_user,
      test_fraction=test_per_user / samples_per_user)
  arrays = synthetic.generate_arrays(config)
  ids = [f"user_{i:05d}" for i in range(users)]
  train = ~arrays["is_test"]
  order = np.argsort(arrays["client"][train], kind="stable")
  cx, cy, cc = arrays["x"][train][order], arrays["y"][train][order], arrays["client"][train][order]
  bounds = np.searchsorted(cc, np.arange(users + 1))
  x = {cid: cx[bounds[i]:bounds[i + 1]] for i, cid in enumerate(ids)}
  y = {cid: cy[bounds[i]:bounds[i + 1]].astype(np.int32) for i, cid in enumerate(ids)}
  test = arrays["is_test"]
  test_x = arrays["x"][test]
  if normalize:
    unit = lambda a: (a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
                      ).astype(np.float32)
    x = {cid: unit(v) for cid, v in x.items()}
    test_x = unit(test_x)
  return UserFederation(ids, x, y, test_x, arrays["y"][test].astype(np.int32),
                        config.num_features, config.num_classes,
                        f"Synthetic {'IID' if iid else '(1, 1)'}, seed {seed}")


def _unit_rows(a: np.ndarray) -> np.ndarray:
  a = a.reshape(len(a), -1).astype(np.float64)
  return (a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def _read_mnist(data_dir: Optional[str]) -> tuple[np.ndarray, np.ndarray]:
  """All 70,000 MNIST-shaped images (train + test) and labels from ``data_dir``."""
  if not data_dir:
    raise ToolkitValueError(
        "--preset=paper needs MNIST-shaped data: pass --data_dir=<dir> holding mnist.npz "
        "(the Keras file: x_train, y_train, x_test, y_test) or a prepared TFDS 'mnist' "
        "(python -m datasets.build --dataset=tfds:mnist --download on a machine with "
        "network, then copy the directory).")
  path = os.path.join(os.path.expanduser(data_dir), "mnist.npz")
  if os.path.isfile(path):
    try:
      with np.load(path) as f:
        x = np.concatenate([f["x_train"], f["x_test"]])
        y = np.concatenate([f["y_train"], f["y_test"]])
    except (OSError, KeyError, ValueError) as e:
      raise ToolkitValueError(f"{path} is not a readable Keras mnist.npz ({e}); "
                              "download it again.") from None
    return x, y
  from datasets import tfds_source  # pylint: disable=g-import-not-at-top  (TFDS is slow to import)
  arrays = tfds_source.read_tfds("mnist", data_dir=data_dir)
  return (np.concatenate([arrays["x"], arrays["test_x"]]),
          np.concatenate([arrays["y"], arrays["test_y"]]))


def mnist_users(users: Optional[int], samples_per_user: int, data_dir: Optional[str],
                test_per_user: int = 2) -> UserFederation:
  """The reference code's QMNIST split (notes §2.4) on MNIST-shaped images.

  User u's j-th record has label (u + j) mod 10, taken in order from that
  class's images; images are unit-L2-normalized; each user keeps
  ``samples_per_user − test_per_user`` for training and the rest for the
  pooled test set. Needs ``users·samples_per_user`` images (120,000 for
  the paper's 10,000 × 12 QMNIST users). ``users=None``: the paper's 10,000,
  or as many as the data's rarest class allows (MNIST's 70,000 images: 5,250).
  """
  x, y = _read_mnist(data_dir)
  x = _unit_rows(x)
  by_class = [np.flatnonzero(y == k) for k in range(10)]
  if users is None:
    rarest = min(len(b) for b in by_class)
    users = max(2, min(10_000, (rarest * 10) // samples_per_user - 10))
  need = np.bincount((np.arange(users)[:, None] + np.arange(samples_per_user)) .ravel() % 10,
                     minlength=10)
  short = [k for k in range(10) if need[k] > len(by_class[k])]
  if short:
    most = int(len(y) // samples_per_user)
    raise ValueError(f"{users} users × {samples_per_user} records need more images of "
                     f"class(es) {short} than the data holds; use --users <= ~{most}.")
  taken = np.zeros(10, np.int64)
  ids = [f"user_{u:05d}" for u in range(users)]
  xs, ys, tx, ty = {}, {}, [], []
  train_count = samples_per_user - test_per_user
  for u, cid in enumerate(ids):
    labels = (u + np.arange(samples_per_user)) % 10
    idx = np.array([by_class[k][taken[k] + np.sum(labels[:j] == k)]
                    for j, k in enumerate(labels)])
    taken += np.bincount(labels, minlength=10)
    xs[cid], ys[cid] = x[idx[:train_count]], labels[:train_count].astype(np.int32)
    tx.append(x[idx[train_count:]])
    ty.append(labels[train_count:].astype(np.int32))
  return UserFederation(ids, xs, ys, np.concatenate(tx), np.concatenate(ty),
                        x.shape[1], 10, "MNIST-shaped, QMNIST split")
