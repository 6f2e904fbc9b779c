"""Per-owner IDP-SGD plans for centralized training: SAMPLE or SCALE (INO-SGD App. B/C.1).

A silo's records belong to *owners* n ∈ [N], owner n with |D_n| records and
its own budget (ε_n, δ). IDP-SGD (Boenisch et al. 2023), and INO-SGD on top of
it (paper Alg. 1, Thm 3.3), meet every owner's budget in one of two ways:

* **SAMPLE**: one clip threshold C for all, noise std σ = z·C on the sum, and
  per-owner Poisson rates q_n: the smaller ε_n, the rarer owner n's records
  enter a batch. z and the q_n come from Alg. 1 of IDP-FedAvg
  (:func:`tff_idp.accounting.client.sample.get_group_sampling_rates`) with records
  in place of clients and steps in place of rounds, so that the expected
  batch Σ_n q_n |D_n| equals the requested b.
* **SCALE**: one rate q = b / Σ|D_n| for every record, one noise std z·C,
  and per-owner thresholds C_n = s_n·C ≤ C
  (:func:`tff_idp.accounting.client.scale.get_group_clip_scales`): owner n's
  effective multiplier is z / s_n. The least private owner is clipped at C.

Either way owner n's per-step mechanism is the Poisson-subsampled Gaussian
with rate q_n and multiplier z·C/C_n, composed over T steps; the INO-SGD
importance weights ρ ∈ [0, 1] applied after clipping leave this unchanged
(Thm 3.3). :func:`plan_owners` returns the plan only after recomputing every
owner's ε with a fresh dp-accounting accountant (RDP or PLD), and refuses
loudly if any owner would exceed its budget. The "Drop x%" baseline of
INO-SGD Table 3 is :func:`drop_less_private`. No TensorFlow here.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np

from tff_idp.accounting import exact
from tff_idp.accounting import strict_json
from tff_idp.accounting.client import sample
from tff_idp.accounting.client import scale
from tff_idp.accounting import validation

MECHANISMS = ("sample", "scale")


@dataclasses.dataclass(frozen=True)
class OwnerPlan:
  """Rates, thresholds and noise of IDP-SGD / INO-SGD for every owner, verified.

  ``noise_std`` = z·C is the absolute std added to the clipped sum; the sum is
  divided by ``expected_batch`` = Σ_n q_n |D_n| (INO-SGD footnote 3).
  """
  mechanism: str
  owner_names: tuple[str, ...]
  target_epsilons: tuple[float, ...]
  achieved_epsilons: tuple[float, ...]
  owner_sizes: tuple[int, ...]
  sampling_rates: tuple[float, ...]
  clip_thresholds: tuple[float, ...]
  clip_norm: float
  noise_multiplier: float
  steps: int
  delta: float
  accountant: str

  @property
  def noise_std(self) -> float:
    return self.noise_multiplier * self.clip_norm

  @property
  def expected_batch(self) -> float:
    return float(np.dot(self.owner_sizes, self.sampling_rates))

  @property
  def effective_noise_multipliers(self) -> tuple[float, ...]:
    """z·C / C_n: owner n's multiplier relative to its own sensitivity."""
    return tuple(self.noise_std / c if self.noise_std > 0 else 0.0
                 for c in self.clip_thresholds)

  def record_rates(self, owner_of_record: np.ndarray) -> np.ndarray:
    """q_{o(d)} for every record, float32."""
    return np.asarray(self.sampling_rates, np.float32)[np.asarray(owner_of_record)]

  def record_thresholds(self, owner_of_record: np.ndarray) -> np.ndarray:
    """C_{o(d)} for every record, float32 (each ≤ ``clip_norm``)."""
    return np.asarray(self.clip_thresholds, np.float32)[np.asarray(owner_of_record)]

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d.update(noise_std=self.noise_std, expected_batch=self.expected_batch,
             effective_noise_multipliers=list(self.effective_noise_multipliers))
    return strict_json.finite_or_none(d)


def owner_epsilon(rate: float, effective_noise_multiplier: float, steps: int,
                  delta: float, accountant: str = "rdp") -> float:
  """ε of one owner: T-fold Poisson(q)-subsampled Gaussian(z_eff), fresh dp-accounting."""
  if rate == 0.0:
    return 0.0
  if effective_noise_multiplier == 0.0:
    return math.inf
  return exact.epsilon(rate, effective_noise_multiplier, steps, delta, accountant)


