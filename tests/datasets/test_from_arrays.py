"""`datasets.from_arrays`, saving it as a split, and the one resolver."""
import json
import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

import datasets
from datasets import loader
from datasets import partition
from datasets import sql_split
from tff_idp.errors import ToolkitValueError

from tests.datasets import array_backed_checks  # pylint: disable=g-bad-import-order

# ClientData objects are built here; no TFF computation runs, but should one
# ever do, it must use the owned runtime (see tests/conftest.py).
pytestmark = pytest.mark.usefixtures("tff_runtime")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tabular(n=120, d=5, classes=3, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(n, d)), rng.integers(0, classes, n).astype(np.int64)


def _images(n=60, seed=1):
  rng = np.random.default_rng(seed)
  return (rng.integers(0, 256, (n, 6, 6, 3), dtype=np.uint8), rng.integers(0, 10, n),
          rng.choice(["hospital_b", "hospital_a", "hospital_c"], n))


def _client_examples(cd, cid):
  return [(e["x"].numpy(), int(e["y"])) for e in cd.create_tf_dataset_for_client(cid)]


def test_iid_tabular_float64_and_int64_become_float32_and_int32():
  x, y = _tabular()
  split = datasets.from_arrays(x, y, "iid", num_clients=7, seed=3)
  assert split.num_clients == 7 and split.client_ids[0] == "client_0000"
  assert split.num_classes == 3 and split.element_shape == (5,)
  assert sorted(split.manifest["client_sizes"]) == [17] * 6 + [18]
  cd = split.train_client_data()
  spec = cd.element_type_structure
  assert spec["x"].dtype.name == "float32" and tuple(spec["x"].shape) == (5,)
  assert spec["y"].dtype.name == "int32" and tuple(spec["y"].shape) == ()
  # Every example is in exactly one client, unchanged (up to float32 rounding).
  got = sorted((tuple(xe), ye) for c in cd.client_ids for xe, ye in _client_examples(cd, c))
  want = sorted((tuple(xe), int(ye)) for xe, ye in zip(x.astype(np.float32), y))
  assert got == want
  # Same seed, same partition as the partition module's.
  a = partition.iid_equal(len(y), 7, np.random.default_rng(3))
  assert split.manifest["assignment_sha256"] == a.checksum()


def test_dirichlet_reuses_the_partition_module():
  x, y = _tabular(n=300, classes=4)
  split = datasets.from_arrays(x, y, "dirichlet", num_clients=6, alpha=0.3, seed=1)
  a = partition.dirichlet_turns(y, 6, 0.3, np.random.default_rng(1), num_classes=4)
  assert split.manifest["assignment_sha256"] == a.checksum()
  assert split.manifest["params"] == {"alpha": 0.3}
  ids, counts = split.label_counts()
  assert counts.tolist() == a.label_counts(y, 4).tolist() and len(ids) == 6


