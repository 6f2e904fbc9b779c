"""tff_idp.engine.checkpoint: atomic, sealed, owner-only checkpoints, and refusal of damaged ones."""
import collections
import hashlib
import json
import os
import stat

import numpy as np
import pytest

from tff_idp.engine import checkpoint
from tff_idp.errors import OutputDirError
from tff_idp.errors import TffIdpError

State = collections.namedtuple("State", ["model", "opt", "clip", "seed"])


def _state(scale=1.0):
  return State(
      model=[np.arange(6, dtype=np.float32).reshape(2, 3) * scale,
             np.array([0.5, -1.5], dtype=np.float32) * scale],
      opt={"m": np.full((3,), 0.25 * scale, dtype=np.float64), "step": np.int64(7)},
      clip=np.float32(1.5 * scale),
      seed=np.array([11, 22], dtype=np.int64))


def _flat(state):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.nest.flatten(state)


def _mode(path):
  return stat.S_IMODE(os.stat(path).st_mode)


def _json(directory, round_num):
  with open(checkpoint.paths(str(directory), round_num)[0]) as f:
    return json.load(f)


def _write_json(directory, round_num, meta):
  with open(checkpoint.paths(str(directory), round_num)[0], "w") as f:
    json.dump(meta, f)


def _reseal_json(meta):
  """Recomputes the JSON digest independently of the module (canonical JSON form)."""
  seal = dict(meta["seal"])
  seal.pop("json_sha256", None)
  canonical = json.dumps(dict(meta, seal=seal), sort_keys=True, separators=(",", ":"))
  meta["seal"]["json_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
  return meta


# --- names, constants, errors --------------------------------------------------------------


def test_paths_and_constants():
  assert checkpoint.paths("d", 7) == [os.path.join("d", "ckpt_000007.json"),
                                      os.path.join("d", "ckpt_000007.npz")]
  assert checkpoint.paths("/x/y", 123456) == ["/x/y/ckpt_123456.json", "/x/y/ckpt_123456.npz"]
  assert checkpoint.EXTENSIONS == (".json", ".npz")
  assert checkpoint.SECRET_FILE_MODE == 0o600
  assert checkpoint.SECRET_DIR_MODE == 0o700
  assert checkpoint.SEAL_KEY == "seal"
  assert checkpoint.OUTPUTS_KEY == "outputs"


def test_error_hierarchy_and_paths():
  for cls in (checkpoint.CheckpointMismatchError, checkpoint.CorruptCheckpointError,
              checkpoint.DamagedOutputsError):
    assert issubclass(cls, checkpoint.CheckpointError)
  assert issubclass(checkpoint.CheckpointError, TffIdpError)
  assert issubclass(checkpoint.CheckpointError, RuntimeError)
  e = checkpoint.CheckpointError("boom")
  assert str(e) == "boom" and e.paths == ()
  e = checkpoint.DamagedOutputsError("bad", ["a", "b"])
  assert str(e) == "bad" and e.paths == ("a", "b") and isinstance(e.paths, tuple)


# --- save / load round trip ----------------------------------------------------------------


def test_round_trip_restores_structure_values_and_dtypes(tmp_path):
  state = _state(2.0)
  base = checkpoint.save(str(tmp_path), 3, state, {"sampler": [1, 2], "secret": "k"})
  assert base == str(tmp_path / "ckpt_000003")
  restored, meta = checkpoint.load(str(tmp_path), 3, _state(0.0))
  assert isinstance(restored, State)
  assert set(restored.opt) == {"m", "step"}
  for got, want in zip(_flat(restored), _flat(state)):
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)
  assert meta["sampler"] == [1, 2] and meta["secret"] == "k"
  assert meta["round"] == 3 and type(meta["round"]) is int
  assert meta["num_leaves"] == len(_flat(state)) == 6
  assert set(meta) == {"sampler", "secret", "round", "num_leaves", "seal"}
  assert checkpoint.read_meta(str(tmp_path), 3) == meta


def test_load_casts_to_the_templates_dtype(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.array([1.25, 2.5], dtype=np.float64)], {})
  restored, _ = checkpoint.load(str(tmp_path), 1, [np.zeros(2, dtype=np.float32)])
  assert restored[0].dtype == np.float32
  np.testing.assert_array_equal(restored[0], np.array([1.25, 2.5], dtype=np.float32))


