"""Split integrity on open (issue 9): checksums, manifest keys, every row, labels.

Each test damages one thing of a freshly built split (a tiny fake SVHN split
of 7 clients) and expects a `SplitFormatError` (a `TffIdpError`) that names
what is wrong and says how to rebuild. All of them loaded silently (or failed
with a bare KeyError) before the checks existed.
"""
import json
import os
import shutil
import sqlite3

import numpy as np
import pytest

import datasets
from datasets import builder
from datasets import integrity
from datasets import loader
from datasets import sources
from datasets import specs
from datasets import sql_split
from tests.datasets import fakes
from tff_idp.errors import TffIdpError

SPEC = specs.FederationSpec("svhn", num_clients=7, seed=0)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
  raw = tmp_path_factory.mktemp("raw")
  fakes.write_svhn_mat(str(raw))
  out = str(tmp_path_factory.mktemp("built") / "split")
  builder.build_split(SPEC, str(raw), out, progress=False)
  return out


@pytest.fixture()
def split_dir(pristine, tmp_path):
  out = str(tmp_path / "split")
  shutil.copytree(pristine, out)
  return out


def _manifest(d):
  with open(os.path.join(d, "manifest.json")) as f:
    return json.load(f)


def _write_manifest(d, m):
  with open(os.path.join(d, "manifest.json"), "w") as f:
    json.dump(m, f)


def _flip(hexdigest):
  return ("0" if hexdigest[0] != "0" else "1") + hexdigest[1:]


def _rows(d, client):
  """(rowid, blob) of one client's rows in train.sqlite, in order."""
  con = sqlite3.connect(os.path.join(d, "train.sqlite"))
  rows = con.execute("SELECT rowid, serialized_example_proto FROM examples WHERE "
                     "client_id = ? ORDER BY rowid", (client,)).fetchall()
  con.close()
  return rows


def _set_blob(d, rowid, blob):
  con = sqlite3.connect(os.path.join(d, "train.sqlite"))
  con.execute("UPDATE examples SET serialized_example_proto = ? WHERE rowid = ?",
              (blob, rowid))
  con.commit()
  con.close()


def _svhn_example(label, value=7):
  example = fakes._example  # pylint: disable=protected-access
  return example({"image": np.full((32, 32, 3), value, np.int64), "label": np.int64(label)})


def _open_fails(d, *patterns):
  with pytest.raises(sql_split.SplitFormatError) as e:
    loader.open_split(d)
  assert isinstance(e.value, TffIdpError)
  text = str(e.value)
  for p in patterns:
    assert p in text, text
  return text


def test_intact_split_opens_with_checksums_and_without_decoding(split_dir, monkeypatch):
  m = _manifest(split_dir)
  assert set(m[integrity.ROWS_SHA256]) == {"train", "test"}
  assert m[integrity.SEAL]["fields"]["assignment_sha256"]
  # An intact split is verified by the streamed row hashes alone.
  monkeypatch.setattr(sql_split, "scan_rows", lambda *a, **k: pytest.fail("decoded rows"))
  split = loader.open_split(split_dir)
  assert split.num_clients == 7 and split.client_ids == m["client_ids"]


def test_resolve_opens_a_built_split_by_name_or_path(split_dir, tmp_path):
  by_name = datasets.resolve("svhn", num_clients=7, split_dir=split_dir,
                             data_dir=str(tmp_path / "no_sources"))
  by_path = datasets.resolve(split_dir, partition="iid", seed=0)
  assert by_name.manifest == by_path.manifest
  assert by_path.element_shape == (32, 32, 3) and by_path.num_classes == 10
  assert by_path.feature_spec == sql_split.IMAGE_FEATURES
  copy = by_path.save(str(tmp_path / "copy"))
  assert copy.directory != split_dir and copy.manifest == by_path.manifest
  with pytest.raises(loader.SplitMismatchError, match="seed 0 \\(asked for 3\\)"):
    datasets.resolve(split_dir, seed=3)


def test_flipped_assignment_sha256(split_dir):
  m = _manifest(split_dir)
  m["assignment_sha256"] = _flip(m["assignment_sha256"])
  _write_manifest(split_dir, m)
  _open_fails(split_dir, "assignment_sha256", "changed after the split was built",
              "python -m datasets.build --dataset=svhn", "--overwrite")


def test_flipped_labels_sha256(split_dir):
  m = _manifest(split_dir)
  m["source"]["labels_sha256"] = _flip(m["source"]["labels_sha256"])
  _write_manifest(split_dir, m)
  _open_fails(split_dir, "source.labels_sha256", "changed after the split was built")


def test_edited_client_sizes(split_dir):
  m = _manifest(split_dir)
  m["client_sizes"][0] += 1
  m["client_sizes"][1] -= 1                    # the total still adds up
  _write_manifest(split_dir, m)
  _open_fails(split_dir, f"client {m['client_ids'][0]!r}", "client_sizes", "Rebuild")


@pytest.mark.parametrize("key", ["client_sizes", "num_clients", "dataset",
                                 "test.num_examples"])
def test_missing_manifest_key(split_dir, key):
  m = _manifest(split_dir)
  if "." in key:
    outer, inner = key.split(".")
    del m[outer][inner]
  else:
    del m[key]
  _write_manifest(split_dir, m)
  _open_fails(split_dir, f"lacks the key '{key}'", "Rebuild it with" if key != "dataset"
              else "Delete")


