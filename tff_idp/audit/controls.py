"""Deliberately broken configurations that the audit must catch (validity controls).

A :class:`Miscalibration` changes what the mechanism *does* while the ledger
keeps reporting what was calibrated: the noise multiplier actually added is
scaled by ``noise_scale``, and the sampling rate actually used for a group
(its real clients and its canaries) is multiplied by ``rate_factors[p]``.
This is a privacy leak built on purpose, to show that the audit flags a run
whose reported ε is wrong (issue: "the audit must be able to fail"). Its
outputs are labelled ``BROKEN_LABEL``; it is never a setting for real runs.
No TensorFlow here.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import numpy as np

BROKEN_LABEL = "BROKEN CONTROL (deliberate privacy leak for auditing; ε column is wrong)"


@dataclasses.dataclass(frozen=True)
class Miscalibration:
  """What a broken control changes; the ledger is left as calibrated.

  Attributes:
    name: a short label for tables (e.g. ``"noise/4"``).
    noise_scale: factor on the noise multiplier actually added (0 = no noise).
    rate_factors: group index → factor on that group's sampling rate actually
      used (capped at 1), for its real clients and its canaries alike.
  """
  name: str
  noise_scale: float = 1.0
  rate_factors: Optional[Mapping[int, float]] = None

  def __post_init__(self):
    if not (np.isfinite(self.noise_scale) and self.noise_scale >= 0):
      raise ValueError(f"noise_scale={self.noise_scale} must be finite and >= 0.")
    for p, f in (self.rate_factors or {}).items():
      if not (np.isfinite(f) and f > 0):
        raise ValueError(f"rate_factors[{p}]={f} must be finite and > 0.")

  def group_factors(self, num_groups: int) -> np.ndarray:
    """The rate factor of every group (1 where not given)."""
    factors = np.ones(num_groups)
    for p, f in (self.rate_factors or {}).items():
      if not 0 <= int(p) < num_groups:
        raise ValueError(f"rate_factors names group {p}, but there are {num_groups}.")
      factors[int(p)] = f
    return factors

  def client_rates(self, rates: np.ndarray, groups: Optional[np.ndarray]) -> np.ndarray:
    """The per-client rates actually used: each group's rates times its factor, ≤ 1."""
    if not self.rate_factors:
      return np.asarray(rates, np.float64)
    if groups is None:
      raise ValueError("rate_factors need a run with privacy groups.")
    factors = self.group_factors(int(np.max(groups)) + 1)
    return np.minimum(1.0, np.asarray(rates, np.float64) * factors[np.asarray(groups)])

  def to_dict(self) -> dict:
    return {"name": self.name, "noise_scale": self.noise_scale,
            "rate_factors": {str(k): v for k, v in (self.rate_factors or {}).items()}}


CONTROLS = {
    "noise/4": Miscalibration("noise/4", noise_scale=0.25),
    "q×8": Miscalibration("q×8 strict", rate_factors={0: 8.0}),
    "no-noise": Miscalibration("no noise", noise_scale=0.0),
}
"""The audit's broken controls (``python -m experiments.audit --controls``), by name."""
CONTROL_FLAG_NAMES = {"noise4": "noise/4", "q8": "q×8", "nonoise": "no-noise"}


def check_control_names(names) -> None:
  """Refuses a ``--controls`` name that is not one of :data:`CONTROL_FLAG_NAMES`."""
  unknown = [n for n in names if n not in CONTROL_FLAG_NAMES]
  if unknown:
    raise ValueError(f"--controls: unknown {unknown}; choose from "
                     f"{sorted(CONTROL_FLAG_NAMES)} (or leave empty).")


def plan_audit_runs(canaries: int, control_names, utility_baseline: bool
                    ) -> list[tuple[str, str, int, Optional[Miscalibration]]]:
  """(label, run spec, canaries, miscalibration) of every audit run, in table order."""
  uniform_k = canaries // 3 // 2 * 2 or 2  # the same canaries per group as the 3-group runs
  runs = [("uniform strict (100-0-0)", "100-0-0", uniform_k, None),
          ("34-43-23", "34-43-23", canaries, None)]
  for name in control_names:
    control = CONTROLS[CONTROL_FLAG_NAMES[name]]
    runs.append((f"34-43-23, BROKEN: {control.name}", "34-43-23", canaries, control))
  if utility_baseline:
    runs.append(("34-43-23, no canaries", "34-43-23", 0, None))
  return runs
