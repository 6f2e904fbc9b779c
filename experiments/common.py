"""Moved to :mod:`tff_idp.idp_fedavg.runs` (library code); this name stays
importable for existing scripts and the experiment modules."""
import sys

from tff_idp.idp_fedavg import runs as _runs

sys.modules[__name__] = _runs