def test_corrupt_later_row_names_its_client(split_dir):
  client = _manifest(split_dir)["client_ids"][4]
  rowid, blob = _rows(split_dir, client)[-1]             # not the first row of the file
  _set_blob(split_dir, rowid, blob[: len(blob) // 2])    # truncated proto
  text = _open_fails(split_dir, f"client {client!r}", "does not decode", "Rebuild it with")
  assert f"row {rowid}" in text


def test_out_of_range_label_names_its_client(split_dir):
  client = _manifest(split_dir)["client_ids"][3]
  rowid, _ = _rows(split_dir, client)[2]
  _set_blob(split_dir, rowid, _svhn_example(57))
  _open_fails(split_dir, f"client {client!r}", "label 57", "outside the 10 classes")


def test_out_of_range_label_in_a_split_without_checksums(split_dir):
  # A split built before the checksums existed: every row's label is decoded.
  m = _manifest(split_dir)
  del m[integrity.ROWS_SHA256], m[integrity.SEAL]
  _write_manifest(split_dir, m)
  loader.open_split(split_dir)                          # intact: opens
  client = m["client_ids"][6]
  rowid, _ = _rows(split_dir, client)[-1]
  _set_blob(split_dir, rowid, _svhn_example(57))
  _open_fails(split_dir, f"client {client!r}", "label 57")


def test_changed_label_and_changed_pixels(split_dir):
  m = _manifest(split_dir)
  client = m["client_ids"][2]
  rowid, blob = _rows(split_dir, client)[1]
  label = int(sql_split.read_arrays(os.path.join(split_dir, "train.sqlite"),
                                    sql_split.IMAGE_FEATURES)["y"][rowid - 1])
  _set_blob(split_dir, rowid, _svhn_example((label + 1) % 10))
  _open_fails(split_dir, f"client {client!r}", "label counts")
  _set_blob(split_dir, rowid, _svhn_example(label, value=200))   # valid, other pixels
  _open_fails(split_dir, "do not match the manifest's sqlite_sha256.train")


def test_row_moved_to_another_client(split_dir):
  m = _manifest(split_dir)
  a, b = m["client_ids"][0], m["client_ids"][1]
  rowid, _ = _rows(split_dir, a)[0]
  con = sqlite3.connect(os.path.join(split_dir, "train.sqlite"))
  con.execute("UPDATE examples SET client_id = ? WHERE rowid = ?", (b, rowid))
  con.commit()
  con.close()
  _open_fails(split_dir, f"client {a!r}", "client_sizes")


def test_corrupt_test_file_row(split_dir):
  con = sqlite3.connect(os.path.join(split_dir, "test.sqlite"))
  con.execute("UPDATE examples SET serialized_example_proto = ? WHERE rowid = 5",
              (b"\x0a\x05garbage",))
  con.commit()
  con.close()
  _open_fails(split_dir, "test.sqlite", "client 'test'", "does not decode")


def test_builder_refuses_source_labels_out_of_range(tmp_path, monkeypatch):
  raw = tmp_path / "raw"
  fakes.write_svhn_mat(str(raw))
  real = builder.read_source

  def bad_labels(spec, location):
    src = real(spec, location)
    src.train_y = src.train_y.copy()
    src.train_y[5] = 57
    return src

  monkeypatch.setattr(builder, "read_source", bad_labels)
  with pytest.raises(sources.SourceFormatError, match="include 57 \\(example 5\\)"):
    builder.build_split(SPEC, str(raw), str(tmp_path / "out"), progress=False)


def test_rows_sha256_streams_the_digest_the_writer_returned(tmp_path):
  x = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
  y = np.array([0, 1, 2, 0, 1, 2])
  spec = {"x": ("float", (4,)), "label": ("int64", ())}
  path = str(tmp_path / "t.sqlite")
  digest = sql_split.write_sqlite(path, ["a", "b"], [np.arange(3), np.arange(3, 6)], x, y,
                                  "train", spec=spec)
  assert sql_split.rows_sha256(path) == (digest, 6)
  counts = sql_split.scan_rows(path, spec, 3, full=True)
  assert {k: v.tolist() for k, v in counts.items()} == {"a": [1, 1, 1], "b": [1, 1, 1]}


def test_own_split_without_manifest_says_to_restore_it(tmp_path):
  """A from_arrays split whose manifest is gone is not a built-in dataset's: the
  message says to restore the manifest or save again, not to pass dataset='cifar10'."""
  import numpy as np
  import datasets
  from tff_idp.errors import ToolkitValueError
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(40, 3)), np.arange(40) % 2
  path = str(tmp_path / "own")
  datasets.from_arrays(x, y, partition="iid", num_clients=2, test_x=x[:4],
                       test_y=y[:4]).save(path)
  os.remove(os.path.join(path, "manifest.json"))
  with pytest.raises(ToolkitValueError) as e:
    datasets.open_split(path)
  text = str(e.value)
  assert "restore that file, or save the split again" in text and "cifar10" not in text


def test_missing_dataset_path_says_it_does_not_exist(tmp_path):
  import datasets
  from tff_idp.errors import ToolkitValueError
  with pytest.raises(ToolkitValueError, match=r"the path .*nowhere does not exist"):
    datasets.resolve(str(tmp_path / "nowhere"))
