"""Record-level Poisson DP-SGD inside TFF client computations (rPDP-FL).

The names below load their module (and TensorFlow) on first use (PEP 562), so
``tff_idp.rpdp.defaults`` can be read by a command line before TensorFlow loads.
"""
from tff_idp import lazy_exports as _lazy_exports

_EXPORTS = {
    "build_local_dp_sgd": "tff_idp.rpdp.dp_sgd",
    "clipped_gradient_sum": "tff_idp.rpdp.dp_sgd",
    "poisson_record_mask": "tff_idp.rpdp.dp_sgd",
    "build_record_dp_client_work": "tff_idp.rpdp.client_work",
    "build_rpdp_fedavg_process": "tff_idp.rpdp.client_work",
    "record_dataset": "tff_idp.rpdp.client_work",
}
__all__ = sorted(_EXPORTS)


__getattr__ = _lazy_exports.getattr_for(__name__, _EXPORTS)
