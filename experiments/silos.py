"""The records the INO-SGD and rPDP-FL command lines train on, loaded with :mod:`datasets`.

The library never imports :mod:`datasets` (docs/architecture.md), so the
command lines build their data here and hand it over: INO-SGD's one silo
(:class:`tff_idp.centralized.silo.Silo`: a preset's records pooled, or your
``--dataset``'s) and rPDP-FL's federation of record-level silos
(:class:`tff_idp.rpdp.runs.Federation`: the embedded Synthetic silos, or a
split). Nothing here is downloaded: local files or the embedded data.
TensorFlow loads with the models, after the flags are checked.
"""
from __future__ import annotations

import collections
import os
from typing import Optional, TYPE_CHECKING

import numpy as np

from tff_idp.centralized.silo import Silo
from tff_idp.ino_sgd.defaults import Preset

if TYPE_CHECKING:
  from tff_idp.rpdp import runs as record_runs  # the annotations only


def _builder(model: str, input_shape: tuple, num_classes: int, rescale: float):
  """``init_seed -> fresh Keras model`` for the preset's model (each seed its own init)."""
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  if model == "logistic":
    return lambda s: models.build_logistic_regression(input_shape[0], num_classes, seed=s)
  if model == "pc_mnist":
    return lambda s: models.build_pc_mnist_cnn(input_shape, num_classes, seed=s)
  return lambda s: models.build_pc_cifar_cnn(input_shape, num_classes, rescale=rescale, seed=s)


def preset_silo(preset: Preset, train_examples: int, test_examples: int, seed: int,
                data_dir: Optional[str], split_dir: Optional[str]) -> Silo:
  """An INO-SGD preset's records pooled in one silo (never downloaded: local files or embedded)."""
  if preset.dataset == "synthetic":
    from datasets import synthetic  # pylint: disable=g-import-not-at-top
    p = synthetic.pooled_arrays(train_examples, test_examples, seed)
    config = p["config"]
    return Silo(p["x"], p["y"], p["test_x"], p["test_y"],
                _builder("logistic", (config.num_features,), config.num_classes, 1.0),
                f"Synthetic IID (pooled, {len(p['y'])} records)")
  from datasets import specs  # pylint: disable=g-import-not-at-top
  from datasets import training_data  # pylint: disable=g-import-not-at-top
  info = specs.info(preset.dataset)
  mnist_shaped = tuple(info.input_shape)[-1] == 1
  factor = info.rescale if mnist_shaped else 1.0   # the MNIST CNN expects [0, 1] inputs
  x, y, tx, ty = training_data.pooled_records(
      preset.dataset, seed, data_dir, split_dir, train_examples, test_examples, factor)
  builder = _builder(preset.model, tuple(info.input_shape), info.num_classes,
                     1.0 if mnist_shaped else info.rescale)
  return Silo(x, y, tx, ty, builder,
              f"{preset.dataset} (writers/clients pooled, {len(y)} records)")


def ino_sgd_silo(preset: Preset, dataset: Optional[str], model: str, cfg: dict,
                 data_dir: Optional[str], split_dir: Optional[str]) -> tuple[Silo, int]:
  """INO-SGD's silo and its number of classes: ``dataset``'s records pooled, else the preset's.

  ``dataset`` (``--dataset``): a split directory, a built-in name or
  ``tfds:<name>``, pooled by :func:`tff_idp.runners.silo_from_split` with
  ``model``, as :func:`tff_idp.runners.run_ino_sgd` pools your split.
  """
  if dataset:
    # TensorFlow loads here (the split's records), once the flags are valid.
    from datasets import resolution  # pylint: disable=g-import-not-at-top
    from tff_idp import runners  # pylint: disable=g-import-not-at-top
    split = resolution.resolve(dataset, data_dir=data_dir, split_dir=split_dir, progress=False)
    data = runners.silo_from_split(split, model=model, train_examples=cfg["train_examples"],
                                   test_examples=cfg["test_examples"], seed=cfg["data_seed"])
    return data, int(split.info.num_classes)
  return preset_silo(preset, cfg["train_examples"], cfg["test_examples"], cfg["data_seed"],
                     data_dir, split_dir), 10  # every preset's data has ten classes


def synthetic_federation(num_clients: int, users_per_silo: int, iid: bool,
                         seed: int) -> "record_runs.Federation":
  """Silos pooling Synthetic users' train records; the users' test records are the test set."""
  from datasets import synthetic  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import record_level  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import runs as record_runs  # pylint: disable=g-import-not-at-top
  config = synthetic.SyntheticConfig(num_clients=num_clients * users_per_silo, iid=iid,
                                     alpha=0.5, beta=0.5, seed=seed)
  arrays = synthetic.generate_arrays(config)
  silo = arrays["client"] // users_per_silo
  train = ~arrays["is_test"]
  x, y = {}, {}
  for k in range(num_clients):
    rows = train & (silo == k)
    cid = f"silo_{k:02d}"
    x[cid], y[cid] = arrays["x"][rows], arrays["y"][rows]
  nf, nc = config.num_features, config.num_classes
  name = f"Synthetic{' IID' if iid else '(0.5,0.5)'}, {num_clients} silos × {users_per_silo} users"
  return record_runs.Federation(record_level.RecordFederation(x, y),
                                arrays["x"][arrays["is_test"]], arrays["y"][arrays["is_test"]],
                                lambda: models.build_logistic_regression(nf, nc, seed=0), name, nc)