def test_round_number_is_stored_as_int_and_meta_is_not_mutated(tmp_path):
  meta_in = {"a": 1, "outputs": {"metrics.csv": "abc"}}
  checkpoint.save(str(tmp_path), np.int64(5), [np.zeros(1)], meta_in)
  assert meta_in == {"a": 1, "outputs": {"metrics.csv": "abc"}}
  meta = _json(tmp_path, 5)
  assert meta["round"] == 5 and meta["a"] == 1
  assert "outputs" not in meta  # moved into the seal


def test_files_are_npz_and_indented_json(tmp_path):
  checkpoint.save(str(tmp_path), 2, [np.ones(3), np.zeros((1, 2))], {"k": "v"})
  json_path, npz_path = checkpoint.paths(str(tmp_path), 2)
  with np.load(npz_path, allow_pickle=False) as npz:
    assert sorted(npz.files) == ["arr_0", "arr_1"]
    np.testing.assert_array_equal(npz["arr_0"], np.ones(3))
  with open(json_path) as f:
    text = f.read()
  assert text == json.dumps(json.loads(text), indent=1)
  assert sorted(os.listdir(tmp_path)) == ["ckpt_000002.json", "ckpt_000002.npz"]


def test_empty_state(tmp_path):
  checkpoint.save(str(tmp_path), 1, [], {})
  restored, meta = checkpoint.load(str(tmp_path), 1, [])
  assert restored == [] and meta["num_leaves"] == 0


# --- the seal ------------------------------------------------------------------------------


def test_seal_holds_digests_of_both_files_and_the_outputs(tmp_path):
  outputs = {"metrics.csv": "0" * 64, "rows": 3}
  checkpoint.save(str(tmp_path), 4, [np.ones(2)], {"x": 1, "outputs": outputs})
  json_path, npz_path = checkpoint.paths(str(tmp_path), 4)
  meta = _json(tmp_path, 4)
  seal = meta["seal"]
  assert set(seal) == {"npz_sha256", "outputs", "json_sha256"}
  with open(npz_path, "rb") as f:
    assert seal["npz_sha256"] == hashlib.sha256(f.read()).hexdigest()
  assert seal["outputs"] == outputs
  expected = _reseal_json(json.loads(json.dumps(meta)))["seal"]["json_sha256"]
  assert seal["json_sha256"] == expected
  assert checkpoint.sealed_outputs(meta) == outputs
  assert checkpoint.load(str(tmp_path), 4, [np.zeros(2)])[1] == meta


def test_sealed_outputs_without_outputs(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(1)], {})
  meta = _json(tmp_path, 1)
  assert meta["seal"]["outputs"] is None
  assert checkpoint.sealed_outputs(meta) is None
  assert checkpoint.sealed_outputs({}) is None
  assert checkpoint.sealed_outputs({"seal": None}) is None
  assert checkpoint.sealed_outputs({"seal": {"outputs": {"a": 1}}}) == {"a": 1}


def test_file_sha256_of_large_and_empty_files(tmp_path):
  data = bytes(range(256)) * 9000  # > 2 MiB: several chunks
  p = tmp_path / "f"
  p.write_bytes(data)
  assert checkpoint.file_sha256(str(p)) == hashlib.sha256(data).hexdigest()
  p.write_bytes(b"")
  assert checkpoint.file_sha256(str(p)) == hashlib.sha256(b"").hexdigest()


def test_edited_json_is_refused(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {"ledger": [0.5]})
  meta = _json(tmp_path, 1)
  meta["ledger"] = [0.1]
  _write_json(tmp_path, 1, meta)
  json_path = checkpoint.paths(str(tmp_path), 1)[0]
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.load(str(tmp_path), 1, [np.zeros(2)])
  assert str(info.value) == (
      f"checkpoint file {json_path} does not match its seal: it was edited or damaged "
      "after it was written (its sampler, ledger, secret or round cannot be trusted).")
  assert info.value.paths == (json_path,)


def test_edited_outputs_in_the_seal_are_refused(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {"outputs": {"m": "a"}})
  meta = _json(tmp_path, 1)
  meta["seal"]["outputs"] = {"m": "b"}
  _write_json(tmp_path, 1, meta)
  with pytest.raises(checkpoint.CorruptCheckpointError, match="does not match its seal"):
    checkpoint.load(str(tmp_path), 1, [np.zeros(2)])


