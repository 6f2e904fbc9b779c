"""tff_idp: TFF simulations of federated learning with individualized differential privacy.

Importing the package imports nothing heavy. It quietens TensorFlow's log
lines where the user has not set them (:func:`tff_idp.console.quiet_tensorflow`
with ``library=True``; ``TFF_IDP_VERBOSE=1`` keeps them) and registers one
exit hook (:mod:`tff_idp.execution.tff_teardown`).
"""
from tff_idp import console as _console
from tff_idp.execution import tff_teardown  # noqa: F401  (registers the exit hook)

_console.quiet_tensorflow(library=True)
