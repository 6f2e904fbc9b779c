"""IDP-FedAvg's run template for the experiment modules, with the audit plugged in.

Everything of :mod:`tff_idp.idp_fedavg.runs` is available here. :func:`run_all`,
:func:`validate` and :func:`format_table` add the audit plug-in that a
``TrainingConfig`` asks for (``audit_canaries`` > 0, or a validity control),
so that the family's code never imports :mod:`tff_idp.audit`.
"""
from typing import Optional

from tff_idp.audit import client_audit
from tff_idp.audit import controls
from tff_idp.idp_fedavg import runs as _runs
from tff_idp.idp_fedavg.runs import *  # noqa: F401,F403  pylint: disable=wildcard-import


def run_all(config: _runs.TrainingConfig, *args,
            miscalibration: Optional[controls.Miscalibration] = None, **kwargs) -> list[dict]:
  """:func:`tff_idp.idp_fedavg.runs.run_all` with the audit plug-in of ``config``."""
  return _runs.run_all(config, *args,
                       plugins=client_audit.plugins_for(config, miscalibration), **kwargs)


def validate(config: _runs.TrainingConfig, num_clients: int) -> None:
  """:func:`tff_idp.idp_fedavg.runs.validate` with the audit plug-in of ``config``."""
  _runs.validate(config, num_clients, client_audit.plugins_for(config))


def format_table(config: _runs.TrainingConfig, results: list[dict]) -> str:
  """:func:`tff_idp.idp_fedavg.runs.format_table` with the audit's table and labels."""
  # The audit's table and labels come from the rows alone: no audit code runs
  # for a run without canaries or controls.
  audited = any(r.get("audit") or r.get("broken_control") for r in results)
  plugins = [client_audit.ClientCanaryAudit.for_config(config)] if audited else []
  return _runs.format_table(config, results, plugins)