def test_a_resealed_json_is_accepted(tmp_path):
  # The seal is a digest, not a signature: recomputing it the documented way is accepted.
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {"ledger": [0.5]})
  meta = _json(tmp_path, 1)
  meta["ledger"] = [0.1]
  _write_json(tmp_path, 1, _reseal_json(meta))
  assert checkpoint.load(str(tmp_path), 1, [np.zeros(2)])[1]["ledger"] == [0.1]


@pytest.mark.parametrize("edit", [
    lambda m: m.pop("seal"),
    lambda m: m.__setitem__("seal", None),
    lambda m: m.__setitem__("seal", "abc"),
    lambda m: m.__setitem__("seal", ["json_sha256", "npz_sha256"]),
    lambda m: m["seal"].pop("json_sha256"),
    lambda m: m["seal"].pop("npz_sha256"),
])
def test_missing_seal_is_refused(tmp_path, edit):
  checkpoint.save(str(tmp_path), 2, [np.ones(2)], {})
  meta = _json(tmp_path, 2)
  edit(meta)
  _write_json(tmp_path, 2, meta)
  json_path = checkpoint.paths(str(tmp_path), 2)[0]
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.load(str(tmp_path), 2, [np.zeros(2)])
  assert str(info.value) == (
      f"checkpoint file {json_path} has no seal (written before checkpoints were sealed, "
      "or its seal was removed), so it cannot be verified.")
  assert info.value.paths == (json_path,)


def test_swapped_npz_is_refused(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {}, keep=5)
  checkpoint.save(str(tmp_path), 2, [np.full(2, 2.0)], {}, keep=5)
  old_npz = checkpoint.paths(str(tmp_path), 1)[1]
  npz_path = checkpoint.paths(str(tmp_path), 2)[1]
  with open(old_npz, "rb") as src, open(npz_path, "wb") as dst:
    dst.write(src.read())
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.load(str(tmp_path), 2, [np.zeros(2)])
  assert str(info.value) == (
      f"checkpoint file {npz_path} does not match its seal: it was replaced (e.g. by "
      "another round's copy), edited or damaged after it was written.")
  assert info.value.paths == (npz_path,)


def test_missing_npz_is_refused(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {})
  npz_path = checkpoint.paths(str(tmp_path), 1)[1]
  os.remove(npz_path)
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.load(str(tmp_path), 1, [np.zeros(2)])
  assert str(info.value) == (
      f"checkpoint file {npz_path} is unreadable (No such file or directory).")
  assert info.value.paths == (npz_path,)
  assert isinstance(info.value.__cause__, FileNotFoundError)


def test_truncated_npz_is_refused(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {})
  npz_path = checkpoint.paths(str(tmp_path), 1)[1]
  with open(npz_path, "rb") as f:
    data = f.read()
  with open(npz_path, "wb") as f:
    f.write(data[:len(data) // 2])
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.load(str(tmp_path), 1, [np.zeros(2)])
  assert info.value.paths == (npz_path,)


def _resealed_npz(tmp_path, round_num, write):
  """Replaces the .npz and reseals, so that only the npz reading can refuse it."""
  json_path, npz_path = checkpoint.paths(str(tmp_path), round_num)
  write(npz_path)
  meta = _json(tmp_path, round_num)
  meta["seal"]["npz_sha256"] = checkpoint.file_sha256(npz_path)
  _write_json(tmp_path, round_num, _reseal_json(meta))
  return npz_path


def test_unreadable_npz_with_a_matching_seal_is_refused(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {})

  def write(p):
    with open(p, "wb") as f:
      f.write(b"not a zip file")
  npz_path = _resealed_npz(tmp_path, 1, write)
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.load(str(tmp_path), 1, [np.zeros(2)])
  assert str(info.value).startswith(f"checkpoint file {npz_path} is unreadable or corrupt (")
  assert str(info.value).endswith(").")
  assert info.value.paths == (npz_path,)


def test_npz_with_too_few_arrays_is_refused(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2), np.ones(3)], {})
  npz_path = _resealed_npz(tmp_path, 1, lambda p: np.savez(open(p, "wb"), np.ones(2)))
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.load(str(tmp_path), 1, [np.zeros(2), np.zeros(3)])
  assert str(info.value).startswith(
      f"checkpoint file {npz_path} is unreadable or corrupt (KeyError: ")
  assert info.value.paths == (npz_path,)


