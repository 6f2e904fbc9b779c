"""Checkpoints hold the run's privacy secret: owner-only files and directory, whatever the umask."""
import os
import stat

import numpy as np

from tff_idp.engine import checkpoint


def _mode(path):
  return stat.S_IMODE(os.stat(path).st_mode)


def test_checkpoint_files_are_0600_and_their_directory_0700(tmp_path):
  directory = tmp_path / "run" / "checkpoints"
  old = os.umask(0)  # the most permissive umask: the modes must not come from it
  try:
    checkpoint.save(str(directory), 3, {"w": np.ones(2)}, {"secret": "k"})
    # A stale temporary file left world-readable by a crash is tightened too.
    stale = f"{checkpoint.paths(str(directory), 4)[1]}.{os.getpid()}.tmp"
    with open(stale, "w") as f:
      f.write("x")
    os.chmod(stale, 0o666)
    checkpoint.save(str(directory), 4, {"w": np.ones(2)}, {"secret": "k"})
  finally:
    os.umask(old)
  files = sorted(os.listdir(directory))
  assert files == ["ckpt_000003.json", "ckpt_000003.npz", "ckpt_000004.json",
                   "ckpt_000004.npz"], files
  for name in files:
    assert _mode(directory / name) == 0o600, name
  assert _mode(directory) == 0o700


def test_an_existing_directory_is_tightened(tmp_path):
  directory = tmp_path / "ckpts"
  directory.mkdir(mode=0o755)
  os.chmod(directory, 0o755)
  checkpoint.save(str(directory), 1, {"w": np.zeros(1)}, {})
  assert _mode(directory) == 0o700
  assert all(_mode(directory / n) == 0o600 for n in os.listdir(directory))
