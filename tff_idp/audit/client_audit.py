"""The client-level canary audit as a plug-in of IDP-FedAvg's run template.

:func:`tff_idp.idp_fedavg.runs.run_all` knows only the engine's
:class:`~tff_idp.engine.plugins.RunPlugin` hooks; this module wires the
audit's parts into them:

* the client work gains canary clients (:func:`client_canaries.build_canary_client_work`);
* the driver's sampler is decorated with :class:`client_canaries.CanarySampler`
  and its client inputs with the canaries' data;
* after a run, the canaries' cosines are measured and written to
  ``audit.json``; after all seeds of a run specification, the per-group
  estimates are pooled (:func:`report.audit_groups`) into the row's ``audit``;
* a :class:`controls.Miscalibration` (a validity control) changes the noise
  and rates the mechanism uses while the ledger keeps the calibrated ones.
"""
from __future__ import annotations

import json
import os
import zlib
from typing import Any, Callable, Optional, Sequence

import numpy as np

from tff_idp.engine import report as engine_report
from tff_idp.audit import client_canaries
from tff_idp.audit import controls
from tff_idp.audit import report
from tff_idp.engine.plugins import RunPlugin


def group_clip_scales(plan: Any) -> Optional[list[float]]:
  """SCALE's clip scale s_p per group (None without SCALE)."""
  if plan.client_clip_scales is None:
    return None
  scales = []
  for p in range(len(plan.group_sizes)):
    members = plan.client_clip_scales[plan.client_groups == p]
    scales.append(float(members[0]) if members.size else 1.0)
  return scales


class ClientCanaryAudit(RunPlugin):
  """Canary clients in every DP run and seed, pooled per run specification.

  ``num_canaries`` canary clients per DP run (0: only the ``miscalibration``
  control, if any); ``audit_seed`` is the auditor's seed; ``group_names``
  and ``delta`` label and bound the per-group estimates.
  """

  def __init__(self, num_canaries: int, audit_seed: int, group_names: Sequence[str],
               delta: float, miscalibration: Optional[controls.Miscalibration] = None):
    self.num_canaries = int(num_canaries)
    self.audit_seed = int(audit_seed)
    self.group_names = list(group_names)
    self.delta = float(delta)
    self.miscalibration = miscalibration
    self._runs: list[tuple[np.ndarray, client_canaries.CanaryPlan]] = []
    self._bounds: Optional[list] = None
    self._canary_plan: Optional[client_canaries.CanaryPlan] = None

  @classmethod
  def for_config(cls, config: Any, miscalibration: Optional[controls.Miscalibration] = None
                 ) -> "ClientCanaryAudit":
    """The audit a ``TrainingConfig`` asks for (``audit_canaries``, ``audit_seed``)."""
    return cls(config.audit_canaries, config.audit_seed,
               [f"eps{b:g}" for b in config.budgets], config.delta, miscalibration)

  def _audits(self, plan: Any) -> bool:
    return self.num_canaries > 0 and plan.noise_multiplier is not None

  def check(self, plan: Any) -> None:
    if self._audits(plan):
      client_canaries.make_canary_plan(self.num_canaries, plan.group_rates,
                                       plan.group_sizes)  # raises with advice

  def mechanism(self, plan, noise_multiplier, client_rates):
    m = self.miscalibration
    if m is None:
      return noise_multiplier, client_rates, {}
    if plan.noise_multiplier is None:
      raise ValueError("a broken control needs a DP run spec, not nonprivate.")
    return (noise_multiplier * m.noise_scale,
            m.client_rates(client_rates, plan.client_groups),
            {"broken_control": dict(m.to_dict(), label=controls.BROKEN_LABEL)})

  def client_work_wrapper(self, plan: Any) -> Optional[Callable[[Any], Any]]:
    return client_canaries.build_canary_client_work if self._audits(plan) else None

  def fingerprint(self) -> dict:
    if self.miscalibration is None:
      return {}
    return {"broken_control": self.miscalibration.to_dict()}

  def run_seed(self, run_name: str, seed: int) -> int:
    """The canaries' seed of one (run spec, seed): independent canaries per run."""
    return zlib.crc32(f"audit/{self.audit_seed}/{run_name}/{seed}".encode())

  def attach(self, driver, plan, run_name, seed) -> None:
    self._canary_plan = None
    if not self._audits(plan):
      return
    canary_plan = client_canaries.make_canary_plan(
        self.num_canaries, plan.group_rates, plan.group_sizes, group_clip_scales(plan),
        self.run_seed(run_name, seed))
    m = self.miscalibration
    factors = (m.group_factors(len(plan.group_rates))
               if m is not None and m.rate_factors else None)
    driver.sampler = client_canaries.CanarySampler(driver.sampler, canary_plan, factors)
    driver.client_input_fn = client_canaries.with_canary_inputs(
        driver.client_input_fn, canary_plan, driver.padding_input_fn)
    driver.padding_input_fn = client_canaries.with_canary_padding(driver.padding_input_fn)
    self._canary_plan = canary_plan

  def after_run(self, process, final_state, run_dir, plan) -> None:
    canary_plan = self._canary_plan
    if canary_plan is None:
      return
    cosines = client_canaries.canary_cosines_of_run(process, final_state, canary_plan)
    self._runs.append((cosines, canary_plan))
    self._bounds = list(plan.ledger.spent())
    with open(os.path.join(run_dir, "audit.json"), "w") as f:
      json.dump({"audit_seed": canary_plan.audit_seed, "groups": canary_plan.groups.tolist(),
                 "inserted": canary_plan.inserted.tolist(),
                 "rates": canary_plan.rates.tolist(), "cosines": cosines.tolist()}, f)

  def row(self) -> dict:
    runs, bounds = self._runs, self._bounds
    self._runs, self._bounds = [], None
    if not runs:
      return {}
    return {"audit": report.audit_groups(
        [c for c, _ in runs], [p.groups for _, p in runs], [p.inserted for _, p in runs],
        bounds, self.group_names, self.delta, seed=self.audit_seed)}

  def table_lines(self, config, results) -> list[str]:
    if not any(r.get("audit") for r in results):
      return []
    return ["", "**Empirical privacy audit** (canary clients, "
            f"--audit_canaries={self.num_canaries} per run and seed, pooled over "
            f"{engine_report.count(len(config.seeds), 'seed')}):", "", report.format_audit_table(results)]

  def header_lines(self, results) -> list[str]:
    broken = [r["run"] for r in results if r.get("broken_control")]
    return [f"**{controls.BROKEN_LABEL}**: {', '.join(broken)}", ""] if broken else []

  def plot(self, results, output_dir) -> None:
    if any(r.get("audit") for r in results):
      report.plot_audit(results, os.path.join(output_dir, "audit.png"))


def plugins_for(config: Any, miscalibration: Optional[controls.Miscalibration] = None
                ) -> list[RunPlugin]:
  """The audit plug-in a ``TrainingConfig`` asks for (``audit_canaries`` > 0), if any."""
  if not config.audit_canaries and miscalibration is None:
    return []
  return [ClientCanaryAudit.for_config(config, miscalibration)]
