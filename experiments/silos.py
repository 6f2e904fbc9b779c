"""The records the INO-SGD command line trains on, loaded with :mod:`datasets`.

The library never imports :mod:`datasets` (docs/architecture.md), so the
command line builds its data here and hands it over: INO-SGD's one silo
(:class:`tff_idp.centralized.silo.Silo`: a preset's records pooled, or your
``--dataset``'s). Nothing here is downloaded: local files or the embedded
data. TensorFlow loads with the models, after the flags are checked.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from tff_idp.centralized.silo import Silo
from tff_idp.ino_sgd.defaults import Preset


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
  from datasets import resolution  # pylint: disable=g-import-not-at-top
  from datasets import specs  # pylint: disable=g-import-not-at-top
  info = specs.info(preset.dataset)
  mnist_shaped = tuple(info.input_shape)[-1] == 1
  split = resolution.resolve(preset.dataset, partition="iid", seed=seed, data_dir=data_dir,
                             split_dir=split_dir, progress=False)
  factor = info.rescale if mnist_shaped else 1.0   # the MNIST CNN expects [0, 1] inputs
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
  builder = _builder(preset.model, tuple(info.input_shape), info.num_classes,
                     1.0 if mnist_shaped else info.rescale)
  return Silo(x[order], y[order], tx, ty, builder,
              f"{preset.dataset} (writers/clients pooled, {order.size} records)")


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

