"""SAMPLE for federated learning: IDP-FedAvg paper, Alg. 1 (GetGroupSamplingRates).

Budgets go in, one noise multiplier σ_SAMPLE and one Poisson sampling rate per
privacy group come out, for a DP-FedAvg run of ``rounds`` rounds in which client
i joins each round independently with probability q_i. The privacy of client i
is that of ``rounds`` compositions of the Poisson(q_i)-subsampled Gaussian(σ)
mechanism (Boenisch et al. 2023, Thm. 3.1, lifted from records to clients).

This module is the Alg. 1 solver; its subroutines getSampleRate and getNoise
(:func:`get_sample_rate`, :func:`get_noise`, re-exported here) and the exact
tightening live in :mod:`tff_idp.accounting.client.sample_rate`. Searches run
on a fast, conservative ε; every returned rate is re-verified with a fresh
dp-accounting accountant before :func:`get_group_sampling_rates` returns.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable, Optional, Sequence

import numpy as np
from scipy import optimize

from tff_idp.accounting import exact
from tff_idp.accounting import strict_json
from tff_idp.accounting import validation
from tff_idp.accounting.client import sample_rate
from tff_idp.accounting.client.sample_rate import InfeasibleBudgetError  # noqa: F401  (re-exported)
from tff_idp.accounting.client.sample_rate import get_noise  # noqa: F401  (re-exported)
from tff_idp.accounting.client.sample_rate import get_sample_rate  # noqa: F401  (re-exported)
from tff_idp.accounting.search import secant_on_log

# Stage-2 (refined ε) cohort matching: relative tolerance and secant steps.
_COHORT_RTOL = 1e-3
_REFINE_STEPS = 8
# Stage 2 is skipped when stage 1 already uses this share of every budget.
_SKIP_RTOL = 2e-3
# Relative tolerance on σ in the cohort-size root search.
_SIGMA_XTOL = {"rdp_int": 1e-6, "rdp": 1e-4, "pld": 2e-4}

RatesAt = Callable[..., np.ndarray]


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
    return json.dumps(strict_json.finite_or_none(self.to_dict()), indent=2, allow_nan=False)


@dataclasses.dataclass
class _GroupProblem:
  """One Alg. 1 instance: validated budgets, group sizes and settings."""
  eps: np.ndarray
  sizes: np.ndarray
  delta: float
  rounds: int
  c: float
  accountant: str
  max_rate: float
  hints: dict = dataclasses.field(default_factory=dict)

  @property
  def finite(self) -> np.ndarray:
    return np.isfinite(self.eps) & (self.sizes > 0)

  def cohort(self, rates: np.ndarray) -> float:
    """Σ_p |G_p| q_p, the expected clients per round."""
    return float(np.dot(self.sizes, rates))

  def rates_at(self, search: str) -> RatesAt:
    """q_p(σ) for every group under the search ε ``search``.

    ``lenient`` (used only while bracketing σ): a non-empty group that would
    need q < MIN_SAMPLING_RATE at a trial σ adds < N·1e-9 expected clients and
    counts as 0; empty groups are skipped. Strict: every finite-budget group,
    empty ones too (they get the rate such a client would have).
    """
    eps_fn = sample_rate.search_epsilon_fn(search)
    rtol = sample_rate.SEARCH_RTOL[search]

    def rates(sigma: float, lenient: bool = False) -> np.ndarray:
      out = np.full(len(self.eps), self.max_rate)
      for p in np.flatnonzero(np.isfinite(self.eps) & ((self.sizes > 0) | (not lenient))):
        try:
          out[p] = sample_rate.search_sample_rate(
              self.eps[p], self.delta, sigma, self.rounds, eps_fn, self.max_rate,
              self.hints.get(p), rtol)
        except InfeasibleBudgetError:
          if not lenient:
            raise
          out[p] = 0.0
          continue
        if self.sizes[p] > 0:
          self.hints[p] = out[p]
      return out

    return rates

  def verified_rates_at(self, sigma: float, rates: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Search rates at σ moved to the exact accountant's budget edge, and their ε."""
    rates = rates.copy()
    achieved = np.where(self.sizes > 0, math.inf, 0.0)
    for p in np.flatnonzero(np.isfinite(self.eps)):
      rates[p], achieved[p] = sample_rate.tighten_rate(
          rates[p], self.eps[p], sigma, self.rounds, self.delta, self.accountant,
          self.max_rate)
    return rates, achieved


def _check_problem(epsilons, group_sizes, delta, rounds, clients_per_round, accountant,
                   max_rate) -> _GroupProblem:
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
  validation.check_cohort(clients_per_round, int(sizes.sum()))
  exact.check_accountant(accountant)
  return _GroupProblem(eps, sizes, delta, rounds, float(clients_per_round), accountant,
                       max_rate)


