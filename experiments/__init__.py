"""absl entry modules: one per experiment family.

Importing this package silences TensorFlow's log lines before any entry
module imports TensorFlow (``tff_idp.console``); ``--verbose`` keeps them.
"""
from tff_idp import console as _console

_console.quiet_tensorflow()
