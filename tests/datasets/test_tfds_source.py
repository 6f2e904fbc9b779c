"""`tfds:<name>` sources with `tfds.testing.mock_data` (no network, few examples)."""
import json
import os

import numpy as np
import pytest

import datasets
from datasets import loader
from datasets import sources
from datasets import tfds_source
from tff_idp.errors import ToolkitValueError

tfds = pytest.importorskip("tensorflow_datasets")

# ClientData objects are built here; no TFF computation runs, but should one
# ever do, it must use the owned runtime (see tests/conftest.py).
pytestmark = pytest.mark.usefixtures("tff_runtime")

N = 24        # mock examples per split


def test_tfds_mnist_iid_split_is_saved_and_reopened_offline(tmp_path):
  split_dir = str(tmp_path / "split")
  with tfds.testing.mock_data(num_examples=N):
    split = datasets.resolve("tfds:mnist", num_clients=4, seed=0, split_dir=split_dir,
                             data_dir=str(tmp_path / "tfds"), progress=False)
  assert isinstance(split, loader.FederatedSplit)
  assert split.num_clients == 4 and split.manifest["client_sizes"] == [6] * 4
  assert split.num_classes == 10 and split.element_shape == (28, 28, 1)
  assert split.info.rescale == pytest.approx(1 / 255)
  assert split.manifest["dataset"] == "tfds:mnist" and split.manifest["partition"] == "iid"
  assert split.manifest["source"]["tfds"]["test_split"] == "test"
  cd = split.train_client_data()
  spec = cd.element_type_structure
  assert tuple(spec["x"].shape) == (28, 28, 1) and spec["x"].dtype.name == "float32"
  assert spec["y"].dtype.name == "int32"
  ex = next(iter(cd.create_tf_dataset_for_client(split.client_ids[0])))
  assert 0 <= int(ex["y"]) < 10
  x, y = split.test_arrays()
  assert x.shape == (N, 28, 28, 1) and x.dtype == np.float32 and y.dtype == np.int32
  # Later calls open the saved split: no TFDS data (nor mock) needed.
  again = datasets.resolve("tfds:mnist", num_clients=4, split_dir=split_dir,
                           data_dir=str(tmp_path / "nowhere"))
  assert again.manifest["assignment_sha256"] == split.manifest["assignment_sha256"]
  with pytest.raises(loader.SplitMismatchError, match="num_clients 4 \\(asked for 5\\)"):
    datasets.resolve("tfds:mnist", num_clients=5, split_dir=split_dir)
  with pytest.raises(loader.SplitMismatchError, match="test_split 'test'"):
    datasets.resolve("tfds:mnist", num_clients=4, split_dir=split_dir, test_split="val")


def test_tfds_dirichlet_in_memory_and_load_federated(tmp_path):
  with tfds.testing.mock_data(num_examples=N):
    split = tfds_source.from_tfds("cifar10", "dirichlet", num_clients=3, alpha=0.5,
                                  test_split=None, data_dir=str(tmp_path))
    assert split.element_shape == (32, 32, 3) and split.num_clients == 3
    assert split.manifest["params"] == {"alpha": 0.5}
    assert len(split.label_names) == 10 and split.num_classes == 10
    assert split.test_arrays()[0].shape == (0, 32, 32, 3)
    train, test = datasets.load_federated(
        "tfds:cifar10", "dirichlet", num_clients=3, split_dir=str(tmp_path / "s"),
        data_dir=str(tmp_path), batch_size=5, progress=False)
  assert sum(int(b["y"].shape[0]) for b in test) == N
  assert json.load(open(tmp_path / "s" / "manifest.json"))["params"] == {"alpha": 0.1}
  assert len(train.client_ids) == 3


def test_unprepared_tfds_dataset_fails_at_once_naming_data_dir_and_command(tmp_path):
  data_dir = str(tmp_path / "empty")
  with pytest.raises(sources.SourceNotFoundError) as e:
    datasets.resolve("tfds:mnist", num_clients=2, data_dir=data_dir,
                     split_dir=str(tmp_path / "s"), progress=False)
  text = str(e.value)
  assert data_dir in text and f"tfds build mnist --data_dir={data_dir}" in text
  assert "download=True" in text
  assert not os.path.exists(tmp_path / "s" / "manifest.json")


def test_bad_tfds_requests(tmp_path):
  with pytest.raises(ToolkitValueError, match="Dataset no_such_dataset_xyz not found"):
    tfds_source.read_tfds("no_such_dataset_xyz", data_dir=str(tmp_path))
  with pytest.raises(ToolkitValueError, match="no natural clients"):
    datasets.resolve("tfds:mnist", partition="natural", split_dir=str(tmp_path / "n"))
  with pytest.raises(ToolkitValueError, match="takes the parameters"):
    datasets.resolve("tfds:mnist", split_dir=str(tmp_path / "n"), beta=2.0)
  with tfds.testing.mock_data(num_examples=N):
    with pytest.raises(ToolkitValueError, match="needs an image feature 'image'"):
      tfds_source.read_tfds("imdb_reviews", data_dir=str(tmp_path))