def test_natural_images_save_and_reopen_by_path(tmp_path):
  x, y, groups = _images()
  tx, ty, _ = _images(n=9, seed=2)
  split = datasets.from_arrays(x, y, "natural", groups=groups, test_x=tx, test_y=ty,
                               num_classes=10, label_names=[f"c{i}" for i in range(10)])
  assert split.client_ids == ["hospital_a", "hospital_b", "hospital_c"]
  assert split.element_shape == (6, 6, 3) and split.info.rescale == pytest.approx(1 / 255)
  mine = np.flatnonzero(groups == "hospital_b")             # source order within a client
  bx, by = split.client_arrays("hospital_b")
  assert np.array_equal(bx, x[mine].astype(np.float32)) and np.array_equal(by, y[mine])

  directory = str(tmp_path / "split")
  saved = split.save(directory)
  assert isinstance(saved, loader.FederatedSplit)
  m = json.load(open(os.path.join(directory, "manifest.json")))
  assert m["version"] == 2 and m["dataset"] == "arrays"
  assert m["data_spec"]["features"] == {"image": ["int64", [6, 6, 3]], "label": ["int64", []]}
  assert m["data_spec"]["num_classes"] == 10 and m["data_spec"]["element_shape"] == [6, 6, 3]
  for opened in (loader.open_split(directory), datasets.resolve(directory)):
    assert opened.client_ids == split.client_ids and opened.num_classes == 10
    assert opened.element_shape == (6, 6, 3) and opened.label_names[3] == "c3"
    cd = opened.train_client_data()
    got = _client_examples(cd, "hospital_b")
    assert np.array_equal(np.stack([g[0] for g in got]), bx)
    assert [g[1] for g in got] == by.tolist()
    pooled = opened.train_arrays()   # one read; the same as the in-memory split's
    assert list(pooled) == list(split.train_arrays()) == split.client_ids
    for cid, (px, py) in split.train_arrays().items():
      assert np.array_equal(pooled[cid][0], px) and np.array_equal(pooled[cid][1], py)
    test_x, test_y = opened.test_arrays()
    assert test_x.dtype == np.float32 and np.array_equal(test_x, tx.astype(np.float32))
    assert test_y.dtype == np.int32 and np.array_equal(test_y, ty)
  train, test = datasets.load_federated(directory, batch_size=4, rescale=True)
  first = next(iter(train.create_tf_dataset_for_client("hospital_a")))
  assert first["x"].shape[1:] == (6, 6, 3) and float(first["x"].numpy().max()) <= 1.0
  assert sum(int(b["y"].shape[0]) for b in test) == 9
  with pytest.raises(loader.SplitMismatchError, match="num_clients 3 \\(asked for 4\\)"):
    datasets.resolve(directory, num_clients=4)
  with pytest.raises(ToolkitValueError, match="overwrite=True"):
    split.save(directory)
  assert datasets.save_split(split, directory, overwrite=True).num_clients == 3


def test_tabular_split_without_test_set_saves_and_loads(tmp_path):
  x, y = _tabular(n=40, d=3)
  directory = str(tmp_path / "t")
  saved = datasets.from_arrays(x, y, num_clients=4).save(directory)
  test_x, test_y = saved.test_arrays()
  assert test_x.shape == (0, 3) and test_y.shape == (0,)
  ex = next(iter(saved.train_client_data().create_tf_dataset_for_client("client_0002")))
  assert ex["x"].shape == (3,) and ex["x"].dtype.name == "float32"


def test_saved_array_split_is_checked_on_open(tmp_path):
  x, y = _tabular(n=50)
  directory = str(tmp_path / "s")
  datasets.from_arrays(x, y, num_clients=5).save(directory)
  con = sqlite3.connect(os.path.join(directory, "train.sqlite"))
  con.execute("UPDATE examples SET serialized_example_proto = x'0a03ffff' WHERE rowid = 33")
  con.commit()
  con.close()
  with pytest.raises(sql_split.SplitFormatError, match="client 'client_0003'") as e:
    datasets.resolve(directory)
  assert "from_arrays(...).save(" in str(e.value)


def test_integer_valued_float_labels_are_accepted():
  x, y = _tabular(n=20)
  split = datasets.from_arrays(x, y.astype(np.float64), num_clients=2)
  assert split.train_client_data().element_type_structure["y"].dtype.name == "int32"


