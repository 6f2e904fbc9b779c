"""Which split a dataset name means: `resolve` and `load_federated`.

`resolve` dispatches a name to the built-in builders (`datasets.loader`), to
TensorFlow Datasets (`datasets.tfds_source`) or to a saved split directory.
It lives apart from `datasets.loader` so that `tfds_source`, which uses the
loader, is not imported by it (no import cycle; tests/test_layering.py).
"""
from __future__ import annotations

import os
from typing import Optional

from datasets import loader
from datasets import specs
from datasets import tfds_source
from tff_idp.errors import ToolkitValueError


def _unknown_dataset(dataset: str) -> ToolkitValueError:
  if os.sep in dataset or dataset.startswith((".", "~")):
    path = os.path.abspath(os.path.expanduser(dataset))
    return ToolkitValueError(
        f"dataset {dataset!r}: the path {path} does not exist. Give the directory of a saved split (made "
        "by datasets.from_arrays(...).save(dir) or `python -m datasets.build`), a "
        f"built-in name ({', '.join(sorted(specs.DATASETS))}) or '{loader.TFDS_PREFIX}<name>'.")
  return ToolkitValueError(
      f"unknown dataset {dataset!r}. Pass a built-in name "
      f"({', '.join(sorted(specs.DATASETS))}), '{loader.TFDS_PREFIX}<name>' for a TensorFlow "
      f"Datasets image-classification dataset (e.g. '{loader.TFDS_PREFIX}mnist'), or the path "
      "of a split directory (made by datasets.from_arrays(...).save(dir) or "
      "`python -m datasets.build`).")


def resolve(dataset: str, *, partition: Optional[str] = None,
            num_clients: Optional[int] = None, seed: Optional[int] = None,
            data_dir: Optional[str] = None, split_dir: Optional[str] = None,
            download: bool = False, progress: bool = True, **params) -> loader.FederatedSplit:
  """The split `dataset` names, opened (and built first if needed); see module doc.

  Args:
    dataset: 'fmnist', 'cifar10', 'svhn', 'tfds:<name>', or a split directory.
    partition: built-in: see `datasets.specs` (default: the dataset's first);
      tfds: 'iid' (default) or 'dirichlet'; directory: checked if given.
    num_clients: built-in: default the paper's; tfds: default 100;
      directory: checked if given.
    seed: partition seed (default 0); directory: checked if given.
    data_dir: built-in: the source files (default ~/.tff); tfds: the TFDS
      data_dir (default $TFDS_DATA_DIR or ~/tensorflow_datasets).
    split_dir: where the built split lives (default
      ~/.tff_idp/splits/<name>); not for a directory `dataset`.
    download: fetch missing source files / TFDS data (never done otherwise).
    progress: progress bars and the manifest summary while building.
    **params: partition parameters (built-in: `datasets.specs`; tfds: alpha,
      train_split, test_split, image_key, label_key).

  Returns:
    A checked `loader.FederatedSplit`.
  """
  if not isinstance(dataset, (str, os.PathLike)):
    raise ToolkitValueError(f"dataset must be a string or a path, got "
                            f"{type(dataset).__name__}.")
  dataset = os.fspath(dataset)
  if dataset in specs.DATASETS:
    spec = specs.FederationSpec(dataset, partition, num_clients,
                                0 if seed is None else seed, params)
    return loader.prepare_split(spec, data_dir, split_dir, download, progress)
  if dataset.startswith(loader.TFDS_PREFIX):
    return tfds_source.prepare(dataset[len(loader.TFDS_PREFIX):], partition=partition,
                               num_clients=num_clients, seed=seed, data_dir=data_dir,
                               split_dir=split_dir, download=download, progress=progress,
                               **params)
  path = os.path.expanduser(dataset)
  if dataset and os.path.isdir(path):
    if split_dir is not None:
      raise ToolkitValueError(
          f"split_dir is where a built-in or tfds: split is kept; {dataset!r} is already "
          "a split directory, so omit split_dir (or --split_dir).")
    split = loader.open_split(path)
    loader.check_asked(split, partition=partition, num_clients=num_clients, seed=seed,
                params=params or None)
    return split
  raise _unknown_dataset(dataset)


def load_federated(dataset: str, partition: Optional[str] = None, *,
                   num_clients: Optional[int] = None, seed: Optional[int] = None,
                   data_dir: Optional[str] = None, split_dir: Optional[str] = None,
                   download: bool = False, local_epochs: Optional[int] = None,
                   batch_size: Optional[int] = None, shuffle_buffer: int = 1024,
                   shuffle_seed: Optional[int] = None, rescale: bool = False,
                   progress: bool = True, **params):
  """(train ClientData, centralized test tf.data.Dataset); see module doc.

  Args:
    dataset: 'fmnist', 'cifar10', 'svhn', 'tfds:<name>', or the path of a
      split directory (see `resolve`).
    partition: see `resolve` (default: the dataset's non-i.i.d. one).
    num_clients, seed, **params: the split's settings (see `resolve`; seed
      default 0).
    data_dir: where the source files are (default ~/.tff; tfds: the TFDS
      data_dir).
    split_dir: the split directory (default ~/.tff_idp/splits/<spec name>).
    download: fetch missing source files (never done otherwise).
    local_epochs, batch_size: client preprocessing (shuffle, repeat, batch).
    shuffle_buffer, shuffle_seed: the client shuffle.
    rescale: multiply pixels by the dataset's factor here (the paper's CNN
      does it inside the model, so keep False for it).
    progress: progress bars and the manifest summary while building.
  """
  split = resolve(dataset, partition=partition, num_clients=num_clients, seed=seed,
                  data_dir=data_dir, split_dir=split_dir, download=download,
                  progress=progress, **params)
  return loader.apply_client_preprocessing(
      split, local_epochs=local_epochs, batch_size=batch_size,
      shuffle_buffer=shuffle_buffer, shuffle_seed=shuffle_seed, rescale=rescale)
