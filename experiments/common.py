"""Moved to :mod:`tff_idp.training.idp_fedavg_runs` (library code); this name stays
importable for existing scripts and the experiment modules."""
import sys

from tff_idp.training import idp_fedavg_runs as _runs

sys.modules[__name__] = _runs
