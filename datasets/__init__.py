"""Datasets for `tff_idp` experiments.

* `datasets.synthetic`: the embedded Synthetic(α, β) federation (no files).
* The paper's federations (IDP-FedAvg, Sec. V-B): `datasets.partition`
  (pure-numpy partitioners), `datasets.sources` (local source files, offline
  errors), `datasets.builder` / `python -m datasets.build` (sqlite splits
  with a manifest), `datasets.resolution.load_federated` (one call: train
  ClientData + test set) and `python -m datasets.plot` (Fig. 1).
* Your own data: `datasets.from_arrays` (`datasets.arrays`) partitions numpy
  arrays (iid, dirichlet, or natural owners) into the same kind of split,
  which `split.save(dir)` writes in the builders' format.
* TensorFlow Datasets: `tfds:<name>` sources (`datasets.tfds_source`), read
  offline from a prepared TFDS data_dir.
* Integrity: opening a split verifies its manifest and every sqlite row
  against the manifest's checksums (`datasets.integrity`).

The one resolver the command-line modules call::

  split = datasets.resolve(dataset, partition=None, num_clients=None,
                           seed=None, data_dir=None, split_dir=None,
                           download=False, progress=True, **params)

where `dataset` is a built-in name ('fmnist', 'cifar10', 'svhn'),
'tfds:<name>' (e.g. 'tfds:mnist'), or the path of a split directory. The
split offers `train_client_data()` (ClientData of OrderedDict(x=float32,
y=int32)), `train_arrays()` (every client's (x, y) in one read),
`test_arrays()`, `test_dataset()`, `num_classes`,
`element_shape`, `feature_spec`, `client_ids`, `num_clients`, `info` and
`manifest` (see `datasets.loader`).

Exported here (imported on first use, so `import datasets` loads neither
TensorFlow nor the submodules): `resolve`, `load_federated`, `open_split`,
`from_arrays`, `save_split`, `from_tfds`, `FederatedSplit`, `ArraySplit`,
`SplitFormatError`.
"""
import importlib

import tff_idp  # noqa: F401  (quietens TensorFlow's log lines before any submodule imports it)

_EXPORTS = {
    "resolve": "datasets.resolution",
    "load_federated": "datasets.resolution",
    "open_split": "datasets.loader",
    "FederatedSplit": "datasets.loader",
    "from_arrays": "datasets.arrays",
    "save_split": "datasets.arrays",
    "ArraySplit": "datasets.arrays",
    "from_tfds": "datasets.tfds_source",
    "SplitFormatError": "datasets.sql_split",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
  """Imports an exported name's module when the name is first used (PEP 562)."""
  if name in _EXPORTS:
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
  raise AttributeError(f"module 'datasets' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(_EXPORTS))
