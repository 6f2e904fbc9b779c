"""train_model's program state as private as a checkpoint (issue 48 B).

TFF's ``FileProgramStateManager`` writes 0755 folders and 0644 files, and the
state holds the sampler's secret and the clients' arrays in clear.
``PrivateFileProgramStateManager`` keeps every folder 0700 and file 0600,
whatever the umask, and stays loadable (by itself and by TFF's manager).
"""
import asyncio
import collections
import errno
import os
import stat

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tff_idp
from tff_idp.engine import program_state
from tff_idp.errors import OutputDirError
from tff_idp.errors import ToolkitValueError

FEATURES, CLASSES = 3, 2


def _mode(path):
  return stat.S_IMODE(os.lstat(path).st_mode)


def _modes(root):
  """{path relative to root: mode} of root and everything below it."""
  out = {".": _mode(root)}
  for folder, dirs, files in os.walk(root):
    for name in dirs + files:
      path = os.path.join(folder, name)
      out[os.path.relpath(path, root)] = _mode(path)
  return out


def _assert_private(root):
  modes = _modes(root)
  assert len(modes) > 3, modes   # a SavedModel: folders and files
  for path, mode in modes.items():
    want = 0o700 if os.path.isdir(os.path.join(root, path)) else 0o600
    assert mode == want, (path, oct(mode))


@pytest.fixture(name="open_umask")
def open_umask_fixture():
  """The usual 022 umask, under which TFF's own manager writes world-readable state."""
  old = os.umask(0o022)
  try:
    yield
  finally:
    os.umask(old)


STATE = collections.OrderedDict(secret=np.array([7, 11], np.int64),
                                arrays=np.arange(6, dtype=np.float32).reshape(2, 3))


def test_saved_state_is_owner_only_and_loads(tmp_path, open_umask):
  """Bug caught: a saved version left at TFF's 0755/0644 (or the root left open)."""
  del open_umask
  stock_root, root = tmp_path / "stock", tmp_path / "private"
  asyncio.run(tff.program.FileProgramStateManager(str(stock_root)).save(STATE, 1))
  assert _mode(stock_root) & 0o077 and any(m & 0o044 for m in _modes(stock_root).values())

  manager = tff_idp.PrivateFileProgramStateManager(str(root))
  assert _mode(root) == 0o700   # before anything is written into it
  for version in (1, 2):
    asyncio.run(manager.save(STATE, version))
  _assert_private(str(root))
  assert asyncio.run(manager.get_versions()) == [1, 2]
  for reader in (manager, tff.program.FileProgramStateManager(str(root))):
    loaded = asyncio.run(reader.load(2, STATE))
    np.testing.assert_array_equal(loaded["secret"], STATE["secret"])
    np.testing.assert_array_equal(loaded["arrays"], STATE["arrays"])


def test_state_a_stock_manager_saved_is_tightened(tmp_path, open_umask):
  del open_umask
  root = tmp_path / "state"
  asyncio.run(tff.program.FileProgramStateManager(str(root)).save(STATE, 1))
  (root / "notes.txt").write_text("not program state")
  os.chmod(root / "notes.txt", 0o644)
  manager = program_state.PrivateFileProgramStateManager(str(root))
  _assert_private(str(root / "program_state_1"))
  assert _mode(root) == 0o700
  assert _mode(root / "notes.txt") == 0o644   # only the manager's own versions are touched
  # The root opened up again after construction is closed before the next save.
  os.chmod(root, 0o755)
  asyncio.run(manager.save(STATE, 2))
  assert _mode(root) == 0o700
  _assert_private(str(root / "program_state_2"))


@pytest.mark.parametrize("root_dir", ["", "gs://bucket/state", None])
def test_roots_where_modes_do_not_apply_are_refused(root_dir):
  with pytest.raises(ToolkitValueError, match="root_dir"):
    tff_idp.PrivateFileProgramStateManager(root_dir)


