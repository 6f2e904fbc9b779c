"""Benchmarks (``python -m benchmarks.<name>``); TensorFlow's log lines are off
unless ``--verbose`` (``tff_idp.console``)."""
from tff_idp import console as _console

_console.quiet_tensorflow()
