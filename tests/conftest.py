"""Shared fixtures. TFF-executing tests must request ``tff_runtime``.

The fixture owns TFF's worker process for the whole session, so no test ever
falls back to TFF's default context (whose worker_binary would be orphaned).
"""
import pytest


@pytest.fixture(scope="session")
def tff_runtime():
  from tff_idp import runtime  # pylint: disable=g-import-not-at-top
  rt = runtime.ExecutionRuntime(install_signal_handlers=False)
  rt.start()
  yield rt
  rt.close()