def test_npz_with_pickled_objects_is_refused(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {})
  obj = np.empty(1, dtype=object)
  obj[0] = {"a": 1}
  npz_path = _resealed_npz(tmp_path, 1, lambda p: np.savez(open(p, "wb"), obj))
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.load(str(tmp_path), 1, [np.zeros(1)])
  assert str(info.value).startswith(
      f"checkpoint file {npz_path} is unreadable or corrupt (ValueError: ")


def test_extra_arrays_beyond_num_leaves_are_ignored(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {})
  _resealed_npz(tmp_path, 1, lambda p: np.savez(open(p, "wb"), np.full(2, 3.0), np.ones(9)))
  restored, _ = checkpoint.load(str(tmp_path), 1, [np.zeros(2)])
  np.testing.assert_array_equal(restored[0], np.full(2, 3.0))


# --- read_meta: corrupt JSON ---------------------------------------------------------------


@pytest.mark.parametrize("content,kind", [
    ("", "JSONDecodeError"),
    ('{"round": 1, "num_le', "JSONDecodeError"),
    ("[1, 2]", "ValueError"),
    ('{"round": 1}', "KeyError"),
    ('{"num_leaves": -1}', "ValueError"),
    ('{"num_leaves": "x"}', "ValueError"),
    ('{"num_leaves": null}', "TypeError"),
])
def test_unreadable_json_is_refused(tmp_path, content, kind):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {})
  json_path = checkpoint.paths(str(tmp_path), 1)[0]
  with open(json_path, "w") as f:
    f.write(content)
  for call in (lambda: checkpoint.read_meta(str(tmp_path), 1),
               lambda: checkpoint.load(str(tmp_path), 1, [np.zeros(2)])):
    with pytest.raises(checkpoint.CorruptCheckpointError) as info:
      call()
    assert str(info.value).startswith(
        f"checkpoint file {json_path} is unreadable or corrupt ({kind}: ")
    assert str(info.value).endswith(").")
    assert info.value.paths == (json_path,)
    assert info.value.__cause__ is not None


def test_not_a_checkpoint_message(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2)], {})
  json_path = checkpoint.paths(str(tmp_path), 1)[0]
  with open(json_path, "w") as f:
    f.write('{"num_leaves": -1}')
  with pytest.raises(checkpoint.CorruptCheckpointError) as info:
    checkpoint.read_meta(str(tmp_path), 1)
  assert str(info.value) == (f"checkpoint file {json_path} is unreadable or corrupt "
                             "(ValueError: not a checkpoint's metadata).")


def test_read_meta_of_a_missing_checkpoint(tmp_path):
  with pytest.raises(checkpoint.CorruptCheckpointError, match="FileNotFoundError"):
    checkpoint.read_meta(str(tmp_path), 9)


def test_read_meta_accepts_zero_leaves(tmp_path):
  _write_json(tmp_path, 1, {"num_leaves": 0})
  assert checkpoint.read_meta(str(tmp_path), 1) == {"num_leaves": 0}


# --- foreign checkpoints -------------------------------------------------------------------


def test_other_number_of_tensors_is_a_mismatch(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2), np.ones(3)], {})
  base = str(tmp_path / "ckpt_000001")
  with pytest.raises(checkpoint.CheckpointMismatchError) as info:
    checkpoint.load(str(tmp_path), 1, [np.zeros(2)])
  assert str(info.value) == (
      f"checkpoint {base} has 2 state tensors but this process has 1; it was written by a "
      "different model or mode. Use another --output_dir, or --restart to discard it and "
      "start fresh.")
  assert info.value.paths == ()


def test_other_shape_is_a_mismatch(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(2), np.ones((2, 3))], {})
  base = str(tmp_path / "ckpt_000001")
  with pytest.raises(checkpoint.CheckpointMismatchError) as info:
    checkpoint.load(str(tmp_path), 1, [np.zeros(2), np.zeros((3, 2))])
  assert str(info.value) == (
      f"checkpoint {base}: state tensor 1 has shape (2, 3), expected (3, 2). Use another "
      "--output_dir, or --restart to discard it and start fresh.")
  # A scalar against a 1-element vector is a mismatch too.
  checkpoint.save(str(tmp_path), 2, [np.float32(1.0)], {})
  with pytest.raises(checkpoint.CheckpointMismatchError, match="state tensor 0 has shape"):
    checkpoint.load(str(tmp_path), 2, [np.zeros(1, dtype=np.float32)])


