"""SAMPLE for federated learning: IDP-FedAvg paper, Alg. 1 (GetGroupSamplingRates).

Budgets go in, one noise multiplier σ_SAMPLE and one Poisson sampling rate per
privacy group come out, for a DP-FedAvg run of ``rounds`` rounds in which client
i joins each round independently with probability q_i. The privacy of client i
is that of ``rounds`` compositions of the Poisson(q_i)-subsampled Gaussian(σ)
mechanism (Boenisch et al. 2023, Thm. 3.1, lifted from records to clients).

Searches run on a fast, conservative ε (vectorised integer-order RDP, or a
coarse pessimistic PLD); every returned value is then re-verified with a fresh
dp-accounting accountant and tightened until it is within budget.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Optional, Sequence

import numpy as np
from scipy import optimize

from tff_idp.accounting import exact
from tff_idp.accounting import fast_rdp
from tff_idp.accounting import validation
from tff_idp.accounting.search import largest_feasible

# A budget that needs σ above this is reported as infeasible rather than
# returned: such a run would learn nothing.
MAX_NOISE_MULTIPLIER = 1e3
MIN_NOISE_MULTIPLIER = 1e-3
MIN_SAMPLING_RATE = 1e-9
# Coarse PLD grid used inside searches (pessimistic: ε is over-estimated).
_SEARCH_PLD_DISCRETIZATION = 3e-3


class InfeasibleBudgetError(ValueError):
  """A privacy budget cannot be met with any sensible parameter."""


EpsilonFn = Callable[[float, float, int, float], float]

# Relative search tolerances: RDP evaluations are cheap, PLD ones are not.
_SEARCH_RTOL = {"rdp_int": 1e-7, "rdp": 1e-4, "pld": 2e-4}
# Stage-2 (refined ε) cohort matching: relative tolerance and secant steps.
_COHORT_RTOL = 1e-3
_REFINE_STEPS = 8
# Stage 2 is skipped when stage 1 already uses this share of every budget.
_SKIP_RTOL = 2e-3
# Relative tolerance on σ in the cohort-size root search.
_SIGMA_XTOL = {"rdp_int": 1e-6, "rdp": 1e-4, "pld": 2e-4}


def _search_epsilon_fn(search: str) -> EpsilonFn:
  """Fast ε(q, σ, rounds, δ) used inside searches; never below the exact one.

  ``rdp_int``: vectorised integer orders (cheapest, loosest);
  ``rdp``: integer orders plus dp-accounting's fractional orders near the
  optimum (equal to dp-accounting's RdpAccountant in practice);
  ``pld``: dp-accounting's PLD on a coarse, pessimistic grid.
  """
  if search == "rdp_int":
    return fast_rdp.epsilon
  if search == "rdp":
    return fast_rdp.epsilon_refined
  exact.check_accountant(search)
  return lambda q, s, r, d: exact.epsilon(
      q, s, r, d, "pld", pld_discretization=_SEARCH_PLD_DISCRETIZATION)


def _tighten_rate(q: float, target: float, sigma: float, rounds: int,
                  delta: float, accountant: str) -> tuple[float, float]:
  """Lowers q until the exact accountant confirms ε(q) <= target.

  Returns (q, exact ε at q).
  """
  shrink = 1e-4
  for _ in range(60):
    eps = exact.epsilon(q, sigma, rounds, delta, accountant)
    if eps <= target:
      return q, eps
    q *= 1.0 - shrink
    shrink = min(0.5, shrink * 2.0)
  raise RuntimeError(
      f"could not verify a sampling rate within ε={target} (σ={sigma}); "
      "refusing to return an unverified rate.")


def _tighten_noise(sigma: float, target: float, q: float, rounds: int,
                   delta: float, accountant: str) -> float:
  """Raises σ until the exact accountant confirms ε(σ) <= target."""
  grow = 1e-4
  for _ in range(60):
    if exact.epsilon(q, sigma, rounds, delta, accountant) <= target:
      return sigma
    sigma *= 1.0 + grow
    grow = min(1.0, grow * 2.0)
  raise RuntimeError(
      f"could not verify a noise multiplier within ε={target} (q={q}); "
      "refusing to return an unverified noise multiplier.")


def _search_sample_rate(epsilon: float, delta: float, sigma: float, rounds: int,
                        eps_fn: EpsilonFn, max_rate: float = 1.0,
                        hint: float | None = None, rtol: float = 1e-7) -> float:
  """Largest q <= max_rate with eps_fn(q) <= ε (no exact verification).

  ``hint`` (a nearby solution, e.g. at a neighbouring σ) narrows the bracket,
  which matters when each evaluation is a PLD composition.
  """
  if math.isinf(epsilon):
    return max_rate
  g = lambda q: eps_fn(q, sigma, rounds, delta)
  step = 1.25 if hint else 4.0
  lo = min(hint, max_rate) if hint else max_rate
  if g(lo) <= epsilon:
    if lo >= max_rate:
      return max_rate
    hi = min(max_rate, lo * step)
    while g(hi) <= epsilon:
      if hi >= max_rate:
        return max_rate
      lo, hi = hi, min(max_rate, hi * step)
  else:
    hi, lo = lo, lo / step
    while g(lo) > epsilon:
      hi, lo = lo, lo / step
      if lo < MIN_SAMPLING_RATE:
        raise InfeasibleBudgetError(
            f"ε={epsilon} cannot be met with noise multiplier σ={sigma:.4g} over "
            f"{rounds} rounds at δ={delta}, even at sampling rate "
            f"{MIN_SAMPLING_RATE}; raise σ or ε, or train for fewer rounds.")
  return largest_feasible(g, lo, hi, epsilon, x_rtol=rtol, f_rtol=rtol)


def get_sample_rate(epsilon: float, delta: float, sigma: float, rounds: int,
                    accountant: str = "rdp", max_rate: float = 1.0) -> float:
  """getSampleRate (Alg. 1 subroutine; Boenisch et al. Alg. 4).

  The largest Poisson sampling rate q <= ``max_rate`` such that ``rounds``
  rounds of the q-subsampled Gaussian with noise multiplier σ are (ε, δ)-DP.
  Returns ``max_rate`` when the budget holds even there (e.g. ε = inf).
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  sigma = validation.check_noise_multiplier(sigma)
  rounds = validation.check_rounds(rounds)
  max_rate = validation.check_sampling_rate(max_rate, "max_rate")
  exact.check_accountant(accountant)
  hint = _search_sample_rate(epsilon, delta, sigma, rounds,
                             _search_epsilon_fn("rdp_int"), max_rate,
                             rtol=_SEARCH_RTOL["rdp_int"])
  q = _search_sample_rate(epsilon, delta, sigma, rounds,
                          _search_epsilon_fn(accountant), max_rate, hint=hint,
                          rtol=_SEARCH_RTOL[accountant])
  if math.isinf(epsilon):
    return q
  return _tighten_rate(q, epsilon, sigma, rounds, delta, accountant)[0]


def _search_noise(epsilon: float, delta: float, q: float, rounds: int,
                  eps_fn: EpsilonFn, rtol: float = 1e-7) -> float:
  """Smallest σ (to tolerance) with eps_fn(q, σ) <= ε (no exact verification)."""
  g = lambda t: eps_fn(q, 1.0 / t, rounds, delta)  # increasing in t = 1/σ
  t_lo = 1.0
  while g(t_lo) > epsilon:
    t_lo /= 2.0
    if 1.0 / t_lo > MAX_NOISE_MULTIPLIER:
      raise InfeasibleBudgetError(
          f"ε={epsilon} at δ={delta} over {rounds} rounds with sampling rate "
          f"q={q:.4g} would need a noise multiplier above {MAX_NOISE_MULTIPLIER:g}; "
          "raise ε, lower the rounds or the clients per round.")
  t_hi = 2.0 * t_lo
  while g(t_hi) <= epsilon:
    t_lo = t_hi
    t_hi *= 2.0
    if 1.0 / t_hi < MIN_NOISE_MULTIPLIER:
      return 1.0 / t_lo
  return 1.0 / largest_feasible(g, t_lo, t_hi, epsilon, x_rtol=rtol, f_rtol=rtol)


def get_noise(epsilon: float, delta: float, q: float, rounds: int,
              accountant: str = "rdp") -> float:
  """getNoise (Alg. 1): the smallest σ making ``rounds`` Poisson(q) rounds (ε, δ)-DP.

  Returns 0.0 for ε = inf (no noise is needed).
  """
  epsilon = validation.check_epsilon(epsilon)
  delta = validation.check_delta(delta)
  q = validation.check_sampling_rate(q)
  rounds = validation.check_rounds(rounds)
  exact.check_accountant(accountant)
  if math.isinf(epsilon):
    return 0.0
  sigma = _search_noise(epsilon, delta, q, rounds, _search_epsilon_fn(accountant),
                        _SEARCH_RTOL[accountant])
  return _tighten_noise(sigma, epsilon, q, rounds, delta, accountant)


def _finite_or_none(value):
  if isinstance(value, dict):
    return {k: _finite_or_none(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_finite_or_none(v) for v in value]
  if isinstance(value, float) and not math.isfinite(value):
    return None
  return value


@dataclasses.dataclass(frozen=True)
class GroupCalibration:
  """Output of Alg. 1, with the verification that came with it."""
  noise_multiplier: float
  sampling_rates: tuple[float, ...]
  target_epsilons: tuple[float, ...]
  achieved_epsilons: tuple[float, ...]
  group_sizes: tuple[int, ...]
  delta: float
  rounds: int
  target_clients_per_round: float
  accountant: str

  @property
  def num_clients(self) -> int:
    return int(sum(self.group_sizes))

  @property
  def expected_clients_per_round(self) -> float:
    return float(np.dot(self.group_sizes, self.sampling_rates))

  def to_dict(self) -> dict:
    d = dataclasses.asdict(self)
    d["expected_clients_per_round"] = self.expected_clients_per_round
    d["num_clients"] = self.num_clients
    return d

  def to_json(self) -> str:
    """Strict JSON: infinite budgets and ε are written as null."""
    return json.dumps(_finite_or_none(self.to_dict()), indent=2, allow_nan=False)


def get_group_sampling_rates(
    epsilons: Sequence[float], group_sizes: Sequence[int], delta: float,
    rounds: int, clients_per_round: float, accountant: str = "rdp",
    max_rate: float = 1.0) -> GroupCalibration:
  """Alg. 1 GetGroupSamplingRates (IDP-FedAvg paper), solved directly.

  Finds σ_SAMPLE and per-group rates q_p = getSampleRate(ε_p, δ, σ, I) such that
  Σ_p |G_p| q_p ≈ c, the expected clients per round. The paper shrinks σ
  geometrically from getNoise(ε_1, δ, c/N, I); since Σ_p |G_p| q_p(σ) is
  increasing in σ, we solve for the same fixed point with a bracketed root
  finder instead (two orders of magnitude fewer accountant calls).

  Groups with ε = inf, and groups whose budget holds even at q = ``max_rate``,
  get q = ``max_rate``. If all groups have ε = inf the run is non-private:
  σ = 0 and every q = c/N. If the always-included clients alone already reach
  c, no σ can satisfy the cohort target and a ValueError says what to change.

  Raises:
    ValueError / InfeasibleBudgetError: with a message saying what to change.
    RuntimeError: if the final exact verification fails (never silent).
  """
  eps = np.array([validation.check_epsilon(e, f"epsilons[{i}]")
                  for i, e in enumerate(epsilons)])
  sizes = np.asarray(group_sizes)
  if sizes.shape != eps.shape:
    raise ValueError(
        f"got {eps.size} budgets but {sizes.size} group sizes; give one size per budget.")
  if np.any(sizes < 0) or np.any(sizes != np.round(sizes)):
    raise ValueError(f"group_sizes={list(sizes)} must be non-negative integers.")
  sizes = sizes.astype(np.int64)
  delta = validation.check_delta(delta)
  rounds = validation.check_rounds(rounds)
  max_rate = validation.check_sampling_rate(max_rate, "max_rate")
  num_clients = int(sizes.sum())
  validation.check_cohort(clients_per_round, num_clients)
  exact.check_accountant(accountant)
  c = float(clients_per_round)

  def result(sigma, rates, achieved):
    for e_t, e_a, n in zip(eps, achieved, sizes):
      if e_a > e_t:
        raise RuntimeError(
            f"verification failed: a group with ε={e_t} reached ε={e_a}; "
            "refusing to return an over-budget calibration.")
    return GroupCalibration(float(sigma), tuple(float(q) for q in rates),
                            tuple(float(e) for e in eps),
                            tuple(float(e) for e in achieved),
                            tuple(int(n) for n in sizes), delta, rounds, c,
                            accountant)

  finite = np.isfinite(eps) & (sizes > 0)
  if not finite.any():
    # Non-private run (σ = 0): a client with a finite budget could never be
    # sampled, so empty finite-budget groups get q = 0, not c/N.
    return result(0.0, [c / num_clients if math.isinf(e) else 0.0 for e in eps],
                  [math.inf if n > 0 else 0.0 for n in sizes])
  always_in = float(sizes[~finite].sum() * max_rate)
  if always_in >= c:
    raise ValueError(
        f"the {int(sizes[~finite].sum())} clients with ε=inf are sampled at "
        f"rate {max_rate} and alone give {always_in:g} >= {c:g} expected clients "
        "per round, leaving no room for the private groups; raise "
        "clients_per_round above that, or set max_rate below "
        f"{c / max(1, sizes[~finite].sum()):.4g}.")

  hints: dict[int, float] = {}

  def make_rates_at(search: str) -> Callable[[float, bool], np.ndarray]:
    """q_p(σ) for every group under the search ε ``search``.

    ``lenient`` (used only while bracketing σ): a non-empty group that would
    need q < MIN_SAMPLING_RATE at a trial σ adds < N·1e-9 expected clients and
    counts as 0; empty groups are skipped. Strict: every finite-budget group,
    empty ones too (they get the rate such a client would have).
    """
    eps_fn = _search_epsilon_fn(search)
    rtol = _SEARCH_RTOL[search]

    def rates_at(sigma: float, lenient: bool = False) -> np.ndarray:
      rates = np.full(len(eps), max_rate)
      for p in np.flatnonzero(np.isfinite(eps) & ((sizes > 0) | (not lenient))):
        try:
          rates[p] = _search_sample_rate(eps[p], delta, sigma, rounds, eps_fn,
                                         max_rate, hints.get(p), rtol)
        except InfeasibleBudgetError:
          if not lenient:
            raise
          rates[p] = 0.0
          continue
        if sizes[p] > 0:
          hints[p] = rates[p]
      return rates

    return rates_at

  def solve(search: str, sigma_hi: Optional[float], shrink: float
            ) -> tuple[float, Callable[[float, bool], np.ndarray]]:
    """σ with Σ_p |G_p| q_p(σ) = c under the search ε ``search``."""
    eps_fn = _search_epsilon_fn(search)
    rtol = _SEARCH_RTOL[search]

    rates_at = make_rates_at(search)

    excess_cache: dict[float, float] = {}

    def excess(log_sigma: float) -> float:
      if log_sigma not in excess_cache:
        excess_cache[log_sigma] = float(
            np.dot(sizes, rates_at(math.exp(log_sigma), lenient=True))) - c
      return excess_cache[log_sigma]

    if sigma_hi is None:
      # The paper's starting point: σ for the strictest budget at rate c/N.
      sigma_hi = _search_noise(float(eps[finite].min()), delta,
                               min(1.0, c / num_clients), rounds, eps_fn, rtol)
    while excess(math.log(sigma_hi)) < 0:  # only possible through max_rate < c/N
      sigma_hi *= 2.0
      if sigma_hi > MAX_NOISE_MULTIPLIER:
        raise InfeasibleBudgetError(
            f"cannot reach {c:g} expected clients per round with max_rate="
            f"{max_rate}; raise max_rate or lower clients_per_round.")
    sigma_lo = sigma_hi
    while excess(math.log(sigma_lo)) > 0:
      sigma_lo *= shrink
      if sigma_lo < MIN_NOISE_MULTIPLIER:
        break
    if sigma_lo < MIN_NOISE_MULTIPLIER or sigma_lo == sigma_hi:
      sigma = sigma_lo if sigma_lo == sigma_hi else sigma_hi
    else:
      sigma = math.exp(optimize.brentq(excess, math.log(sigma_lo),
                                       math.log(sigma_hi), xtol=_SIGMA_XTOL[search],
                                       rtol=1e-12))
    return sigma, rates_at

  def refine(search: str, sigma1: float, stage1_rates_at
             ) -> tuple[float, Callable[[float, bool], np.ndarray]]:
    """Secant steps on log σ for Σ_p |G_p| q_p(σ) = c under a costlier ε.

    Each evaluation of this ε can take milliseconds, so instead of a full
    bracketed solve we take at most ``_REFINE_STEPS`` secant steps from the
    stage-1 σ and stop once the expected cohort is within ``_COHORT_RTOL``.
    Whatever σ results, its rates are computed and verified exactly below.
    """
    eps_fn = _search_epsilon_fn(search)
    rates_at = make_rates_at(search)

    def log_total(log_sigma: float) -> float:
      return math.log(max(1e-300, float(np.dot(sizes, rates_at(math.exp(log_sigma),
                                                                 lenient=True)))))

    # Skip the costly ε where the stage-1 rates already (nearly) use every
    # group's budget under it (integer orders optimal, e.g. moderate σ and ε).
    stage1_rates = stage1_rates_at(sigma1)
    if all(eps_fn(stage1_rates[p], sigma1, rounds, delta) >= (1 - _SKIP_RTOL) * eps[p]
           for p in np.flatnonzero(finite)):
      return sigma1, stage1_rates_at
    target = math.log(c)
    x0, f0 = math.log(sigma1), log_total(math.log(sigma1))
    if abs(f0 - target) <= _COHORT_RTOL:
      return sigma1, rates_at
    # A small first step gives the secant a local slope (it can be ~2 or ~10).
    x1 = x0 + max(-0.02, min(0.02, (target - f0) / 2.0))
    for _ in range(_REFINE_STEPS):
      f1 = log_total(x1)
      if abs(f1 - target) <= _COHORT_RTOL or f1 == f0:
        break
      step = (target - f1) * (x1 - x0) / (f1 - f0)
      x0, f0, x1 = x1, f1, x1 + max(-0.3, min(0.3, step))
    return math.exp(x1), rates_at

  # Stage 1: a bracketed solve with the cheap integer-order RDP. Stage 2: a few
  # secant steps with the accountant's own (tighter, costlier) search ε from
  # there, with the stage-1 rates as hints.
  sigma, rates_at = solve("rdp_int", None, 0.5)
  sigma, rates_at = refine(accountant, sigma, rates_at)
  rates = rates_at(sigma)
  achieved = np.where(sizes > 0, math.inf, 0.0)
  for p in np.flatnonzero(np.isfinite(eps)):
    rates[p], achieved[p] = _tighten_rate(rates[p], eps[p], sigma, rounds, delta,
                                          accountant)
  return result(sigma, rates, achieved)
