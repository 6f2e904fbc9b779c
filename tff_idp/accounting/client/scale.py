"""SCALE baseline calibration (Boenisch et al. 2023 SCALE; Aldaghri et al. 2023 in FL).

Every client is sampled uniformly with q = c/N, one Gaussian noise of std
z·C is added to the clipped sum, and group p's updates are clipped to s_p·C
instead of C. Group p's sensitivity is then s_p·C, so its effective noise
multiplier is z / s_p. We pick, per group, the smallest σ_p that meets ε_p at
rate q (getNoise), then share z = min_p σ_p and set s_p = z / σ_p <= 1: the
most relaxed group is clipped at C, stricter groups are clipped harder.
Groups with ε = inf get s_p = 1 (they are still covered by z).

z / s_p is the multiplier of the *whole* release only because the aggregator
(``tff_idp.idp_fedavg.aggregators``) also scales each client's adaptive-clipping bit by
s_p: the released pair (clipped sum, clip-bit sum) then has sensitivity
s_p·(C, 1/2), s_p times that of an unscaled client, against noise
(z_Δ C, σ_b) with z_Δ⁻² + (2σ_b)⁻² = z⁻² (Andrew et al. 2021, Thm. 1).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from tff_idp.accounting import exact
from tff_idp.accounting.client import sample
from tff_idp.accounting import validation


@dataclasses.dataclass(frozen=True)
class ScaleCalibration:
  noise_multiplier: float           # z, relative to the base clip C
  clip_scales: tuple[float, ...]    # s_p, group p is clipped at s_p·C
  sampling_rate: float              # uniform q = c/N
  target_epsilons: tuple[float, ...]
  achieved_epsilons: tuple[float, ...]
  group_sizes: tuple[int, ...]
  delta: float
  rounds: int
  accountant: str

  @property
  def effective_noise_multipliers(self) -> tuple[float, ...]:
    return tuple(self.noise_multiplier / s for s in self.clip_scales)

  @property
  def expected_clip_scale_sum(self) -> float:
    """E[Σ_i s_i] over a round's cohort, q·Σ_p |G_p| s_p: the clip bits' normaliser."""
    return float(self.sampling_rate * sum(n * s for n, s in zip(self.group_sizes,
                                                                self.clip_scales)))


def get_group_clip_scales(epsilons: Sequence[float], group_sizes: Sequence[int],
                          delta: float, rounds: int, clients_per_round: float,
                          accountant: str = "rdp") -> ScaleCalibration:
  """SCALE: per-group clip scales at one shared noise level (see module doc)."""
  eps = [validation.check_epsilon(e, f"epsilons[{i}]") for i, e in enumerate(epsilons)]
  sizes = [int(n) for n in group_sizes]
  if len(sizes) != len(eps):
    raise ValueError("give one group size per budget.")
  num_clients = sum(sizes)
  validation.check_cohort(clients_per_round, num_clients)
  q = clients_per_round / num_clients
  sigmas = [sample.get_noise(e, delta, q, rounds, accountant) for e in eps]
  finite = [s for s, e, n in zip(sigmas, eps, sizes) if math.isfinite(e) and n > 0]
  if not finite:
    z = 0.0
    scales = [1.0] * len(eps)
  else:
    z = min(finite)
    scales = [1.0 if not math.isfinite(e) else z / s for s, e in zip(sigmas, eps)]
  achieved = []
  for p, (e, n) in enumerate(zip(eps, sizes)):
    if z == 0.0 or n == 0:
      achieved.append(math.inf if n > 0 and z == 0.0 else 0.0)
      continue
    scales[p], a = _verified_scale(scales[p], e, z, q, rounds, delta, accountant)
    achieved.append(a)
  return ScaleCalibration(float(z), tuple(float(s) for s in scales), float(q),
                          tuple(eps), tuple(float(a) for a in achieved),
                          tuple(sizes), float(delta), int(rounds), accountant)


_MAX_SHAVES = 60


def _verified_scale(scale: float, target: float, z: float, q: float, rounds: int,
                    delta: float, accountant: str) -> tuple[float, float]:
  """The largest verified clip scale at or below ``scale``: exact ε(q, z/s) <= ``target``.

  ``scale`` = z/σ_p is over budget only by float rounding, or when σ_p was
  (wrongly) slightly too small. The scale is shaved by a factor that starts
  at 1 − 1e-9 and doubles its step each time, so a rounding error costs one
  or two exact evaluations and a real shortfall of any size at most
  ``_MAX_SHAVES`` (issue 32: a fixed 1e-9 step spun for minutes on a σ 0.1%
  too small). Never returns an unverified scale.
  """
  eps = exact.epsilon(q, z / scale, rounds, delta, accountant)
  shave = 1e-9
  for _ in range(_MAX_SHAVES):
    if eps <= target:
      return scale, eps
    scale *= 1.0 - shave
    shave = min(0.5, shave * 2.0)
    eps = exact.epsilon(q, z / scale, rounds, delta, accountant)
  if eps <= target:
    return scale, eps
  raise RuntimeError(
      f"could not verify a SCALE clip scale within ε={target} (z={z}, q={q}); refusing to "
      "return an unverified scale.")