def _result(problem: _GroupProblem, sigma: float, rates, achieved) -> GroupCalibration:
  """The calibration, refused loudly if any group is over budget."""
  for e_t, e_a in zip(problem.eps, achieved):
    if e_a > e_t:
      raise RuntimeError(
          f"verification failed: a group with ε={e_t} reached ε={e_a}; "
          "refusing to return an over-budget calibration.")
  return GroupCalibration(float(sigma), tuple(float(q) for q in rates),
                          tuple(float(e) for e in problem.eps),
                          tuple(float(e) for e in achieved),
                          tuple(int(n) for n in problem.sizes), problem.delta,
                          problem.rounds, problem.c, problem.accountant)


def _bracket_solve(problem: _GroupProblem, search: str, shrink: float
                   ) -> tuple[float, RatesAt]:
  """Stage 1: σ with Σ_p |G_p| q_p(σ) = c, by a bracketed root search on log σ."""
  eps_fn = sample_rate.search_epsilon_fn(search)
  rates_at = problem.rates_at(search)
  excess_cache: dict[float, float] = {}

  def excess(log_sigma: float) -> float:
    if log_sigma not in excess_cache:
      excess_cache[log_sigma] = problem.cohort(
          rates_at(math.exp(log_sigma), lenient=True)) - problem.c
    return excess_cache[log_sigma]

  # The paper's starting point: σ for the strictest budget at rate c/N.
  num_clients = int(problem.sizes.sum())
  sigma_hi = sample_rate.search_noise(
      float(problem.eps[problem.finite].min()), problem.delta,
      min(1.0, problem.c / num_clients), problem.rounds, eps_fn,
      sample_rate.SEARCH_RTOL[search])
  while excess(math.log(sigma_hi)) < 0:  # only possible through max_rate < c/N
    sigma_hi *= 2.0
    if sigma_hi > sample_rate.MAX_NOISE_MULTIPLIER:
      raise InfeasibleBudgetError(
          f"cannot reach {problem.c:g} expected clients per round with max_rate="
          f"{problem.max_rate}; raise max_rate or lower clients_per_round.")
  sigma_lo = sigma_hi
  while excess(math.log(sigma_lo)) > 0:
    if sigma_lo <= sample_rate.MIN_NOISE_MULTIPLIER:  # σ = MIN tried, cohort still above c
      # Budgets so loose that the cohort exceeds c at every σ: no σ meets Alg. 1's
      # cohort target, and returning one would silently sample more clients than asked.
      cohort_at_min = problem.c + excess(math.log(sigma_lo))
      raise InfeasibleBudgetError(
          f"the budgets are so loose that even at noise multiplier {sigma_lo:g} the groups "
          f"give {cohort_at_min:.4g} > {problem.c:g} expected clients per round; lower "
          "max_rate (to at most clients_per_round / num_clients for every client at the "
          "cap) or raise clients_per_round.")
    sigma_lo = max(sigma_lo * shrink, sample_rate.MIN_NOISE_MULTIPLIER)
  if sigma_lo == sigma_hi:
    return sigma_hi, rates_at
  return math.exp(optimize.brentq(excess, math.log(sigma_lo), math.log(sigma_hi),
                                  xtol=_SIGMA_XTOL[search], rtol=1e-12)), rates_at


def _refine(problem: _GroupProblem, search: str, sigma1: float, stage1_rates_at: RatesAt
            ) -> tuple[float, RatesAt]:
  """Stage 2: secant steps on log σ for the cohort target under a costlier ε.

  Each evaluation of this ε can take milliseconds, so instead of a full
  bracketed solve we take at most ``_REFINE_STEPS`` secant steps from the
  stage-1 σ and stop once the expected cohort is within ``_COHORT_RTOL``.
  Whatever σ results, its rates are computed and verified exactly afterwards.
  """
  eps_fn = sample_rate.search_epsilon_fn(search)
  # Skip the costly ε where the stage-1 rates already (nearly) use every
  # group's budget under it (integer orders optimal, e.g. moderate σ and ε).
  stage1_rates = stage1_rates_at(sigma1)
  if all(eps_fn(stage1_rates[p], sigma1, problem.rounds, problem.delta)
         >= (1 - _SKIP_RTOL) * problem.eps[p] for p in np.flatnonzero(problem.finite)):
    return sigma1, stage1_rates_at
  rates_at = problem.rates_at(search)

  def log_total(log_sigma: float) -> float:
    return math.log(max(1e-300, problem.cohort(rates_at(math.exp(log_sigma), lenient=True))))

  target = math.log(problem.c)
  x0 = math.log(sigma1)
  f0 = log_total(x0)
  if abs(f0 - target) <= _COHORT_RTOL:
    return sigma1, rates_at
  x, _ = secant_on_log(log_total, x0, f0, target, max_steps=_REFINE_STEPS,
                       tol=_COHORT_RTOL)
  return math.exp(x), rates_at