def verify_plan(plan: OwnerPlan) -> tuple[float, ...]:
  """Recomputes every owner's ε; raises RuntimeError if any exceeds its budget."""
  achieved = []
  for name, eps, q, z in zip(plan.owner_names, plan.target_epsilons, plan.sampling_rates,
                             plan.effective_noise_multipliers):
    e = owner_epsilon(q, z, plan.steps, plan.delta, plan.accountant)
    if e > eps:
      raise RuntimeError(
          f"owner {name!r} would spend ε={e:.6g} > its budget {eps:g} (q={q:.6g}, "
          f"z_eff={z:.6g}, T={plan.steps}); refusing an over-budget plan.")
    achieved.append(e)
  return tuple(achieved)


def plan_owners(epsilons: Sequence[float], owner_sizes: Sequence[int], delta: float,
                steps: int, expected_batch: float, clip_norm: float = 1.0,
                mechanism: str = "sample", accountant: str = "rdp",
                owner_names: Optional[Sequence[str]] = None) -> OwnerPlan:
  """SAMPLE or SCALE calibration for owners (see module doc), verified.

  Args:
    epsilons: ε_n per owner (> 0; inf = no privacy for that owner).
    owner_sizes: |D_n| per owner.
    delta: δ of every owner.
    steps: T, the DP-SGD steps.
    expected_batch: b = Σ_n q_n |D_n|, the expected batch (and the divisor).
    clip_norm: C, the largest clip threshold (SAMPLE: everyone's).
    mechanism: "sample" or "scale".
    accountant: "rdp" or "pld".
  """
  if mechanism not in MECHANISMS:
    raise ValueError(f"mechanism={mechanism!r}: choose 'sample' (per-owner rates) or "
                     "'scale' (per-owner clip thresholds).")
  eps = [validation.check_epsilon(e, f"epsilons[{i}]") for i, e in enumerate(epsilons)]
  sizes = [int(n) for n in owner_sizes]
  if len(sizes) != len(eps):
    raise ValueError(f"got {len(eps)} budgets but {len(sizes)} owner sizes; give one "
                     "size per owner.")
  if any(n < 0 for n in sizes):
    raise ValueError(f"owner_sizes={sizes} must be >= 0.")
  names = tuple(str(n) for n in (owner_names if owner_names is not None
                                 else [f"owner{i}" for i in range(len(eps))]))
  if len(names) != len(eps):
    raise ValueError("give one owner name per budget.")
  if not (clip_norm > 0 and math.isfinite(clip_norm)):
    raise ValueError(f"clip_norm={clip_norm} must be a finite number > 0.")
  delta = validation.check_delta(delta)
  steps = validation.check_rounds(steps)
  if sum(sizes) < 1:
    raise ValueError("the owners hold no records; give at least one owner records.")
  if not 0 < expected_batch <= sum(sizes):
    raise ValueError(f"expected_batch={expected_batch} must be in (0, {sum(sizes)}], the "
                     "number of records; lower the expected batch.")
  if mechanism == "sample":
    cal = sample.get_group_sampling_rates(eps, sizes, delta, steps, expected_batch,
                                          accountant)
    rates = cal.sampling_rates
    thresholds = (float(clip_norm),) * len(eps)
    z = cal.noise_multiplier
  else:
    cal = scale.get_group_clip_scales(eps, sizes, delta, steps, expected_batch, accountant)
    rates = (cal.sampling_rate,) * len(eps)
    thresholds = tuple(float(clip_norm) * s for s in cal.clip_scales)
    z = cal.noise_multiplier
  plan = OwnerPlan(mechanism, names, tuple(eps), (), tuple(sizes),
                   tuple(float(q) for q in rates), thresholds, float(clip_norm), float(z),
                   steps, delta, accountant)
  return dataclasses.replace(plan, achieved_epsilons=verify_plan(plan))


def drop_less_private(owner_of_record: np.ndarray, epsilons: Sequence[float],
                      fraction: float, seed: int) -> np.ndarray:
  """The "Drop x%" baseline (INO-SGD Table 3): random undersampling of less private owners.

  Every owner whose ε is above the smallest ε loses ``fraction`` of its
  records (rounded down), chosen uniformly at random; the most private
  owner(s) keep all of theirs. Returns the boolean mask of kept records. The
  plan is then recalibrated on the smaller owners, so the budgets still hold.
  """
  if not 0.0 <= fraction < 1.0:
    raise ValueError(f"drop fraction={fraction} must be in [0, 1).")
  owners = np.asarray(owner_of_record)
  eps = np.asarray(epsilons, float)
  keep = np.ones(owners.shape, bool)
  rng = np.random.default_rng(seed)
  for n in np.flatnonzero(eps > eps.min()):
    rows = np.flatnonzero(owners == n)
    drop = rng.choice(rows, int(math.floor(fraction * rows.size)), replace=False)
    keep[drop] = False
  return keep
