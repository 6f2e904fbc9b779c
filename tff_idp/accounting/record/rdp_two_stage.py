"""Two-stage (client λ × record q) RDP accounting of rPDP-FL (Lemma 6, Theorem 1).

One round of rPDP-FL (Alg. 1 of the rPDP-FL paper) Poisson-samples clients at
a uniform rate λ; each sampled client runs τ DP-SGD steps whose mini-batches
Poisson-sample its records, record j at its own rate q_j, and add N(0, σ²L²)
to the clipped sum. For one record at rate q:

* **Lemma 7 / Eq. (9)**: the τ local steps are (α, ρ^τ)-RDP with
  ρ^τ(α, q) = τ · ρ_PoiSG(α, q), the RDP of the Poisson-subsampled Gaussian
  (Mironov et al. 2019; Lemma 6's binomial sum at integer α).
* **Lemma 6**: with client sampling at λ, one round is (α, ρ^{τ,λ})-RDP with
  ρ^{τ,λ}(α, q) = log(1 − λ + λ·exp((α − 1) ρ^τ(α, q))) / (α − 1).
* **Theorem 1**: over T rounds,
  - **Type II** (untrusted clients and third parties, who see only global
    models): ρ_FL = T · ρ^{τ,λ}. This is the default. It protects a record
    against anyone who observes the sequence of global models.
  - **Type I** (honest-but-curious server, who sees every uploaded client
    update and therefore knows which clients took part): ρ_FL = λ·T·ρ^τ, the
    paper's bound, in which λ·T is the *expected* number of rounds the
    record's client takes part in. The per-record ledger
    (:mod:`tff_idp.accounting.record.ledger`) charges Type I on the rounds a
    client was actually sampled, so a record whose client is sampled more
    often than λ·T times is stopped before it goes over.
  ε = min_α conversion(ρ_FL(α), δ). We use dp-accounting's RDP→DP conversion
  (Balle et al. 2020, Prop. 12), which is never looser than the paper's
  Eq. (8) ρ + log(1/δ)/(α − 1), so any ε here is also a valid Eq. (8) bound.

The orders are integers (:data:`ORDERS`), where Lemma 6's binomial sum is
exact; every value equals dp-accounting's ``_compute_rdp_poisson_subsampled_
gaussian`` at the same orders (tested), but is computed for thousands of rates
at once. :func:`epsilon_reference` evaluates the same bound with
dp-accounting's own functions, one rate at a time, for cross-checks.

This module imports numpy, scipy and dp-accounting only (no TensorFlow).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Sequence

import numpy as np

from tff_idp.accounting import fast_rdp
from tff_idp.accounting import validation

#: Integer RDP orders of the two-stage bound: dense where small budgets have
#: their optimum, sparse up to 1024 for very small ε.
ORDERS: np.ndarray = np.array(
    list(range(2, 65)) + [80, 96, 112, 128, 160, 192, 256, 320, 384, 512, 768, 1024],
    dtype=np.int64)
_TABLE = fast_rdp._OrderTable(ORDERS)  # pylint: disable=protected-access

THREAT_MODELS = ("type2", "type1")


def _is_positive_integer(value) -> bool:
  return (isinstance(value, numbers.Real) and math.isfinite(value)
          and value == int(value) and value >= 1)


@dataclasses.dataclass(frozen=True)
class TwoStageParams:
  """Everything but q that fixes a record's ε in rPDP-FL (Theorem 1).

  Attributes:
    noise_multiplier: σ, the std of the per-step Gaussian noise over the clip L.
    local_steps: τ, DP-SGD steps per round on each sampled client.
    rounds: T, communication rounds.
    client_rate: λ ∈ (0, 1], the uniform client sampling rate.
    delta: target δ ∈ (0, 1).
    threat_model: "type2" (third parties; default) or "type1" (the server).
  """
  noise_multiplier: float
  local_steps: int
  rounds: int
  client_rate: float
  delta: float
  threat_model: str = "type2"

  def __post_init__(self):
    validation.check_noise_multiplier(self.noise_multiplier)
    if not _is_positive_integer(self.local_steps):
      raise ValueError(f"local_steps (τ)={self.local_steps!r} must be a positive integer.")
    if not _is_positive_integer(self.rounds):  # before int(), which fails on nan/inf
      raise ValueError(f"rounds={self.rounds!r} must be a positive integer.")
    validation.check_rounds(self.rounds)
    lam = float(self.client_rate)
    if not 0.0 < lam <= 1.0:
      raise ValueError(
          f"client_rate (λ)={self.client_rate!r} must lie in (0, 1]; use 1 when every "
          "client takes part in every round.")
    validation.check_delta(self.delta)
    if self.threat_model not in THREAT_MODELS:
      raise ValueError(
          f"threat_model={self.threat_model!r} must be one of {THREAT_MODELS}: 'type2' "
          "protects against third parties who see global models, 'type1' against "
          "an honest-but-curious server who sees client updates.")

  def with_rounds(self, rounds: int) -> "TwoStageParams":
    return dataclasses.replace(self, rounds=rounds)


def check_rates(q: np.ndarray | float) -> np.ndarray:
  """Sampling rates must lie in [0, 1] (0 = the record never takes part)."""
  arr = np.asarray(q, dtype=float)
  bad = ~((arr >= 0.0) & (arr <= 1.0))
  if np.any(bad):
    first = arr[bad].reshape(-1)[0]
    raise ValueError(
        f"record sampling rate q={first!r} is outside [0, 1]; rates are "
        "probabilities (0 excludes the record).")
  return arr


def local_rdp(q: np.ndarray | float, params: TwoStageParams) -> np.ndarray:
  """ρ^τ(α, q) = τ · ρ_PoiSG(α, q) at :data:`ORDERS` (Lemma 7, Eq. (9)).

  Returns shape ``(len(q), len(ORDERS))`` (``(len(ORDERS),)`` for scalar q).
  """
  q_arr = check_rates(q)
  rdp = params.local_steps * fast_rdp.rdp_poisson_subsampled_gaussian_many(
      q_arr.reshape(-1), params.noise_multiplier, _TABLE)
  return rdp[0] if q_arr.ndim == 0 else rdp


def amplify_by_client_sampling(rdp_local: np.ndarray, client_rate: float) -> np.ndarray:
  """Lemma 6: ρ^{τ,λ} = log(1 − λ + λ e^{(α−1)ρ^τ}) / (α − 1), elementwise."""
  alpha_m1 = ORDERS.astype(float) - 1.0
  if client_rate >= 1.0:
    return np.asarray(rdp_local, dtype=float).copy()
  x = alpha_m1 * np.asarray(rdp_local, dtype=float)
  with np.errstate(over="ignore"):
    # log1p(λ·expm1(x)) is exact for small x (where logaddexp loses ~1e-10
    # relative to cancellation); logaddexp does not overflow for large x.
    small = np.log1p(client_rate * np.expm1(np.minimum(x, 1.0)))
  large = np.logaddexp(math.log1p(-client_rate), math.log(client_rate) + x)
  return np.where(x < 1.0, small, large) / alpha_m1


def round_rdp(q: np.ndarray | float, params: TwoStageParams) -> np.ndarray:
  """RDP charged per round to a record at rate q, at :data:`ORDERS`.

  Type II: ρ^{τ,λ}(α, q) (Lemma 6), charged every round. Type I: ρ^τ(α, q),
  charged on the rounds the record's client is sampled.
  """
  local = local_rdp(q, params)
  if params.threat_model == "type2":
    return amplify_by_client_sampling(local, params.client_rate)
  return local


def total_rdp(q: np.ndarray | float, params: TwoStageParams) -> np.ndarray:
  """ρ_FL(α, q) of Theorem 1: T·ρ^{τ,λ} (Type II) or λ·T·ρ^τ (Type I)."""
  per_round = round_rdp(q, params)
  if params.threat_model == "type2":
    return params.rounds * per_round
  return params.client_rate * params.rounds * per_round


#: Margin on RDP before the KL shortcut ε = 0 is taken (see :func:`rdp_to_epsilon`).
KL_RELATIVE_MARGIN = 1e-3
KL_ABSOLUTE_MARGIN = 1e-12


def rdp_to_epsilon(rdp: np.ndarray, delta: float) -> np.ndarray:
  """min over :data:`ORDERS` of dp-accounting's RDP→(ε, δ) conversion, per row.

  dp-accounting returns ε = 0 when δ² + expm1(−ρ) > 0 (ρ below about δ²: the
  KL/Pinsker bound), and otherwise ρ + log(1 − 1/α) − log(δα)/(α − 1), which
  is far from 0. ε therefore *jumps* at ρ ≈ δ², and a floating-point error of
  1e-5 relative in a ρ of order 1e-11 (which is what any log-sum-exp of
  1 + O(q²) gives) can move a rate across the jump and change ε from 0 to
  ~0.7. To stay on the safe side of the cliff, the ε = 0 shortcut is taken
  only if it also holds for ρ·(1 + 1e-3) + 1e-12. This can only raise ε.
  """
  rdp = np.asarray(rdp, dtype=float)
  eps = fast_rdp.rdp_to_epsilon(ORDERS, rdp, delta)
  inflated = rdp * (1.0 + KL_RELATIVE_MARGIN) + KL_ABSOLUTE_MARGIN
  kl_zero_robust = np.any(delta**2 + np.expm1(-inflated) > 0, axis=-1)
  if np.all(kl_zero_robust | (eps > 0)):
    return eps
  no_kl = _epsilon_without_kl_shortcut(rdp, delta)
  return np.where((eps == 0) & ~kl_zero_robust, no_kl, eps)


def _epsilon_without_kl_shortcut(rdp: np.ndarray, delta: float) -> np.ndarray:
  orders = ORDERS.astype(float)
  with np.errstate(divide="ignore", invalid="ignore"):
    eps = rdp + np.log1p(-1.0 / orders) - np.log(delta * orders) / (orders - 1.0)
  return np.maximum(0.0, np.min(eps, axis=-1))


def epsilon(q: np.ndarray | float, params: TwoStageParams) -> np.ndarray | float:
  """ε̂*(q) of Theorem 1 (Eq. (8)), vectorised over q. ε(0) = 0."""
  eps = rdp_to_epsilon(total_rdp(q, params), params.delta)
  return float(eps) if np.ndim(q) == 0 else eps


def epsilon_reference(q: float, params: TwoStageParams,
                      orders: Sequence[float] | None = None) -> float:
  """Theorem 1 for one rate, computed with dp-accounting's own RDP functions.

  Slow (a Python loop per order inside dp-accounting); used to cross-check
  :func:`epsilon`. With ``orders=None`` it uses :data:`ORDERS`.
  """
  from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib  # pylint: disable=g-import-not-at-top
  orders = np.asarray(ORDERS if orders is None else orders, dtype=float)
  q = float(check_rates(q))
  if q == 0.0:
    return 0.0
  local = params.local_steps * np.asarray(
      rdp_lib._compute_rdp_poisson_subsampled_gaussian(  # pylint: disable=protected-access
          q, params.noise_multiplier, orders))
  lam = params.client_rate
  if params.threat_model == "type2":
    per_round = np.logaddexp(np.log1p(-lam), np.log(lam) + (orders - 1) * local) / (orders - 1) \
        if lam < 1 else local
    rdp = params.rounds * per_round
  else:
    rdp = lam * params.rounds * local
  # RDP is >= 0; dp-accounting's float64 log(1 + x) returns about -1e-16 for
  # q <= 1e-8, which its own compute_epsilon then rejects.
  rdp = np.maximum(rdp, 0.0)
  eps, _ = rdp_lib.compute_epsilon(orders, rdp, params.delta)
  return float(eps)


def epsilon_curve(q: float, params: TwoStageParams) -> tuple[np.ndarray, np.ndarray]:
  """(orders, ε(α, δ, q)) before the min over α: Alg. 2 line 5, Fig. 5 (left)."""
  rdp = total_rdp(float(q), params)
  orders = ORDERS.astype(float)
  with np.errstate(divide="ignore", invalid="ignore"):
    eps = rdp + np.log1p(-1.0 / orders) - np.log(params.delta * orders) / (orders - 1.0)
  return orders, np.maximum(eps, 0.0)