def _rematch(problem: _GroupProblem, rates_at: RatesAt, sigma: float, rates: np.ndarray,
             achieved: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
  """Stage 3: secant steps on log σ for the cohort target with verified rates.

  Raising rates to the exact accountant's budget edge can push the expected
  cohort above c, e.g. by ~0.5% for a single group; Alg. 1 then wants a
  smaller σ. Every trial is fully verified, and the one whose cohort is
  closest to c is returned, so this never does worse than its start.
  """
  target = math.log(problem.c)
  verified: dict[float, tuple[np.ndarray, np.ndarray]] = {}

  def log_total(x: float) -> Optional[float]:
    try:
      verified[x] = problem.verified_rates_at(math.exp(x), rates_at(math.exp(x)))
    except InfeasibleBudgetError:
      return None
    return math.log(max(1e-300, problem.cohort(verified[x][0])))

  x0 = math.log(sigma)
  f0 = math.log(max(1e-300, problem.cohort(rates)))
  best = (abs(f0 - target), sigma, rates, achieved)
  _, trials = secant_on_log(log_total, x0, f0, target, max_steps=_REFINE_STEPS,
                            tol=_COHORT_RTOL)
  for x, f in trials:
    if abs(f - target) < best[0]:
      best = (abs(f - target), math.exp(x), *verified[x])
  return best[1], best[2], best[3]


def _noise_at_saturation(problem: _GroupProblem, searched: np.ndarray) -> Optional[float]:
  """The smallest σ when every private group is sampled at ``max_rate``, else None.

  The cohort Σ_p |G_p| q_p(σ) is flat once every rate is capped: then c is
  the saturated cohort (c = N·max_rate) and Alg. 1's σ is the smallest one
  that keeps every group at the cap, max_p getNoise(ε_p, δ, max_rate, I).
  The root searches above would return some σ on the flat part instead.
  """
  groups = np.flatnonzero(problem.finite)
  if not np.all(searched[groups] >= problem.max_rate):
    return None
  return max(sample_rate.get_noise(problem.eps[p], problem.delta, problem.max_rate,
                                   problem.rounds, problem.accountant) for p in groups)


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
  c, no σ can satisfy the cohort target and a ValueError says what to change;
  likewise if the budgets are so loose that the cohort exceeds c even at
  σ = ``MIN_NOISE_MULTIPLIER`` (InfeasibleBudgetError).

  Stage 1 is a bracketed solve with the cheap integer-order RDP; stage 2 a few
  secant steps with the accountant's own (tighter, costlier) search ε, with
  the stage-1 rates as hints; stage 3 (rare), if the exact accountant let some
  rates rise enough to overshoot the cohort, a few secant steps on the
  verified rates bring it back to c.

  Raises:
    ValueError / InfeasibleBudgetError: with a message saying what to change.
    RuntimeError: if the final exact verification fails (never silent).
  """
  problem = _check_problem(epsilons, group_sizes, delta, rounds, clients_per_round,
                           accountant, max_rate)
  eps, sizes, c = problem.eps, problem.sizes, problem.c
  if not problem.finite.any():
    # Non-private run (σ = 0): a client with a finite budget could never be
    # sampled, so empty finite-budget groups get q = 0, not c/N.
    num_clients = int(sizes.sum())
    return _result(problem, 0.0, [c / num_clients if math.isinf(e) else 0.0 for e in eps],
                   [math.inf if n > 0 else 0.0 for n in sizes])
  infinite = ~problem.finite
  always_in = float(sizes[infinite].sum() * problem.max_rate)
  if always_in >= c:
    raise ValueError(
        f"the {int(sizes[infinite].sum())} clients with ε=inf are sampled at "
        f"rate {problem.max_rate} and alone give {always_in:g} >= {c:g} expected clients "
        "per round, leaving no room for the private groups; raise "
        "clients_per_round above that, or set max_rate below "
        f"{c / max(1, sizes[infinite].sum()):.4g}.")
  sigma, rates_at = _bracket_solve(problem, "rdp_int", 0.5)
  sigma, rates_at = _refine(problem, accountant, sigma, rates_at)
  searched = rates_at(sigma)
  saturated_sigma = _noise_at_saturation(problem, searched)
  if saturated_sigma is not None and saturated_sigma < sigma:
    # Every group at the cap; the exact check below lowers any rate it cannot
    # certify (an empty group with a stricter budget).
    sigma = saturated_sigma
    searched = np.full(len(eps), problem.max_rate)
  rates, achieved = problem.verified_rates_at(sigma, searched)
  total = problem.cohort(rates)
  if total > problem.cohort(searched) and total > c * (1.0 + _COHORT_RTOL):
    sigma, rates, achieved = _rematch(problem, rates_at, sigma, rates, achieved)
  return _result(problem, sigma, rates, achieved)
