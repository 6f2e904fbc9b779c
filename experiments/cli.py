"""Moved to :mod:`tff_idp.cli` (shared by ``experiments``, ``datasets.build`` and
``tff_idp.idp_fedavg.calibrate``); this name stays importable."""
import sys

from tff_idp import cli as _cli

sys.modules[__name__] = _cli