def _model_fn():
  keras = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
                               tf.keras.layers.Dense(CLASSES)])
  spec = collections.OrderedDict(x=tf.TensorSpec([None, FEATURES], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  return tff.learning.models.from_keras_model(
      keras, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=spec)


def tiny_rpdp_process_and_source():
  """rPDP-FL's TFF process and a 3-client record-level data source (3 rounds at λ = 1)."""
  rng = np.random.default_rng(0)
  clients = [(rng.normal(size=(6, FEATURES)).astype(np.float32),
              rng.integers(0, CLASSES, 6).astype(np.int32)) for _ in range(3)]
  source = tff_idp.RecordDpDataSource(clients, [np.full(6, 0.5)] * 3, client_rate=1.0,
                                      rounds=3)
  process = tff_idp.build_rpdp_fedavg_process(
      _model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=1,
      noise_multiplier=1.0, clip_norm=1.0)
  return process, source


def test_train_model_saves_private_state_and_resumes_from_it(tmp_path, tff_runtime,
                                                             open_umask):
  """rPDP-FL under train_model: 2 rounds, every file 0600; then a rerun to 3 rounds resumes.

  A rerun that could not load the state would start over and fail to save
  version 1 again (TFF refuses an existing version), so reaching version 3
  shows the round trip.
  """
  del open_umask
  process, source = tiny_rpdp_process_and_source()
  root = str(tmp_path / "state")

  def train(rounds):
    manager = tff_idp.PrivateFileProgramStateManager(root)
    asyncio.run(tff.learning.programs.train_model(
        train_process=process, train_data_source=source,
        train_per_round_clients=source.clients_per_round, train_total_rounds=rounds,
        program_state_manager=manager,
        model_output_manager=tff.program.MemoryReleaseManager(),
        evaluation_manager=None, evaluation_periodicity=1))
    return manager

  with tff_runtime.program_context():
    train(2)
    _assert_private(root)
    manager = train(3)
    _assert_private(root)

    trained = tff_idp.load_trained_state(manager, process, source)
  assert trained.version == 3 and trained.round_number == 3


@pytest.mark.parametrize("kwargs", [
    {},
    dict(prefix="ckpt_", keep_total=3, keep_first=False, keep_every_k=2),
], ids=["defaults", "given"])
def test_versions_kept_as_tffs_manager_keeps_them(tmp_path, kwargs):
  """Same arguments, same defaults and same layout as TFF's manager: after 7 saves the
  same versions are left, under the same folder names (the retention is TFF's own)."""
  stock = tff.program.FileProgramStateManager(str(tmp_path / "stock"), **kwargs)
  private = program_state.PrivateFileProgramStateManager(str(tmp_path / "private"),
                                                         **kwargs)
  for version in range(1, 8):
    asyncio.run(stock.save(STATE, version))
    asyncio.run(private.save(STATE, version))
  kept = asyncio.run(stock.get_versions())
  assert kept == ([1, 4, 5, 6, 7] if not kwargs else [4, 6, 7])
  assert asyncio.run(private.get_versions()) == kept
  assert sorted(os.listdir(tmp_path / "private")) == sorted(os.listdir(tmp_path / "stock"))


def test_the_root_is_never_open_not_even_before_its_first_chmod(tmp_path, open_umask,
                                                                monkeypatch):
  """The root is created 0700, not created open and closed afterwards (another user could
  enter it in between and keep a handle on what is written there)."""
  del open_umask
  root = tmp_path / "a" / "state"
  seen = []
  chmod = os.chmod

  def spy(path, mode, *args, **kwargs):
    if os.fspath(path) == str(root):
      seen.append(_mode(root))
    return chmod(path, mode, *args, **kwargs)

  monkeypatch.setattr(os, "chmod", spy)
  program_state.PrivateFileProgramStateManager(str(root))
  assert seen and seen[0] == 0o700


def test_restrict_tree_on_a_file_and_past_links(tmp_path, open_umask):
  """A file is made 0600; a link (here to a folder, listed before the files) is skipped, and
  the files after it are still restricted; what a link points to is left alone."""
  del open_umask
  lone = tmp_path / "lone"
  lone.write_text("secret")
  os.chmod(lone, 0o644)
  program_state.restrict_tree(str(lone))
  assert _mode(lone) == 0o600

  outside = tmp_path / "outside"
  outside.mkdir(mode=0o755)
  os.chmod(outside, 0o755)
  top = tmp_path / "top"
  top.mkdir()
  (top / "link").symlink_to(outside, target_is_directory=True)
  for name in ("a", "b"):
    (top / name).write_text(name)
    os.chmod(top / name, 0o644)
  program_state.restrict_tree(str(top))
  assert (_mode(top), _mode(top / "a"), _mode(top / "b")) == (0o700, 0o600, 0o600)
  assert _mode(outside) == 0o755
  program_state.restrict_tree(str(top / "link"))   # a link itself: left alone
  assert _mode(outside) == 0o755


def _refuse_chmod(monkeypatch):
  def refuse(path, mode, *args, **kwargs):
    raise PermissionError(errno.EPERM, "Operation not permitted", os.fspath(path))
  monkeypatch.setattr(os, "chmod", refuse)


def test_modes_that_cannot_be_set_are_refused_with_the_reason(tmp_path, monkeypatch):
  """A mode the OS refuses to set is an OutputDirError naming the folder and the OS's reason
  (never left open silently); a root that cannot be created names why."""
  blocker = tmp_path / "file"
  blocker.write_text("")
  with pytest.raises(OutputDirError,
                     match=r"cannot create the program state folder .*file/state: "
                           r"Not a directory\. Choose a writable root_dir\."):
    program_state.PrivateFileProgramStateManager(str(blocker / "state"))
  (tmp_path / "tree").mkdir()
  (tmp_path / "root").mkdir()
  _refuse_chmod(monkeypatch)
  with pytest.raises(OutputDirError,
                     match=r"in .*tree private \(0700 folders, 0600 files\): Operation not "
                           r"permitted\. Use a root_dir of your own\."):
    program_state.restrict_tree(str(tmp_path / "tree"))
  with pytest.raises(OutputDirError,
                     match=r"folder .*root private \(0700\): Operation not permitted\. Use a "
                           r"root_dir of your own\."):
    program_state.PrivateFileProgramStateManager(str(tmp_path / "root"))
