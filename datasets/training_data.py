"""The federation one training command trains on: the embedded Synthetic one or a split.

``experiments.idp_fedavg`` and ``experiments.presets`` train IDP-FedAvg on
either the embedded Synthetic(α, β) federation (:mod:`datasets.synthetic`) or
a split that :func:`datasets.resolve` names; both become one
:class:`TrainingData` (the training clients, the centralized test set and
what the model needs to know about the inputs), so that the command lines
hand the family's run template the same thing whatever the source.
:func:`find_preset_split` finds (or prepares to build) a paper preset's split;
:func:`pooled_records` pools a built-in split's clients into one silo's records.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import numpy as np

from datasets import builder
from datasets import loader
from datasets import resolution
from datasets import sources
from datasets import specs
from datasets import synthetic


@dataclasses.dataclass(frozen=True)
class TrainingData:
  """Training clients (TFF ``ClientData``), test arrays and the input's description."""
  train: Any
  test_x: np.ndarray
  test_y: np.ndarray
  input_shape: tuple
  num_classes: int
  rescale: float
  name: str


def embedded(config: synthetic.SyntheticConfig) -> TrainingData:
  """The embedded federation of ``config`` with its held-out records as the test set."""
  train, _, central_test = synthetic.load_synthetic(config)
  test = next(iter(central_test.batch(10**7)))
  name = "Synthetic IID" if config.iid else f"Synthetic({config.alpha:g},{config.beta:g})"
  return TrainingData(train, test["x"].numpy(), test["y"].numpy(), (config.num_features,),
                      config.num_classes, 1.0, name)


def of_split(split: Any, name: str) -> TrainingData:
  """A resolved split (:func:`datasets.resolve`); refuses one without test examples."""
  test_x, test_y = split.evaluation_arrays()
  info = split.info
  return TrainingData(split.train_client_data(), test_x, test_y, tuple(info.input_shape),
                      info.num_classes, info.rescale, name)


def find_preset_split(dataset: str, *, other: Optional[str], partition: str,
                      partition_given: bool, num_clients: Optional[int], seed: int,
                      split_dir: Optional[str], data_dir: str, download: bool,
                      progress: bool, explicit: bool) -> tuple[Any, Optional[tuple]]:
  """A paper preset's split: (opened split, None) if one exists, else (None, (spec, dir, k)).

  ``other`` (``--dataset``) replaces the preset's ``dataset`` with a split
  directory or ``tfds:<name>``. Otherwise the split in ``split_dir`` (default
  ``~/.tff_idp/splits/<name>``) is opened, checked against the partition flags
  when ``explicit`` (any was given); when it must be built, its source files
  are located now, so that missing data fails in a second, before any
  calibration runs, and ``k`` is its number of clients.
  """
  if other:
    if not other.startswith("tfds:"):
      return resolution.resolve(other), None
    return resolution.resolve(other, partition=partition if partition_given else None,
                              num_clients=num_clients, seed=seed, data_dir=None,
                              split_dir=split_dir, download=download, progress=progress), None
  spec = specs.FederationSpec(dataset, partition, num_clients, seed).resolved()
  split_dir = os.path.expanduser(split_dir or loader.default_split_dir(spec))
  if loader.has_split(split_dir):
    split = loader.open_split(split_dir, expected=spec if explicit else None, dataset=dataset)
    if split.dataset != dataset:
      raise ValueError(f"{split_dir} holds a {split.dataset} split, not {dataset}.")
    return split, None
  location = builder.locate(spec, os.path.expanduser(data_dir), download)
  k = spec.num_clients
  if k is None:                                 # FMNIST: one client per writer
    k = sources.count_emnist_writers(location)
  return None, (spec, split_dir, k)


def pooled_records(dataset: str, seed: int, data_dir: Optional[str], split_dir: Optional[str],
                   train_examples: int, test_examples: int, factor: float) -> tuple:
  """(x, y, test_x, test_y): a built-in dataset's i.i.d. split, every client pooled in one silo.

  Built from local source files when present (never downloaded). A random
  ``train_examples`` of the pooled records (0 = all, in a random order) and
  the first ``test_examples`` test records (0 = all); pixels times ``factor``.
  """
  split = resolution.resolve(dataset, partition="iid", seed=seed, data_dir=data_dir,
                             split_dir=split_dir, progress=False)
  parts = list(split.train_arrays().values())
  x = np.concatenate([a for a, _ in parts]) * factor
  y = np.concatenate([b for _, b in parts])
  order = np.random.default_rng(seed).permutation(len(y))
  if train_examples:
    order = order[:train_examples]
  tx, ty = split.evaluation_arrays()
  tx = tx * factor
  if test_examples:
    tx, ty = tx[:test_examples], ty[:test_examples]
  return x[order], y[order], tx, ty
