"""TensorFlow Datasets as a source: `tfds:<name>` (e.g. `tfds:mnist`).

  split = datasets.resolve("tfds:mnist", partition="dirichlet", num_clients=100)
  split = datasets.tfds_source.from_tfds("cifar10", "iid", num_clients=500)

Any TFDS image-classification dataset works: one fixed-shape `image`
feature (`tfds.features.Image`) and a `label` (`tfds.features.ClassLabel`);
other names via `image_key` / `label_key`. Its `train_split` (default
"train") is partitioned with the same partitioners as `datasets.from_arrays`
("iid", default, or "dirichlet" with `alpha`, default 0.1) into
`num_clients` (default 100) clients; its `test_split` (default "test"; None
for none) is the centralized test set. Images stay uint8 0..255 (handed out
as float32; the split's `info.rescale` is 1/255), labels become int32, and
the number of classes and label names come from the `ClassLabel`.

Offline by default: the dataset is read where it is prepared, under
`data_dir` (default $TFDS_DATA_DIR, else ~/tensorflow_datasets). If it is not
prepared there, `SourceNotFoundError` says so at once, naming the data_dir
and the command that prepares it (`tfds build <name> --data_dir=...`);
nothing is fetched, and TFDS's metadata look-up on gs://tfds-data is
switched off, unless `download=True`.

`prepare` (what `datasets.resolve("tfds:<name>")` calls) saves the split to
`split_dir` (default ~/.tff_idp/splits/tfds-<name>-<partition>-k<K>-...)
as sqlite files with a manifest, and opens it from there on later calls.

`tensorflow_datasets` is imported only here, and only when a `tfds:` source
is used (pinned in requirements.txt: tensorflow-datasets 4.9.3, with
tensorflow-metadata 1.15.0, the releases that fit TF 2.14 / protobuf 4.25).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from typing import Optional

import numpy as np

from datasets import arrays
from datasets import builder
from datasets import loader
from datasets import sources
from tff_idp.errors import ToolkitValueError

TFDS_PIN = "tensorflow-datasets==4.9.3"
DEFAULT_NUM_CLIENTS = 100
PARTITIONS = ("iid", "dirichlet")
_DEFAULT_KEYS = {"train_split": "train", "test_split": "test", "image_key": "image",
                 "label_key": "label"}
PARAMS = ("alpha",) + tuple(_DEFAULT_KEYS)


def default_data_dir() -> str:
  """TFDS's own default: $TFDS_DATA_DIR, else ~/tensorflow_datasets."""
  return os.path.expanduser(os.environ.get("TFDS_DATA_DIR")
                            or os.path.join("~", "tensorflow_datasets"))


def _import_tfds():
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise sources.SourceNotFoundError(
        f"'tfds:' sources need tensorflow-datasets ({e}). Install the pinned release: "
        f"pip install {TFDS_PIN} tensorflow-metadata==1.15.0 (see requirements.txt)."
    ) from None
  return tfds


@contextlib.contextmanager
def _gcs_lookups(enabled: bool):
  """Without `enabled`, keeps TFDS off gs://tfds-data (an offline probe is slow)."""
  try:
    from tensorflow_datasets.core.utils import gcs_utils  # pylint: disable=g-import-not-at-top
  except ImportError:
    gcs_utils = None
  if enabled or gcs_utils is None or not hasattr(gcs_utils, "_is_gcs_disabled"):
    yield
    return
  old = gcs_utils._is_gcs_disabled  # pylint: disable=protected-access
  gcs_utils._is_gcs_disabled = True  # pylint: disable=protected-access
  try:
    yield
  finally:
    gcs_utils._is_gcs_disabled = old  # pylint: disable=protected-access


def _not_prepared(name: str, data_dir: str) -> sources.SourceNotFoundError:
  return sources.SourceNotFoundError(
      f"tfds:{name} is not prepared under {data_dir} (the TFDS data_dir), and nothing is "
      "downloaded unless asked. Prepare it on a machine with internet access,\n"
      f"  tfds build {name} --data_dir={data_dir}\n"
      f"(or python -c \"import tensorflow_datasets as tfds; tfds.builder('{name}', "
      f"data_dir='{data_dir}').download_and_prepare()\"), copy its folder "
      f"{os.path.join(data_dir, name.split(':')[0])} here and pass data_dir (--data_dir) "
      "if it is elsewhere; or pass download=True (--download).")


