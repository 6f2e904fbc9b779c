"""One-shot ε estimate from canary cosines (Andrew et al., ICLR 2024, §3 and Alg. 2).

No TensorFlow here: the estimator sees only two samples of cosines.

* The **held-out** canaries (never inserted) give the null distribution,
  fitted as N(μ₀, σ₀²).
* The **inserted** canaries give the alternative, fitted as N(μ₁, σ₁²).

The estimate is the ε at which the pair of Gaussians, read as the output
distributions of a mechanism on two neighbouring datasets, has hockey-stick
divergence δ in the worse direction:

    ε̂ = inf{ε >= 0 : max(H_{e^ε}(P₁‖P₀), H_{e^ε}(P₀‖P₁)) <= δ},
    H_{e^ε}(P‖Q) = ∫ (p − e^ε q)₊ = P(R) − e^ε Q(R),  R = {log p/q > ε}.

With Gaussians the privacy-loss log p/q is quadratic in the output, so R is
a half-line, an interval or the complement of one, and each H is a
difference of normal tail probabilities (computed in log space). For equal
variances this is exactly the Gaussian mechanism with μ = |μ₁ − μ₀|/σ
(Balle & Wang 2018), which the paper proves the cosine statistic converges to
(Thm. 3.1) for the Gaussian mechanism in high dimension.

**Confidence interval.** A percentile bootstrap over canaries: held-out and
inserted cosines are resampled with replacement (each sample keeps its
size), the two Gaussians refitted and ε̂ recomputed, ``bootstrap`` times;
the interval is the central ``confidence`` mass. Seeded, so deterministic.

**Reading it.** ε̂ is an estimate of the leakage of the *final model* to an
adversary who knows the canary directions, under this attack: a lower bound
on what the mechanism leaks in that threat model (up to the Gaussian fit and
sampling error), never a proof of privacy. A correct mechanism has ε̂ at or
below its accountant's bound, usually well below (the bound covers every
intermediate model and every adversary). ``flagged`` means the whole
confidence interval lies above the bound: the released model leaked more
than the ledger claims.

**Saturation.** Without noise the inserted cosines separate from the null by
many standard deviations and ε̂ grows without limit; it is reported as
``EPSILON_CAP`` with ``saturated=True`` ("≥ cap"), and so is any bootstrap
replicate past the cap.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
from scipy import special

EPSILON_CAP = 100.0
"""Estimates at or beyond this are reported as ``≥ EPSILON_CAP`` (saturated)."""

RELIABLE_PER_SIDE = 10
"""Below this many cosines on a side the bootstrap is degenerate: ``few_canaries``."""
DEFAULT_BOOTSTRAP = 1000
DEFAULT_CONFIDENCE = 0.95
_MIN_STD = 1e-12
_BISECTION_STEPS = 60


def _log_normal_mass(lo: np.ndarray, hi: np.ndarray, mean: np.ndarray,
                     std: np.ndarray) -> np.ndarray:
  """log P(lo < X < hi) for X ~ N(mean, std²), elementwise, stable in the tails."""
  a = (lo - mean) / std
  b = (hi - mean) / std
  # Use the side of the mean where both tails are small, to avoid 1 − 1.
  upper = a > 0  # both endpoints right of the mean: use survival functions
  log_sf_a = special.log_ndtr(-a)
  log_sf_b = special.log_ndtr(-b)
  log_cdf_a = special.log_ndtr(a)
  log_cdf_b = special.log_ndtr(b)
  with np.errstate(divide="ignore", invalid="ignore"):
    right = log_sf_a + np.log1p(-np.exp(np.minimum(log_sf_b - log_sf_a, 0.0)))
    left = log_cdf_b + np.log1p(-np.exp(np.minimum(log_cdf_a - log_cdf_b, 0.0)))
  out = np.where(upper, right, left)
  return np.where(hi > lo, out, -np.inf)


def _log_region_mass(intervals: list[tuple[np.ndarray, np.ndarray]], mean: np.ndarray,
                     std: np.ndarray) -> np.ndarray:
  """log of the N(mean, std²) mass of a union of disjoint intervals."""
  logs = np.stack([_log_normal_mass(lo, hi, mean, std) for lo, hi in intervals])
  return special.logsumexp(logs, axis=0)


def hockey_stick(eps: np.ndarray, mean_p: np.ndarray, std_p: np.ndarray,
                 mean_q: np.ndarray, std_q: np.ndarray) -> np.ndarray:
  """H_{e^ε}(N(mean_p, std_p²) ‖ N(mean_q, std_q²)), elementwise over arrays.

  R = {x : log p(x) − log q(x) > ε} = {a x² + b x + c > 0} with the
  coefficients below; then H = P(R) − e^ε Q(R) >= 0.
  """
  eps, mp, sp, mq, sq = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in
                                             (eps, mean_p, std_p, mean_q, std_q)))
  sp = np.maximum(sp, _MIN_STD)
  sq = np.maximum(sq, _MIN_STD)
  a = 0.5 / sq**2 - 0.5 / sp**2
  b = mp / sp**2 - mq / sq**2
  c = 0.5 * mq**2 / sq**2 - 0.5 * mp**2 / sp**2 + np.log(sq / sp) - eps
  inf = np.full_like(eps, np.inf)
  # Relative size of the quadratic term: below ~1e-9 treat as linear.
  scale = np.maximum(np.abs(b) * np.maximum(sp, sq), _MIN_STD)
  linear = np.abs(a) * np.maximum(sp, sq)**2 < 1e-9 * scale
  with np.errstate(divide="ignore", invalid="ignore"):
    # Linear: b x + c > 0.
    root = np.where(b != 0, -c / np.where(b != 0, b, 1.0), 0.0)
    lin_lo = np.where(b > 0, root, -inf)
    lin_hi = np.where(b > 0, inf, root)
    lin_all = (b == 0) & (c > 0)
    lin_lo = np.where(b == 0, np.where(lin_all, -inf, 0.0), lin_lo)
    lin_hi = np.where(b == 0, np.where(lin_all, inf, 0.0), lin_hi)
    # Quadratic.
    disc = b**2 - 4 * a * c
    sqrt_disc = np.sqrt(np.maximum(disc, 0.0))
    safe_a = np.where(linear, 1.0, a)
    r1 = (-b - sqrt_disc) / (2 * safe_a)
    r2 = (-b + sqrt_disc) / (2 * safe_a)
    lo_root, hi_root = np.minimum(r1, r2), np.maximum(r1, r2)
  has_roots = disc > 0
  # a > 0: outside the roots (everything when there are none).
  # a < 0: between the roots (nothing when there are none).
  pos = a > 0
  first_lo = np.where(linear, lin_lo, np.where(pos, -inf, np.where(has_roots, lo_root, 0.0)))
  first_hi = np.where(linear, lin_hi, np.where(
      pos, np.where(has_roots, lo_root, inf), np.where(has_roots, hi_root, 0.0)))
  second_lo = np.where(linear | ~pos | ~has_roots, 0.0, hi_root)
  second_hi = np.where(linear | ~pos | ~has_roots, 0.0, inf)
  intervals = [(first_lo, first_hi), (second_lo, second_hi)]
  log_p = _log_region_mass(intervals, mp, sp)
  log_q = _log_region_mass(intervals, mq, sq)
  with np.errstate(over="ignore", invalid="ignore"):
    h = np.exp(log_p) - np.exp(np.minimum(log_q + eps, 700.0))
  return np.maximum(np.nan_to_num(h, nan=0.0), 0.0)


def privacy_profile(eps, mean0, std0, mean1, std1) -> np.ndarray:
  """δ(ε) of the Gaussian pair: the larger hockey-stick divergence of the two directions."""
  return np.maximum(hockey_stick(eps, mean1, std1, mean0, std0),
                    hockey_stick(eps, mean0, std0, mean1, std1))


def gaussian_pair_epsilon(mean0, std0, mean1, std1, delta: float,
                          cap: float = EPSILON_CAP) -> np.ndarray:
  """ε at δ of the mechanism with outputs N(mean0, std0²) vs N(mean1, std1²).

  Vectorised over arrays of parameters: bisection on ε ∈ [0, cap] (δ(ε) is
  non-increasing). Returns ``cap`` where δ(cap) > δ (saturated), 0 where the
  total variation distance is already <= δ.
  """
  _check_delta(delta)
  mean0, std0, mean1, std1 = np.broadcast_arrays(
      *(np.asarray(v, np.float64) for v in (mean0, std0, mean1, std1)))
  lo = np.zeros_like(mean0)
  hi = np.full_like(mean0, float(cap))
  above_cap = privacy_profile(hi, mean0, std0, mean1, std1) > delta
  within_zero = privacy_profile(lo, mean0, std0, mean1, std1) <= delta
  for _ in range(_BISECTION_STEPS):
    mid = 0.5 * (lo + hi)
    too_low = privacy_profile(mid, mean0, std0, mean1, std1) > delta
    lo = np.where(too_low, mid, lo)
    hi = np.where(too_low, hi, mid)
  out = np.where(above_cap, float(cap), np.where(within_zero, 0.0, hi))
  return out


@dataclasses.dataclass(frozen=True)
class EpsilonEstimate:
  """One group's audit result (all ε at the run's δ).

  ``epsilon`` is the point estimate; ``ci_low``/``ci_high`` the bootstrap
  interval; ``bound`` the accountant's ε for the group (None if not given);
  ``flagged`` is True when ``ci_low > bound`` (a violation: the leakage is
  above the bound with the stated confidence); ``saturated`` when the point
  estimate hit ``EPSILON_CAP``.
  """
  epsilon: float
  ci_low: float
  ci_high: float
  confidence: float
  delta: float
  null_mean: float
  null_std: float
  inserted_mean: float
  inserted_std: float
  num_held_out: int
  num_inserted: int
  bound: Optional[float] = None
  saturated: bool = False
  method: str = "gdp"

  @property
  def flagged(self) -> bool:
    return self.bound is not None and self.ci_low > self.bound

  @property
  def tightness(self) -> Optional[float]:
    """empirical ÷ bound (how much of the claimed ε this attack exhibits)."""
    if self.bound is None or not self.bound > 0 or math.isinf(self.bound):
      return None
    return self.epsilon / self.bound

  @property
  def few_canaries(self) -> bool:
    """Fewer than ``RELIABLE_PER_SIDE`` cosines on a side: read neither ε̂ nor its CI."""
    return min(self.num_held_out, self.num_inserted) < RELIABLE_PER_SIDE

  def to_dict(self) -> dict:
    return dict(dataclasses.asdict(self), flagged=self.flagged, tightness=self.tightness,
                few_canaries=self.few_canaries)

  def format(self) -> str:
    """'0.42 [0.10, 0.81]' or '≥ 100 (saturated)'."""
    def text(v: float) -> str:
      return f"≥ {EPSILON_CAP:g}" if v >= EPSILON_CAP else f"{v:.3g}"
    return (f"{text(self.epsilon)} [{text(self.ci_low)}, {text(self.ci_high)}]"
            + (" (saturated)" if self.saturated else ""))


def _check_delta(delta: float) -> None:
  if not 0 < delta < 1:
    raise ValueError(f"delta={delta} must lie in (0, 1): use the run's δ.")


def _fit(values: np.ndarray) -> tuple[float, float]:
  return float(np.mean(values)), float(np.std(values, ddof=1))


METHODS = ("gdp", "gaussian_pair")


def _epsilon_of_fits(m0, s0, m1, s1, delta: float, method: str) -> np.ndarray:
  if method == "gdp":
    return gaussian_pair_epsilon(m0, s0, m1, s0, delta)
  return gaussian_pair_epsilon(m0, s0, m1, s1, delta)


def estimate_epsilon(null_cosines: Sequence[float], inserted_cosines: Sequence[float],
                     delta: float, *, bound: Optional[float] = None, method: str = "gdp",
                     confidence: float = DEFAULT_CONFIDENCE,
                     bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0) -> EpsilonEstimate:
  """ε̂ with a bootstrap CI from held-out (null) and inserted canary cosines.

  Args:
    null_cosines: cos(U, u_j) of the held-out canaries (never inserted).
    inserted_cosines: those of the inserted canaries (sampled like clients).
    delta: the run's δ.
    bound: the accountant's ε for these canaries' group (sets ``flagged``).
    confidence: of the percentile interval, in (0, 1).
    bootstrap: number of resamples (>= 100).
    seed: of the bootstrap resampling (the estimate is deterministic given it).

  Raises:
    ValueError: fewer than 2 cosines on a side, non-finite cosines, or bad
      δ / confidence / bootstrap.
  """
  _check_delta(delta)
  null = np.asarray(null_cosines, np.float64).ravel()
  inserted = np.asarray(inserted_cosines, np.float64).ravel()
  for name, values in (("held-out", null), ("inserted", inserted)):
    if values.size < 2:
      raise ValueError(f"{values.size} {name} canary cosine(s): need at least 2 per group "
                       "to fit a Gaussian (give more --audit_canaries).")
    if not np.all(np.isfinite(values)):
      raise ValueError(f"the {name} canary cosines contain non-finite values.")
  if not 0 < confidence < 1:
    raise ValueError(f"confidence={confidence} must lie in (0, 1).")
  if bootstrap < 100:
    raise ValueError(f"bootstrap={bootstrap} must be >= 100 for a percentile interval.")
  if bound is not None and not bound >= 0:
    raise ValueError(f"bound={bound} must be >= 0.")
  m0, s0 = _fit(null)
  m1, s1 = _fit(inserted)
  if method not in METHODS:
    raise ValueError(f"method={method!r} must be one of {METHODS}.")
  point = float(_epsilon_of_fits(m0, s0, m1, s1, delta, method))
  rng = np.random.default_rng(seed)
  null_b = null[rng.integers(0, null.size, (bootstrap, null.size))]
  ins_b = inserted[rng.integers(0, inserted.size, (bootstrap, inserted.size))]
  eps_b = _epsilon_of_fits(null_b.mean(1), null_b.std(1, ddof=1),
                           ins_b.mean(1), ins_b.std(1, ddof=1), delta, method)
  tail = 100 * (1 - confidence) / 2
  low, high = np.percentile(eps_b, [tail, 100 - tail])
  return EpsilonEstimate(
      epsilon=point, ci_low=float(low), ci_high=float(high), confidence=float(confidence),
      delta=float(delta), null_mean=m0, null_std=s0, inserted_mean=m1, inserted_std=s1,
      num_held_out=int(null.size), num_inserted=int(inserted.size),
      bound=None if bound is None else float(bound), saturated=point >= EPSILON_CAP,
      method=method)