# --- listing, keeping, removing ------------------------------------------------------------


def test_list_and_latest_rounds(tmp_path):
  assert checkpoint.list_rounds(str(tmp_path)) == []
  assert checkpoint.latest_round(str(tmp_path)) is None
  assert checkpoint.list_rounds(str(tmp_path / "missing")) == []
  for r in (10, 2, 100):
    checkpoint.save(str(tmp_path), r, [np.ones(1)], {}, keep=10)
  # Not complete checkpoints / not checkpoints: ignored.
  (tmp_path / "ckpt_000007.npz").write_bytes(b"x")
  (tmp_path / "ckpt_000008.json.123.tmp").write_text("{}")
  (tmp_path / "ckpt_12.json").write_text("{}")
  (tmp_path / "ckpt_0000123.json").write_text("{}")
  (tmp_path / "ckpt_00000a.json").write_text("{}")
  (tmp_path / "xckpt_000009.json").write_text("{}")
  assert checkpoint.list_rounds(str(tmp_path)) == [2, 10, 100]
  assert checkpoint.latest_round(str(tmp_path)) == 100


def test_latest_round_of_a_single_checkpoint(tmp_path):
  checkpoint.save(str(tmp_path), 0, [np.ones(1)], {})
  assert checkpoint.list_rounds(str(tmp_path)) == [0]
  assert checkpoint.latest_round(str(tmp_path)) == 0


def test_save_keeps_the_newest_two_by_default(tmp_path):
  for r in range(1, 5):
    checkpoint.save(str(tmp_path), r, [np.full(1, r)], {})
  assert checkpoint.list_rounds(str(tmp_path)) == [3, 4]
  assert sorted(os.listdir(tmp_path)) == ["ckpt_000003.json", "ckpt_000003.npz",
                                          "ckpt_000004.json", "ckpt_000004.npz"]


@pytest.mark.parametrize("keep,expected", [(1, [5]), (3, [3, 4, 5]), (10, [1, 2, 3, 4, 5])])
def test_save_keeps_the_newest_keep(tmp_path, keep, expected):
  for r in (1, 2, 3, 4):
    checkpoint.save(str(tmp_path), r, [np.ones(1)], {}, keep=10)
  checkpoint.save(str(tmp_path), 5, [np.ones(1)], {}, keep=keep)
  assert checkpoint.list_rounds(str(tmp_path)) == expected
  assert len(os.listdir(tmp_path)) == 2 * len(expected)


def test_keep_orders_rounds_numerically(tmp_path):
  for r in (9, 10, 100):
    checkpoint.save(str(tmp_path), r, [np.ones(1)], {}, keep=10)
  checkpoint.save(str(tmp_path), 11, [np.ones(1)], {}, keep=2)
  assert checkpoint.list_rounds(str(tmp_path)) == [11, 100]


def test_remove_deletes_both_files_and_tolerates_missing_ones(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(1)], {}, keep=5)
  checkpoint.save(str(tmp_path), 2, [np.ones(1)], {}, keep=5)
  checkpoint.remove(str(tmp_path), 1)
  assert sorted(os.listdir(tmp_path)) == ["ckpt_000002.json", "ckpt_000002.npz"]
  checkpoint.remove(str(tmp_path), 1)  # nothing there
  os.remove(checkpoint.paths(str(tmp_path), 2)[0])
  checkpoint.remove(str(tmp_path), 2)  # only the .npz left
  assert os.listdir(tmp_path) == []


def test_remove_all_deletes_checkpoints_and_temporary_files_only(tmp_path):
  checkpoint.save(str(tmp_path), 1, [np.ones(1)], {}, keep=5)
  checkpoint.save(str(tmp_path), 2, [np.ones(1)], {}, keep=5)
  (tmp_path / "ckpt_000003.npz.999.tmp").write_bytes(b"left over")
  (tmp_path / "metrics.csv").write_text("round\n")
  checkpoint.remove_all(str(tmp_path))
  assert os.listdir(tmp_path) == ["metrics.csv"]
  checkpoint.remove_all(str(tmp_path))
  checkpoint.remove_all(str(tmp_path / "missing"))