def _check_features(tfds, name: str, features, image_key: str, label_key: str):
  keys = sorted(features.keys()) if hasattr(features, "keys") else []
  if image_key not in keys or label_key not in keys:
    raise ToolkitValueError(
        f"tfds:{name} has features {keys}; an image-classification source needs an "
        f"image feature {image_key!r} and a class label {label_key!r} (pass "
        "image_key=... / label_key=... if they are named otherwise).")
  image, label = features[image_key], features[label_key]
  if not isinstance(image, tfds.features.Image):
    raise ToolkitValueError(f"tfds:{name}: feature {image_key!r} is a "
                            f"{type(image).__name__}, not an Image; pass image_key= the "
                            "image feature.")
  if not isinstance(label, tfds.features.ClassLabel):
    raise ToolkitValueError(f"tfds:{name}: feature {label_key!r} is a "
                            f"{type(label).__name__}, not a ClassLabel; pass label_key= "
                            "the class label feature.")
  shape = tuple(image.shape)
  if any(d is None for d in shape):
    raise ToolkitValueError(
        f"tfds:{name} has images of varying size {shape}; resize them to one shape "
        "yourself and use datasets.from_arrays(x, y, ...).")
  return shape, int(label.num_classes), [str(n) for n in label.names]


def _read_split(builder_, name: str, split: str, key: str, image_key: str,
                label_key: str, data_dir: str) -> tuple[np.ndarray, np.ndarray]:
  try:
    ds = builder_.as_dataset(split=split, shuffle_files=False)
  except AssertionError as e:
    if "could not find data" in str(e):
      raise _not_prepared(name, data_dir) from None
    raise
  except (ValueError, KeyError) as e:
    known = sorted(builder_.info.splits.keys()) if builder_.info.splits else []
    raise ToolkitValueError(f"{key}: tfds:{name} has no split {split!r} ({e}); its "
                            f"splits are {known}.") from None
  xs, ys = [], []
  for batch in ds.map(lambda e: (e[image_key], e[label_key])).batch(4096):
    xs.append(batch[0].numpy())
    ys.append(batch[1].numpy())
  if not xs:
    raise ToolkitValueError(f"{key}: split {split!r} of tfds:{name} has no examples.")
  return np.concatenate(xs), np.concatenate(ys)


def read_tfds(name: str, data_dir: Optional[str] = None, download: bool = False,
              train_split: str = "train", test_split: Optional[str] = "test",
              image_key: str = "image", label_key: str = "label") -> dict:
  """A TFDS image-classification dataset as numpy arrays (see module doc).

  Returns:
    dict with x, y (train), test_x, test_y (None without test_split),
    num_classes, label_names, version, data_dir.
  """
  tfds = _import_tfds()
  from tensorflow_datasets.core import registered  # pylint: disable=g-import-not-at-top
  data_dir = os.path.expanduser(data_dir) if data_dir else default_data_dir()
  with _gcs_lookups(download):
    try:
      b = tfds.builder(name, data_dir=data_dir)
    except registered.DatasetNotFoundError as e:
      first = str(e).strip().splitlines()[0]
      raise ToolkitValueError(
          f"tfds:{name}: {first} Check the name against `tfds.list_builders()` or "
          "https://www.tensorflow.org/datasets/catalog/overview.") from None
    shape, num_classes, names = _check_features(tfds, name, b.info.features, image_key,
                                                label_key)
    if download:
      b.download_and_prepare()
    x, y = _read_split(b, name, train_split, "train_split", image_key, label_key,
                       data_dir)
    tx = ty = None
    if test_split:
      tx, ty = _read_split(b, name, test_split, "test_split", image_key, label_key,
                           data_dir)
  if tuple(x.shape[1:]) != shape:
    raise ToolkitValueError(f"tfds:{name}: images have shape {x.shape[1:]}, but its "
                            f"features say {shape}.")
  return {"x": x, "y": y, "test_x": tx, "test_y": ty, "num_classes": num_classes,
          "label_names": names, "version": str(b.version), "data_dir": data_dir}


