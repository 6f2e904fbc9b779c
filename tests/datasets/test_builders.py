"""Builders, loaders and CLIs on tiny fakes in each source's on-disk format."""
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from datasets import builder
from datasets import loader
from datasets import resolution
from datasets import partition
from datasets import sources
from datasets import specs
from datasets import sql_split
from tests import forked_runs
from tests.datasets import fakes

# ClientData objects are built here; no TFF computation runs, but should one
# ever do, it must use the owned runtime (see tests/conftest.py).
pytestmark = pytest.mark.usefixtures("tff_runtime")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
  d = tmp_path_factory.mktemp("raw")
  return {
      "dir": str(d),
      "cifar": fakes.write_cifar10(str(d), n_train=500, n_test=60),
      "emnist": fakes.write_emnist_sqlite(str(d), num_writers=12),
      "svhn": fakes.write_svhn_mat(str(d)),
  }


def _sha(path):
  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()


def _build(raw, tmp_path, spec, name="split"):
  out = str(tmp_path / name)
  return builder.build_split(spec, raw["dir"], out, progress=False), out


# ----------------------------------------------------------------------------
# Offline: no local files -> a clear error at once, no network access.
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("dataset,names", [
    ("fmnist", ["emnist_all.sqlite", "emnist_all.sqlite.lzma", "--data_dir"]),
    ("cifar10", ["cifar-10-python.tar.gz", "data_batch_1", "--data_dir"]),
    ("svhn", ["train_32x32.mat", "extra_32x32.mat", "test_32x32.mat", "svhn_cropped"]),
])
def test_missing_source_fails_at_once_naming_the_files(tmp_path, dataset, names):
  with pytest.raises(sources.SourceNotFoundError) as e:
    builder.build_split(specs.FederationSpec(dataset), str(tmp_path / "empty"),
                        str(tmp_path / "out"), progress=False)
  for name in names:
    assert name in str(e.value)
  assert not (tmp_path / "out").exists()


def test_download_without_network_fails_fast_instead_of_hanging(tmp_path, monkeypatch):
  monkeypatch.setattr(sources, "check_network", lambda host, timeout=3.0: False)
  with pytest.raises(sources.SourceNotFoundError, match="cannot be reached"):
    builder.build_split(specs.FederationSpec("cifar10"), str(tmp_path), str(tmp_path / "o"),
                        download=True, progress=False)


