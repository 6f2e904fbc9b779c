"""tff_idp: TFF simulations of federated learning with individualized differential privacy.

The public API (docs/api.md) is the names below, loaded lazily on first use:
``import tff_idp`` imports nothing heavy, and ``tff_idp.accounting`` still
imports no TensorFlow. Importing the package quietens TensorFlow's log lines
where the user has not set them (:func:`tff_idp.console.quiet_tensorflow`
with ``library=True``; ``TFF_IDP_VERBOSE=1`` keeps them) and registers one
exit hook (:mod:`tff_idp.execution.tff_teardown`).
"""
# First: a command line's Ctrl-C/SIGTERM while it imports ends in one line (issue 50).
from tff_idp import startup_signals as _startup_signals

_startup_signals.install_for_command_line()

from tff_idp import console as _console  # noqa: E402  pylint: disable=wrong-import-position
from tff_idp import lazy_exports as _lazy_exports  # noqa: E402  pylint: disable=wrong-import-position
from tff_idp.execution import tff_teardown  # noqa: F401,E402  (registers the exit hook)

_console.quiet_tensorflow(library=True)

# public name -> module that defines it (docs/api.md lists them by family)
_PUBLIC = {
    # runners: one call on any split object
    "run_idp_fedavg": "tff_idp.runners",
    "run_rpdp": "tff_idp.runners",
    "run_ino_sgd": "tff_idp.runners",
    "run_apes": "tff_idp.runners",
    # IDP-FedAvg
    "build_idp_fedavg_process": "tff_idp.idp_fedavg.process",
    "build_idp_fedavg_driver_process": "tff_idp.idp_fedavg.process",
    "scaled_client_data": "tff_idp.idp_fedavg.process",
    "IdpFedAvgDataSource": "tff_idp.idp_fedavg.program_data",
    "AdaptiveClipDPMeanFactory": "tff_idp.idp_fedavg.aggregators",
    "get_group_sampling_rates": "tff_idp.accounting.client.sample",
    "get_noise": "tff_idp.accounting.client.sample",
    "get_sample_rate": "tff_idp.accounting.client.sample",
    "get_group_clip_scales": "tff_idp.accounting.client.scale",
    "GroupPrivacyLedger": "tff_idp.accounting.client.ledger",
    # rPDP-FL
    "build_rpdp_fedavg_process": "tff_idp.rpdp.client_work",
    "build_rpdp_fedavg_driver_process": "tff_idp.rpdp.client_work",
    "record_dataset": "tff_idp.rpdp.records",
    "RecordDpDataSource": "tff_idp.rpdp.program_data",
    "build_record_dp_client_work": "tff_idp.rpdp.client_work",
    "build_local_dp_sgd": "tff_idp.rpdp.dp_sgd",
    "TwoStageParams": "tff_idp.accounting.record.rdp_two_stage",
    "calibrate_record_rates": "tff_idp.accounting.record.calibration",
    "make_record_plan": "tff_idp.accounting.record.plan",
    "RecordBudgetAccountant": "tff_idp.accounting.record.ledger",
    # INO-SGD
    "ino_example_weight_fn": "tff_idp.ino_sgd.importance",
    "plan_owners": "tff_idp.accounting.owner.plan",
    # APES / S-APES
    "build_apes_process": "tff_idp.apes.process",
    "build_ldp_client_work": "tff_idp.apes.client_work",
    "ShuffledPersonalizedMeanFactory": "tff_idp.apes.aggregator",
    "make_client_input": "tff_idp.apes.client_work",
    "ApesDataSource": "tff_idp.apes.program_data",
    "ApesLedger": "tff_idp.accounting.shuffle.ledger",
    # execution and the engine's plug-in hooks
    "ExecutionRuntime": "tff_idp.execution.runtime",
    "execution_context": "tff_idp.execution.runtime",
    "RunPlugin": "tff_idp.engine.plugins",
    # train_model: program state kept private, training metrics fit for a release
    "PrivateFileProgramStateManager": "tff_idp.engine.program_state",
    "ReleaseMetricsManager": "tff_idp.engine.release_metrics",
    "load_trained_state": "tff_idp.engine.trained_state",
    "TrainedState": "tff_idp.engine.trained_state",
    # the one ledger interface and the DpEvents this toolkit adds
    "PrivacyLedger": "tff_idp.accounting.ledger",
    "TwoStageSampledDpEvent": "tff_idp.accounting.events",
    "ShuffledLdpDpEvent": "tff_idp.accounting.events",
}

__all__ = sorted(_PUBLIC)


__getattr__ = _lazy_exports.getattr_for(__name__, _PUBLIC)


def __dir__() -> list:
  return sorted(set(globals()) | set(_PUBLIC))