def split_federation(dataset: str, partition: str, num_clients: Optional[int], seed: int,
                     data_dir, split_dir, model: str = "auto",
                     head: str = "softmax") -> "record_runs.Federation":
  """A split (datasets/ builders, ``tfds:<name>`` or a split directory) as in-memory records.

  Built-in datasets use the paper's models (MNIST-shaped data the rPDP-FL CNN
  on [0, 1] inputs, 32×32×3 data the IDP-FedAvg CNN); other splits use
  ``model`` (:func:`tff_idp.models.builder_for`). When the split has more
  clients than ``num_clients`` (FMNIST: one per writer), client i's records
  go to silo i mod ``num_clients``; ``num_clients=None`` keeps the split's
  own clients (e.g. your hospitals).
  """
  import datasets as datasets_lib  # pylint: disable=g-import-not-at-top
  from datasets import specs  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import record_level  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import runs as record_runs  # pylint: disable=g-import-not-at-top
  builtin = dataset in specs.DATASETS
  if builtin:
    # FMNIST's clients are its writers (3,383); their records are pooled into silos below.
    split = datasets_lib.resolve(
        dataset, partition=partition,
        num_clients=None if dataset == "fmnist" else num_clients, seed=seed,
        data_dir=data_dir, split_dir=split_dir)
  else:
    split = datasets_lib.resolve(dataset, seed=None if os.path.isdir(
        os.path.expanduser(dataset)) else seed, data_dir=data_dir, split_dir=split_dir,
        **({"partition": partition} if dataset.startswith("tfds:") else {}))
  info = split.info
  shape = tuple(info.input_shape)
  # The IDP-FedAvg CNN rescales inside the model; the rPDP-FL CNN expects [0, 1] inputs.
  mnist_shaped = builtin and shape[-1] == 1
  by_client = split.train_arrays()
  ids = list(by_client)
  silos = len(ids) if num_clients is None else num_clients
  if len(ids) < silos:
    raise ValueError(f"the split {dataset} has {len(ids)} clients, fewer than "
                     f"--num_clients={silos}.")
  parts = collections.defaultdict(list)
  for index, cid in enumerate(ids):  # client i goes to silo i mod silos
    arrays = by_client.pop(cid)
    if mnist_shaped:
      arrays = (arrays[0] * info.rescale, arrays[1])
    parts[f"silo_{index % silos:02d}" if builtin or silos != len(ids) else cid].append(arrays)
  x = {k: np.concatenate([a for a, _ in v]) for k, v in parts.items()}
  y = {k: np.concatenate([b for _, b in v]) for k, v in parts.items()}
  test_x, test_y = split.evaluation_arrays()
  if mnist_shaped:
    test_x = test_x * info.rescale
    builder = lambda: models.build_rpdp_mnist_cnn(shape, info.num_classes, seed=0)
  elif builtin:
    builder = lambda: models.build_idp_fedavg_cnn(shape, info.num_classes, seed=0,
                                                  rescale=info.rescale)
  else:
    builder = models.builder_for(shape, info.num_classes, model, head, info.rescale)
  name = (f"{dataset} ({partition})" if builtin else dataset if dataset.startswith("tfds:")
          else f"split {os.path.normpath(dataset)}")
  return record_runs.Federation(record_level.RecordFederation(x, y), test_x, test_y, builder,
                                f"{name}, {len(x)} clients", info.num_classes,
                                head if not builtin else "softmax")


RPDP_FEDERATION_FLAGS = ("dataset", "num_clients", "users_per_silo", "iid", "data_seed",
                         "partition", "data_dir", "split_dir", "model", "head")
"""The ``experiments.rpdp`` flags :func:`rpdp_federation` takes under their names."""


def rpdp_federation(*, dataset: str, num_clients: int, num_clients_given: bool,
                    users_per_silo: int, iid: bool, data_seed: int, partition: str, data_dir,
                    split_dir, model: str, head: str) -> "record_runs.Federation":
  """rPDP-FL's federation of ``--dataset``: the embedded silos (``synthetic``) or a split.

  The built-in datasets are pooled into ``num_clients`` silos; your own split
  keeps its clients unless ``num_clients`` was given (``num_clients_given``).
  """
  if dataset == "synthetic":
    return synthetic_federation(num_clients, users_per_silo, iid, data_seed)
  own_split = dataset not in ("fmnist", "cifar10", "svhn")
  # Your own split keeps its clients unless --num_clients is given.
  return split_federation(dataset, partition,
                          None if own_split and not num_clients_given else num_clients,
                          data_seed, data_dir, split_dir, model, head)