def test_remove_all_tolerates_a_file_vanishing(tmp_path, monkeypatch):
  checkpoint.save(str(tmp_path), 1, [np.ones(1)], {})
  real_remove = os.remove
  calls = []

  def remove(path):
    calls.append(path)
    real_remove(path)
    if len(calls) == 1:
      raise FileNotFoundError(path)
  monkeypatch.setattr(os, "remove", remove)
  checkpoint.remove_all(str(tmp_path))
  assert len(calls) == 2 and os.listdir(tmp_path) == []


# --- modes and atomic writes ---------------------------------------------------------------


def test_modes_whatever_the_umask(tmp_path):
  directory = tmp_path / "a" / "b"
  old = os.umask(0o022)
  try:
    checkpoint.save(str(directory), 1, [np.ones(1)], {"secret": "k"})
  finally:
    os.umask(old)
  assert _mode(directory) == 0o700
  assert _mode(tmp_path / "a") == 0o755  # only the checkpoint directory is tightened
  for name in os.listdir(directory):
    assert _mode(directory / name) == 0o600


def test_atomic_write_leaves_no_temporary_file_and_overwrites(tmp_path):
  path = str(tmp_path / "f.bin")
  checkpoint._atomic_write(path, lambda f: f.write(b"one"), "wb")
  checkpoint._atomic_write(path, lambda f: f.write(b"two"), "wb")
  assert open(path, "rb").read() == b"two"
  assert os.listdir(tmp_path) == ["f.bin"]
  assert _mode(path) == 0o600
  checkpoint._atomic_write(path, lambda f: f.write("text"), "w")
  assert open(path).read() == "text"


def test_atomic_write_replaces_a_longer_stale_temporary_file(tmp_path):
  path = str(tmp_path / "f")
  stale = f"{path}.{os.getpid()}.tmp"
  with open(stale, "wb") as f:
    f.write(b"a much longer stale content")
  os.chmod(stale, 0o644)
  checkpoint._atomic_write(path, lambda f: f.write(b"new"), "wb")
  assert open(path, "rb").read() == b"new"
  assert _mode(path) == 0o600
  assert os.listdir(tmp_path) == ["f"]


def test_a_failed_write_removes_its_temporary_file_and_keeps_the_old_file(tmp_path):
  path = str(tmp_path / "f")
  checkpoint._atomic_write(path, lambda f: f.write(b"old"), "wb")

  def fail(f):
    f.write(b"partial")
    raise KeyboardInterrupt
  with pytest.raises(KeyboardInterrupt):
    checkpoint._atomic_write(path, fail, "wb")
  assert os.listdir(tmp_path) == ["f"]
  assert open(path, "rb").read() == b"old"


def test_a_failed_write_whose_temporary_file_cannot_be_made_reraises(tmp_path):
  path = str(tmp_path / "missing_dir" / "f")
  with pytest.raises(FileNotFoundError):
    checkpoint._atomic_write(path, lambda f: f.write(b"x"), "wb")


def test_atomic_write_syncs_before_renaming(tmp_path, monkeypatch):
  events = []
  real_fsync, real_replace = os.fsync, os.replace
  monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
  monkeypatch.setattr(os, "replace",
                      lambda a, b: (events.append(("replace", a, b)), real_replace(a, b))[1])
  path = str(tmp_path / "f")
  checkpoint._atomic_write(path, lambda f: f.write(b"x"), "wb")
  assert events == ["fsync", ("replace", f"{path}.{os.getpid()}.tmp", path)]


def test_save_writes_the_npz_before_the_json_and_syncs_the_directory(tmp_path, monkeypatch):
  replaced = []
  real_replace = os.replace
  monkeypatch.setattr(os, "replace",
                      lambda a, b: (replaced.append(os.path.basename(b)), real_replace(a, b))[1])
  synced = []
  real_fsync_dir = checkpoint._fsync_dir
  monkeypatch.setattr(checkpoint, "_fsync_dir",
                      lambda d: (synced.append(d), real_fsync_dir(d))[1])
  checkpoint.save(str(tmp_path), 1, [np.ones(1)], {})
  assert replaced == ["ckpt_000001.npz", "ckpt_000001.json"]
  assert synced == [str(tmp_path)]