@pytest.mark.parametrize("kwargs,field,message", [
    ({"y": [0.5] * 10}, "y", "not an integer class id"),
    ({"x": np.full((10, 2), np.nan)}, "x", "NaN or inf"),
    ({"x": np.full((10, 2), np.inf)}, "x", "NaN or inf"),
    ({"x": np.full((10, 2), 1e300)}, "x", "float32's range"),
    ({"x": np.full((10, 2), 2 ** 40, dtype=np.int64)}, "x", "2**24"),
    ({"x": np.zeros(10)}, "x", "reshape(-1, 1)"),
    ({"x": np.array([["a", "b"]] * 10)}, "x", "must be numbers"),
    ({"y": [-1] + [0] * 9}, "y", "negative"),
    ({"y": [0] * 9}, "y", "has 9 labels but x has 10"),
    ({"y": ["cat"] * 10}, "y", "np.unique"),
    ({"y": np.eye(10)}, "y", "argmax"),
    ({"y": [57] + [0] * 9, "num_classes": 10}, "y", "label 57 of example 0 is >= num_classes=10"),
    ({"num_clients": 11}, "num_clients", "pass num_clients <= 10"),
    ({"num_clients": 0}, "num_clients", "integer >= 1"),
    ({"num_clients": None}, "num_clients", "needs the number of clients"),
    ({"partition": "natural"}, "groups", "needs groups"),
    ({"partition": "natural", "groups": [1] * 9, "num_clients": None}, "groups", "shape [10]"),
    ({"partition": "natural", "groups": [0, 1] * 5, "num_clients": 3}, "num_clients",
     "omit num_clients or pass 2"),
    ({"groups": [0] * 10}, "groups", "only used by partition='natural'"),
    ({"alpha": 0.5}, "alpha", "only used by partition='dirichlet'"),
    ({"partition": "dirichlet", "alpha": -1.0}, "alpha", "finite number > 0"),
    ({"partition": "pachinko"}, "partition", "one of ['iid', 'dirichlet', 'natural']"),
    ({"test_x": np.zeros((3, 2))}, "test_y", "together"),
    ({"test_x": np.zeros((3, 4)), "test_y": [0, 1, 1]}, "test_x", "[4] but x's have [2]"),
    ({"test_x": np.zeros((3, 2)), "test_y": [0, 1, 9], "num_classes": 2}, "test_y",
     "label 9 of example 2 is >= num_classes=2"),
    ({"seed": -1}, "seed", "integer >= 0"),
    ({"label_names": ["a"]}, "label_names", "one name per class"),
])
def test_bad_arguments_name_the_field(kwargs, field, message):
  args = {"x": np.zeros((10, 2)), "y": [0, 1] * 5, "partition": "iid", "num_clients": 2}
  args.update(kwargs)
  with pytest.raises(ToolkitValueError) as e:
    datasets.from_arrays(**args)
  text = str(e.value)
  assert text.startswith(field) or f"{field}:" in text or f"{field} " in text, text
  assert message in text, text


def test_resolve_rejects_unknown_names_listing_the_choices(tmp_path):
  with pytest.raises(ToolkitValueError) as e:
    datasets.resolve("mnist")
  text = str(e.value)
  for choice in ("cifar10", "fmnist", "svhn", "tfds:<name>", "tfds:mnist", "path",
                 "from_arrays"):
    assert choice in text
  with pytest.raises(ToolkitValueError, match="does not exist"):
    datasets.resolve(str(tmp_path / "nowhere" / "split"))
  with pytest.raises(ToolkitValueError, match="omit split_dir"):
    datasets.resolve(str(tmp_path), split_dir=str(tmp_path))


def test_import_datasets_stays_light():
  code = ("import sys, datasets; from datasets import from_arrays, resolve, open_split, "
          "load_federated, save_split; import datasets.loader, datasets.tfds_source; "
          "print(sorted(m for m in ('tensorflow', 'tensorflow_datasets', "
          "'tensorflow_federated') if m in sys.modules))")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.strip() == "[]"



@pytest.mark.parametrize("kind", ["in_memory", "saved"])
def test_the_vectorized_rounds_read_the_same_examples_as_each_clients_dataset(kind, tmp_path):
  """Issue 49: a split's ClientData is marked array-backed; the arrays it hands the vectorized
  rounds are exactly what each client's dataset yields (keys, dtypes, values, order)."""
  from tff_idp import client_arrays  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype(np.float64)
  y = rng.integers(0, 3, 60)
  split = datasets.from_arrays(x, y, partition="dirichlet", num_clients=7, seed=1)
  if kind == "saved":
    split = split.save(str(tmp_path / "split"))
  train = split.train_client_data()
  array_backed_checks.assert_arrays_are_each_clients_dataset(train)
  preprocessed = train.preprocess(lambda ds: ds.take(1))
  assert client_arrays.of(preprocessed) is None