def from_tfds(name: str, partition: str = "iid", num_clients: int = DEFAULT_NUM_CLIENTS,
              seed: int = 0, alpha: Optional[float] = None, *,
              data_dir: Optional[str] = None, download: bool = False,
              train_split: str = "train", test_split: Optional[str] = "test",
              image_key: str = "image", label_key: str = "label") -> arrays.ArraySplit:
  """An in-memory split of TFDS dataset `name` (see module doc)."""
  if partition not in PARTITIONS:
    raise ToolkitValueError(f"partition: tfds:{name} has no natural clients; pass one of "
                            f"{list(PARTITIONS)}, not {partition!r}.")
  data = read_tfds(name, data_dir, download, train_split, test_split, image_key, label_key)
  tfds_info = {"name": name, "version": data["version"], "data_dir": data["data_dir"],
               "test_split": test_split, "image_key": image_key, "label_key": label_key}
  return arrays.from_arrays(
      data["x"], data["y"], partition, num_clients, seed=seed, test_x=data["test_x"],
      test_y=data["test_y"], alpha=alpha, num_classes=data["num_classes"],
      label_names=data["label_names"], name=f"tfds:{name}",
      source={"files": [f"{name.split(':')[0]}/{data['version']}"],
              "splits": [train_split], "tfds": tfds_info})


def split_dir_name(name: str, partition: str, num_clients: int, seed: int,
                   alpha: Optional[float], keys: dict) -> str:
  """Default directory name, e.g. 'tfds-mnist-iid-k100-seed0' (+ hash of other splits)."""
  alpha_part = f"-alpha{alpha:g}" if partition == "dirichlet" else ""
  out = f"tfds-{name}-{partition}-k{num_clients}{alpha_part}-seed{seed}"
  if keys != _DEFAULT_KEYS:
    out += "-" + hashlib.sha1(json.dumps(keys, sort_keys=True).encode()).hexdigest()[:8]
  return "".join(c if c.isalnum() or c in "_.-" else "-" for c in out)


def prepare(name: str, *, partition: Optional[str] = None,
            num_clients: Optional[int] = None, seed: Optional[int] = None,
            data_dir: Optional[str] = None, split_dir: Optional[str] = None,
            download: bool = False, progress: bool = True,
            **params) -> loader.FederatedSplit:
  """Opens the saved split of tfds:`name`, or builds and saves it first."""
  unknown = sorted(set(params) - set(PARAMS))
  if unknown:
    raise ToolkitValueError(f"tfds:{name} takes the parameters {list(PARAMS)}, not "
                            f"{unknown}.")
  if not name:
    raise ToolkitValueError("dataset 'tfds:' names no dataset; pass e.g. 'tfds:mnist'.")
  partition = partition or "iid"
  if partition not in PARTITIONS:
    raise ToolkitValueError(f"partition: tfds:{name} has no natural clients; pass one of "
                            f"{list(PARTITIONS)}, not {partition!r}.")
  k = DEFAULT_NUM_CLIENTS if num_clients is None else num_clients
  seed = 0 if seed is None else seed
  alpha = params.get("alpha")
  if partition == "dirichlet" and alpha is None:
    alpha = arrays.DEFAULT_ALPHA
  keys = {key: params.get(key, default) for key, default in _DEFAULT_KEYS.items()}
  split_dir = os.path.expanduser(split_dir) if split_dir else os.path.join(
      loader.DEFAULT_SPLITS_DIR, split_dir_name(name, partition, k, seed, alpha, keys))
  if loader.has_split(split_dir):
    split = loader.open_split(split_dir)
    loader.check_asked(split, dataset=f"tfds:{name}", partition=partition,
                       num_clients=k, seed=seed,
                       params={"alpha": float(alpha)} if alpha is not None else None)
    stored = dict((split.manifest.get("source") or {}).get("tfds") or {})
    stored["train_split"] = ((split.manifest.get("source") or {}).get("splits") or [None])[0]
    diffs = [f"{key} {stored.get(key)!r} (asked for {v!r})" for key, v in keys.items()
             if stored.get(key) != v]
    if diffs:
      raise loader.SplitMismatchError(
          f"the split in {split_dir} has " + "; ".join(diffs) + ". Pass another "
          "split_dir (--split_dir), or delete it.")
    return split
  if progress:
    where = os.path.expanduser(data_dir) if data_dir else default_data_dir()
    print(f"reading tfds:{name} from {where}", flush=True)
  split = from_tfds(name, partition, k, seed, alpha, data_dir=data_dir, download=download,
                    **keys)
  saved = split.save(split_dir)
  if progress:
    print(builder.summary_text(saved.manifest), flush=True)
    print(f"written to     {split_dir}", flush=True)
  return saved