def test_a_failed_json_write_leaves_no_complete_checkpoint(tmp_path, monkeypatch):
  real_dump = json.dump

  def dump(obj, f, **kw):
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(json, "dump", dump)
  with pytest.raises(OutputDirError) as info:
    checkpoint.save(str(tmp_path), 1, [np.ones(1)], {})
  monkeypatch.setattr(json, "dump", real_dump)
  assert checkpoint.list_rounds(str(tmp_path)) == []
  assert not any(n.endswith(".tmp") for n in os.listdir(tmp_path))
  base = str(tmp_path / "ckpt_000001")
  assert str(info.value) == (
      f"cannot write checkpoint {base}.npz/.json: No space left on device. Make {tmp_path} "
      "writable (and check free disk space), or choose another --output_dir.")
  assert isinstance(info.value.__cause__, OSError)


def test_unwritable_directory_is_output_dir_error(tmp_path):
  blocker = tmp_path / "file"
  blocker.write_text("x")
  with pytest.raises(OutputDirError) as info:
    checkpoint.save(str(blocker / "ck"), 1, [np.ones(1)], {})
  assert str(info.value).startswith(f"cannot write checkpoint {blocker}/ck/ckpt_000001.npz/.json: ")
  assert "choose another --output_dir" in str(info.value)


def test_an_oserror_without_strerror_is_named(tmp_path, monkeypatch):
  def dump(obj, f, **kw):
    raise OSError("disk gone")
  monkeypatch.setattr(json, "dump", dump)
  with pytest.raises(OutputDirError, match=r"ckpt_000001.npz/.json: disk gone\. Make "):
    checkpoint.save(str(tmp_path), 1, [np.ones(1)], {})


def test_fsync_dir_tolerates_errors_and_closes(tmp_path, monkeypatch):
  checkpoint._fsync_dir(str(tmp_path / "missing"))  # cannot open: ignored
  closed = []
  real_close = os.close
  monkeypatch.setattr(os, "close", lambda fd: (closed.append(fd), real_close(fd))[1])

  def fsync(fd):
    raise OSError(22, "Invalid argument")
  monkeypatch.setattr(os, "fsync", fsync)
  checkpoint._fsync_dir(str(tmp_path))
  assert len(closed) == 1


def test_files_and_directory_are_created_owner_only_from_the_start(tmp_path, monkeypatch):
  # Not only tightened afterwards: with the later chmod/fchmod doing nothing, a new
  # checkpoint file and directory are still owner-only (no window in which they are not).
  monkeypatch.setattr(os, "fchmod", lambda fd, mode: None)
  monkeypatch.setattr(os, "chmod", lambda path, mode: None)
  directory = tmp_path / "ck"
  old = os.umask(0)
  try:
    checkpoint.save(str(directory), 1, [np.ones(1)], {"secret": "k"})
  finally:
    os.umask(old)
  assert _mode(directory) == 0o700
  for name in os.listdir(directory):
    assert _mode(directory / name) == 0o600, name


def test_a_signal_inside_the_npz_write_leaves_no_file_and_no_exit_noise(tmp_path, monkeypatch):
  """Issue 50: SIGTERM inside ``np.savez`` left numpy's zip writer open on the closed file;
  at exit its clean-up printed "Exception ignored … seek of closed file" after the run's line."""
  import gc  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  real_write_array = np.lib.format.write_array
  calls = []

  def interrupted_write_array(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # the second leaf: the zip holds one entry and an open writer
      raise KeyboardInterrupt
    return real_write_array(*args, **kwargs)

  unraisable = []
  monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
  monkeypatch.setattr(np.lib.format, "write_array", interrupted_write_array)
  with pytest.raises(KeyboardInterrupt):
    checkpoint.save(str(tmp_path), 2, [np.ones(3), np.zeros(2)], {})
  monkeypatch.setattr(np.lib.format, "write_array", real_write_array)
  gc.collect()
  assert unraisable == [], [u.exc_value for u in unraisable]
  assert os.listdir(tmp_path) == []  # no checkpoint, no temporary file
  checkpoint.save(str(tmp_path), 2, [np.ones(3), np.zeros(2)], {})
  assert [a.tolist() for a in checkpoint.load(str(tmp_path), 2, [np.ones(3), np.zeros(2)])[0]
          ] == [[1.0, 1.0, 1.0], [0.0, 0.0]]
