"""Record-level Poisson DP-SGD inside TFF client computations (rPDP-FL).

The names below load their module (and TensorFlow) on first use (PEP 562), so
``tff_idp.rpdp.defaults`` can be read by a command line before TensorFlow loads.
"""
import importlib as _importlib

_EXPORTS = {
    "build_local_dp_sgd": "tff_idp.rpdp.dp_sgd",
    "clipped_gradient_sum": "tff_idp.rpdp.dp_sgd",
    "poisson_record_mask": "tff_idp.rpdp.dp_sgd",
    "build_record_dp_client_work": "tff_idp.rpdp.client_work",
    "build_rpdp_fedavg_process": "tff_idp.rpdp.client_work",
    "record_dataset": "tff_idp.rpdp.client_work",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
  module = _EXPORTS.get(name)
  if module is None:
    raise AttributeError(f"module 'tff_idp.rpdp' has no attribute {name!r}")
  return getattr(_importlib.import_module(module), name)
