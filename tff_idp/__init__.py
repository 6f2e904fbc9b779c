"""tff_idp: TFF simulations of federated learning with individualized differential privacy.

Importing the package registers one exit hook (:mod:`tff_idp.tff_teardown`)
and imports nothing heavy.
"""
from tff_idp import tff_teardown  # noqa: F401  (registers the exit hook)
