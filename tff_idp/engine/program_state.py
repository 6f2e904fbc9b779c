"""Program state kept as private as a checkpoint (issue 48 B).

``tff.learning.programs.train_model`` saves its program state through a
``tff.program.ProgramStateManager``; TFF 0.87's
``tff.program.FileProgramStateManager`` writes it as SavedModels with the
process's default modes (folders 0755, files 0644 under the usual umask).
That state holds what the toolkit's own checkpoints keep at 0600/0700
(:mod:`tff_idp.engine.checkpoint`): the data source's iterator with its
secret sampler key, in clear, and the clients' raw arrays, besides the
model and the DP aggregator's noise seed. Anyone who can read it can
remove the noise and see the data.

:class:`PrivateFileProgramStateManager` is the same manager (same layout,
same versions, loadable by the stock one) that

* makes its root folder 0700 before anything is written into it, so what
  TFF's SavedModel writer creates inside (its temporary folder, then the
  version's folder) is never reachable by another user, whatever its mode;
* then restricts every folder of the saved version to 0700 and every file
  to 0600 (:func:`restrict_tree`), so a copy of the version folder made with
  its modes stays private; and
* restricts program state a stock manager saved earlier in the same root.

It never touches the process umask (process-global: other threads would
write their files with it).
"""
from __future__ import annotations

import os
import stat
from typing import Any, Union

import tensorflow_federated as tff

from tff_idp.engine.checkpoint import SECRET_DIR_MODE
from tff_idp.engine.checkpoint import SECRET_FILE_MODE
from tff_idp.errors import OutputDirError
from tff_idp.errors import ToolkitValueError


def restrict_tree(top: str) -> None:
  """Makes ``top`` and every folder below it 0700 and every file 0600; links are left alone.

  Raises :class:`tff_idp.errors.OutputDirError` when a mode cannot be changed.
  """
  try:
    if os.path.islink(top):
      return
    if not os.path.isdir(top):
      os.chmod(top, SECRET_FILE_MODE)
      return
    os.chmod(top, SECRET_DIR_MODE)
    for folder, dirs, files in os.walk(top):
      for name in dirs + files:
        path = os.path.join(folder, name)
        if os.path.islink(path):
          continue
        mode = SECRET_DIR_MODE if stat.S_ISDIR(os.lstat(path).st_mode) else SECRET_FILE_MODE
        os.chmod(path, mode)
  except OSError as e:
    raise OutputDirError(
        f"cannot make the program state in {top} private (0700 folders, 0600 files): "
        f"{e.strerror or e}. Use a root_dir of your own.") from e


class PrivateFileProgramStateManager(tff.program.FileProgramStateManager):
  """``tff.program.FileProgramStateManager`` with 0700 folders and 0600 files (module doc).

  Arguments as TFF's manager; ``root_dir`` must be a local folder of its own
  for the program state (it is made 0700). A ``gs://``-style path is refused:
  file modes do not apply there, so keep such a store private with its own
  access control.
  """

  def __init__(self, root_dir: Union[str, os.PathLike], prefix: str = "program_state_",
               keep_total: int = 5, keep_first: bool = True, keep_every_k: int = 1):
    path = os.fspath(root_dir) if isinstance(root_dir, (str, os.PathLike)) else None
    if not path:
      raise ToolkitValueError(f"root_dir={root_dir!r}: give the path of a local folder for "
                              "the program state.")
    if "://" in path:
      raise ToolkitValueError(
          f"root_dir={path!r} is not a local folder, so 0600/0700 modes cannot keep it "
          "private: give a local path, or use tff.program.FileProgramStateManager with the "
          "store's own access control.")
    try:
      os.makedirs(path, mode=SECRET_DIR_MODE, exist_ok=True)
    except OSError as e:
      raise OutputDirError(f"cannot create the program state folder {path}: "
                           f"{e.strerror or e}. Choose a writable root_dir.") from e
    self._restrict_root(path)
    super().__init__(path, prefix=prefix, keep_total=keep_total, keep_first=keep_first,
                     keep_every_k=keep_every_k)
    for name in sorted(os.listdir(path)):  # state a stock manager saved here before
      if name.startswith(prefix):
        restrict_tree(os.path.join(path, name))

  @staticmethod
  def _restrict_root(path: str) -> None:
    try:
      os.chmod(path, SECRET_DIR_MODE)
    except OSError as e:
      raise OutputDirError(f"cannot make the program state folder {path} private (0700): "
                           f"{e.strerror or e}. Use a root_dir of your own.") from e

  async def save(self, program_state: Any, version: int) -> None:
    """Saves ``version`` as TFF does, inside the 0700 root, then makes it 0700/0600."""
    self._restrict_root(self._root_dir)  # again: the root may have been opened up since
    await super().save(program_state, version)
    saved = self._get_path_for_version(version)
    if os.path.exists(saved):
      restrict_tree(saved)