def test_build_cli_offline_error_within_seconds(tmp_path):
  proc = subprocess.run(
      [sys.executable, "-m", "datasets.build", "--dataset=svhn",
       f"--data_dir={tmp_path}", f"--out={tmp_path / 'out'}"],
      capture_output=True, text=True, timeout=60, cwd=ROOT, stdin=subprocess.DEVNULL,
      env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 2
  assert "train_32x32.mat" in proc.stderr and "--data_dir" in proc.stderr


# ----------------------------------------------------------------------------
# Source readers.
# ----------------------------------------------------------------------------
def test_cifar10_pickles_and_archive_read_identically(raw, tmp_path):
  src = sources.read_cifar10(sources.locate_cifar10(raw["dir"]))
  x, y = raw["cifar"]["train"]
  assert src.train_x.shape == (500, 32, 32, 3) and src.train_x.dtype == np.uint8
  assert np.array_equal(src.train_x, x) and np.array_equal(src.train_y, y)
  assert np.array_equal(src.test_x, raw["cifar"]["test"][0])
  fakes.write_cifar10(str(tmp_path), n_train=500, n_test=60, as_tar=True)
  loc = sources.locate_cifar10(str(tmp_path))
  assert loc["kind"] == "tar"
  from_tar = sources.read_cifar10(loc)
  assert np.array_equal(from_tar.train_x, x) and np.array_equal(from_tar.test_y, src.test_y)


def test_emnist_sqlite_and_h5_sources(raw, tmp_path):
  src = sources.read_emnist(sources.locate_emnist(raw["dir"]))
  writers = raw["emnist"]["writers"]
  assert src.group_ids == sorted(w[0] for w in writers)
  first = min(writers, key=lambda w: w[0])
  mine = src.train_groups == 0
  assert np.array_equal(src.train_x[mine], first[1]) and np.array_equal(src.train_y[mine],
                                                                      first[2])
  assert len(src.train_y) == sum(len(w[2]) for w in writers)
  h5 = fakes.write_emnist_h5(str(tmp_path / "h5" / "datasets"), num_writers=5)
  src5 = sources.read_emnist(sources.locate_emnist(str(tmp_path / "h5")))
  assert len(src5.group_ids) == 5
  assert len(src5.test_y) == sum(len(w[4]) for w in h5["writers"])


def test_svhn_mat_and_tfds_sources_map_label_10_to_0(raw, tmp_path):
  src = sources.read_svhn(sources.locate_svhn(raw["dir"], ["train", "extra"]))
  tr, ex = raw["svhn"]["train"], raw["svhn"]["extra"]
  assert np.array_equal(src.train_x, np.concatenate([tr[0], ex[0]]))
  assert np.array_equal(src.train_y, np.concatenate([tr[1], ex[1]]))
  assert src.splits == ["train", "extra"] and src.train_y.max() <= 9
  only_train = sources.read_svhn(sources.locate_svhn(raw["dir"], ["train"]))
  assert len(only_train.train_y) == len(tr[1])
  arrays = fakes.write_svhn_tfds(str(tmp_path))
  loc = sources.locate_svhn(str(tmp_path), ["train", "extra"])
  assert loc["kind"] == "tfds"
  tf_src = sources.read_svhn(loc)
  assert np.array_equal(tf_src.train_x, np.concatenate([arrays["train"][0],
                                                        arrays["extra"][0]]))
  assert np.array_equal(tf_src.test_y, arrays["test"][1])


# ----------------------------------------------------------------------------
# Builds: contents, manifest, determinism.
# ----------------------------------------------------------------------------
def test_cifar10_pachinko_split_holds_every_example_once(raw, tmp_path):
  m, out = _build(raw, tmp_path, specs.FederationSpec("cifar10", "pachinko", 10, seed=3))
  assert m["num_clients"] == 10 and m["client_sizes"] == [50] * 10
  assert m["num_train_examples"] == 500 and m["unassigned_examples"] == 0
  assert m["params"] == {"alpha": 0.1, "beta": 10.0, "coarse": "pairs",
                         "examples_per_client": None}
  assert m["source"]["files"][0] == "data_batch_1"
  x, y = raw["cifar"]["train"]
  stored = sql_split.read_arrays(os.path.join(out, "train.sqlite"), sql_split.IMAGE_FEATURES)
  assert stored["x"].shape == (500, 32, 32, 3)
  # The stored images are the source images, each exactly once.
  key = lambda a: sorted(hashlib.md5(i.tobytes()).hexdigest() for i in a)  # noqa: E731
  assert key(stored["x"].astype(np.uint8)) == key(x)
  counts = np.asarray(m["client_label_counts"])
  assert counts.sum() == 500 and counts.sum(axis=1).tolist() == m["client_sizes"]
  ids = sorted(set(stored["client"]))
  assert ids == m["client_ids"] == [f"client_{i:04d}" for i in range(10)]
  test = sql_split.read_arrays(os.path.join(out, "test.sqlite"), sql_split.IMAGE_FEATURES)
  assert np.array_equal(test["x"], raw["cifar"]["test"][0])
  assert builder.summary_text(m).count(m["assignment_sha256"]) == 1


def test_same_seed_same_bytes_other_seed_other_checksum(raw, tmp_path):
  spec = specs.FederationSpec("cifar10", "dirichlet", 10, seed=0)
  a, out_a = _build(raw, tmp_path, spec, "a")
  b, out_b = _build(raw, tmp_path, spec, "b")
  c, _ = _build(raw, tmp_path, specs.FederationSpec("cifar10", "dirichlet", 10, seed=1), "c")
  assert a["assignment_sha256"] == b["assignment_sha256"] != c["assignment_sha256"]
  assert a["client_sizes"] == b["client_sizes"]
  for f in ("train.sqlite", "test.sqlite"):
    assert _sha(os.path.join(out_a, f)) == _sha(os.path.join(out_b, f))


def test_fmnist_natural_and_iid_keep_the_writers(raw, tmp_path):
  nat, out = _build(raw, tmp_path, specs.FederationSpec("fmnist"), "nat")
  writers = raw["emnist"]["writers"]
  assert nat["num_clients"] == 12 and nat["client_ids"] == sorted(w[0] for w in writers)
  by_id = {w[0]: w for w in writers}
  assert nat["client_sizes"] == [len(by_id[i][2]) for i in nat["client_ids"]]
  assert nat["test"]["num_clients"] == 12
  keep, _ = _build(raw, tmp_path, specs.FederationSpec("fmnist", "iid",
                                                       params={"iid_sizes": "keep"}), "keep")
  assert keep["client_sizes"] == nat["client_sizes"]
  assert keep["assignment_sha256"] != nat["assignment_sha256"]
  equal, _ = _build(raw, tmp_path, specs.FederationSpec("fmnist", "iid"), "equal")
  assert max(equal["client_sizes"]) - min(equal["client_sizes"]) <= 1
  assert equal["client_ids"] == nat["client_ids"]
  with pytest.raises(ValueError, match="writers"):
    _build(raw, tmp_path, specs.FederationSpec("fmnist", "iid", num_clients=5), "bad")


def test_svhn_iid_uses_train_plus_extra(raw, tmp_path):
  m, _ = _build(raw, tmp_path, specs.FederationSpec("svhn", num_clients=7))
  assert m["source"]["splits"] == ["train", "extra"]
  assert m["num_train_examples"] == 200 and m["unassigned_examples"] == 0
  assert sorted(set(m["client_sizes"])) == [28, 29]
  assert m["test"] == {"split": "test", "num_clients": 1, "num_examples": 40}


def test_spec_rejects_unknown_partitions_and_parameters():
  with pytest.raises(ValueError, match="partitions"):
    specs.FederationSpec("svhn", "pachinko").resolved()
  with pytest.raises(ValueError, match="not \\['beta'\\]"):
    specs.FederationSpec("cifar10", "dirichlet", params={"beta": 1.0}).resolved()
  with pytest.raises(ValueError, match="coarse"):
    specs.FederationSpec("cifar10", params={"coarse": "nope"}).resolved()
  assert specs.FederationSpec("cifar10").resolved().num_clients == 500
  assert specs.FederationSpec("svhn").name == "svhn-iid-k725-seed0"


# ----------------------------------------------------------------------------
# Loading: one call, existing split preferred, bad files rejected clearly.
# ----------------------------------------------------------------------------
def test_load_federated_builds_then_reads_the_split(raw, tmp_path):
  split_dir = str(tmp_path / "split")
  train, test = resolution.load_federated("cifar10", "iid", num_clients=10, seed=0,
                                      data_dir=raw["dir"], split_dir=split_dir,
                                      local_epochs=2, batch_size=16, progress=False)
  assert len(train.client_ids) == 10
  batches = list(train.create_tf_dataset_for_client(train.client_ids[0]))
  assert sum(int(b["y"].shape[0]) for b in batches) == 2 * 50
  assert batches[0]["x"].shape[1:] == (32, 32, 3) and batches[0]["x"].dtype.name == "float32"
  assert float(batches[0]["x"].numpy().max()) > 1.0                  # stored 0..255 scale
  assert sum(int(b["y"].shape[0]) for b in test) == 60
  # Second call: reads the split, even with no source files left.
  train2, test2 = resolution.load_federated("cifar10", "iid", num_clients=10,
                                        data_dir=str(tmp_path / "gone"),
                                        split_dir=split_dir, rescale=True, progress=False)
  first = next(iter(train2.create_tf_dataset_for_client(train2.client_ids[0])))
  assert 0.0 <= float(first["x"].numpy().max()) <= 1.0
  with pytest.raises(loader.SplitMismatchError, match="seed 0 \\(asked for 5\\)"):
    resolution.load_federated("cifar10", "iid", num_clients=10, seed=5, split_dir=split_dir,
                          progress=False)


def test_fmnist_client_data_has_channel_axis(raw, tmp_path):
  train, test = resolution.load_federated("fmnist", data_dir=raw["dir"],
                                      split_dir=str(tmp_path / "f"), progress=False)
  ex = next(iter(train.create_tf_dataset_for_client(train.client_ids[0])))
  assert ex["x"].shape == (28, 28, 1) and ex["y"].dtype.name == "int32"
  writers = raw["emnist"]["writers"]
  assert sum(1 for _ in test) == sum(len(w[4]) for w in writers)


@pytest.mark.parametrize("dataset", ["cifar10", "fmnist"])
def test_train_arrays_equal_reading_every_client_in_turn(raw, tmp_path, dataset):
  """``train_arrays()`` (one read of the file) gives exactly the arrays, the client order
  and each client's record order of the per-client ``tf.data`` reads the runners and
  experiments used to pool (a per-record budget array follows that order)."""
  split = resolution.resolve(dataset, partition="iid", num_clients=10 if dataset == "cifar10"
                             else None, data_dir=raw["dir"], split_dir=str(tmp_path / "s"),
                             progress=False)
  fast = split.train_arrays()
  slow = loader.SplitViews.train_arrays(split)
  assert list(fast) == list(slow) == split.train_client_data().client_ids
  assert len(fast) > 1
  for cid, (x, y) in slow.items():
    fx, fy = fast[cid]
    assert fx.dtype == np.float32 and fy.dtype == np.int32
    assert fx.shape == x.shape and fx.shape[1:] == split.element_shape
    np.testing.assert_array_equal(fx, x)
    np.testing.assert_array_equal(fy, y)


@pytest.fixture()
def built(raw, tmp_path):
  _, out = _build(raw, tmp_path, specs.FederationSpec("svhn", num_clients=7))
  return out


def test_corrupt_sqlite_gets_a_clear_error(built):
  path = os.path.join(built, "train.sqlite")
  with open(path, "r+b") as f:
    f.write(b"this is not a database at all" * 10)
  with pytest.raises(sql_split.SplitFormatError, match="not a readable SQLite database"):
    loader.open_split(built)


def test_truncated_split_gets_a_clear_error(built):
  con = sqlite3.connect(os.path.join(built, "train.sqlite"))
  con.execute("DELETE FROM examples WHERE rowid % 2 = 0")
  con.commit()
  con.close()
  with pytest.raises(sql_split.SplitFormatError, match="manifest says 200"):
    loader.open_split(built)


def test_foreign_sqlite_gets_a_clear_error(built, raw, tmp_path):
  # Some unrelated SQLite database.
  path = os.path.join(built, "test.sqlite")
  os.remove(path)
  con = sqlite3.connect(path)
  con.execute("CREATE TABLE t (a INTEGER)")
  con.commit()
  con.close()
  with pytest.raises(sql_split.SplitFormatError, match="not a TFF SqlClientData split"):
    loader.open_split(built)
  # A split of another dataset where an FMNIST one is expected.
  _, fm = _build(raw, tmp_path, specs.FederationSpec("fmnist"), "fm")
  shutil.copy(os.path.join(fm, "train.sqlite"), os.path.join(str(tmp_path), "x.sqlite"))
  with pytest.raises(sql_split.SplitFormatError, match="another dataset"):
    sql_split.check_sqlite(os.path.join(str(tmp_path), "x.sqlite"), sql_split.IMAGE_FEATURES)
  # The EMNIST source database itself is not a split either (no manifest).
  with pytest.raises(sql_split.SplitFormatError, match="another dataset|features"):
    sql_split.check_sqlite(raw["emnist"]["path"], sql_split.IMAGE_FEATURES)


def test_bad_manifest_and_unfinished_build(built):
  with open(os.path.join(built, "manifest.json"), "w") as f:
    f.write("{not json")
  with pytest.raises(sql_split.SplitFormatError, match="not a readable split manifest"):
    loader.open_split(built)
  open(os.path.join(built, builder.INCOMPLETE), "w").close()
  assert not loader.has_split(built)


def test_split_without_manifest_opens_as_external(built):
  os.remove(os.path.join(built, "manifest.json"))
  split = loader.open_split(built, dataset="svhn")
  assert split.manifest is None
  ids, counts = split.label_counts()
  assert len(ids) == 7 and counts.sum() == 200


# ----------------------------------------------------------------------------
# CLIs.
# ----------------------------------------------------------------------------
def _cli(args):
  return forked_runs.run_module(args[0], args[1:], timeout=180)


def test_build_cli_prints_the_manifest_summary_and_plot_cli_draws_fig1(raw, tmp_path):
  out = tmp_path / "cli"
  proc = _cli(["datasets.build", "--dataset=cifar10", "--partition=pachinko",
               "--num_clients=10", "--seed=0", f"--data_dir={raw['dir']}", f"--out={out}",
               "--alpha=0.5"])
  assert proc.returncode == 0, proc.stderr[-2000:]
  manifest = json.load(open(out / "manifest.json"))
  assert manifest["params"]["alpha"] == 0.5
  assert f"sha256 {manifest['assignment_sha256']}" in proc.stdout
  assert "clients        10;" in proc.stdout
  assert "train.sqlite" in proc.stderr                    # the progress bar
  again = _cli(["datasets.build", "--dataset=cifar10", f"--data_dir={raw['dir']}",
                f"--out={out}"])
  assert again.returncode == 2 and "--overwrite" in again.stderr
  png = tmp_path / "fig1.png"
  proc = _cli(["datasets.plot", f"--split_dir={out}", f"--out={png}", "--num_clients=8"])
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert png.stat().st_size > 20_000
  with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_assignment_checksum_matches_the_partition_module(raw, tmp_path):
  spec = specs.FederationSpec("cifar10", "pachinko", 10, seed=4)
  m, _ = _build(raw, tmp_path, spec)
  src = sources.read_cifar10(sources.locate_cifar10(raw["dir"]))
  a = partition.pachinko(src.train_y, specs.CIFAR10_COARSE["pairs"], 10, 50, 0.1, 10.0,
                         np.random.default_rng(4))
  assert a.checksum() == m["assignment_sha256"]
