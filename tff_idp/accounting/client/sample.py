"""SAMPLE for federated learning: IDP-FedAvg paper, Alg. 1 (GetGroupSamplingRates).

Budgets go in, one noise multiplier σ_SAMPLE and one Poisson sampling rate per
privacy group come out, for a DP-FedAvg run of ``rounds`` rounds in which client
i joins each round independently with probability q_i. The privacy of client i
is that of ``rounds`` compositions of the Poisson(q_i)-subsampled Gaussian(σ)
mechanism (Boenisch et al. 2023, Thm. 3.1, lifted from records to clients).

Searches run on a fast, conservative ε (vectorised integer-order RDP, or a
coarse pessimistic PLD); every returned value is then re-verified with a fresh
dp-accounting accountant and tightened until it is within budget. Where that
accountant shows the conservative search left real slack, a returned sampling
rate is also raised towards the largest rate it still certifies, since Alg. 1's
getSampleRate asks for the largest q within budget (see ``_tighten_rate``).
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
from tff_idp.errors import TffIdpError

# A budget that needs σ above this is reported as infeasible rather than
# returned: such a run would learn nothing.
MAX_NOISE_MULTIPLIER = 1e3
MIN_NOISE_MULTIPLIER = 1e-3
MIN_SAMPLING_RATE = 1e-9
# Coarse PLD grid used inside searches (pessimistic: ε is over-estimated).
_SEARCH_PLD_DISCRETIZATION = 3e-3


class InfeasibleBudgetError(TffIdpError, ValueError):
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
# Final verification raises q (or lowers σ) only when the exact ε leaves more
# than this share of the budget unused (or is 0). The PLD search runs on a
# pessimistic grid that by design leaves ~0.1-0.3% of ε (hence of q) unused;
# recovering that would cost several ~1 s exact PLD evaluations per group, so
# PLD raises only on slack beyond what that grid explains.
_RAISE_SLACK_RTOL = {"rdp": 1e-3, "pld": 1e-2}
# At most this many exact evaluations are spent raising one rate (or 1/σ).
_RAISE_MAX_EVALS = 25


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


def _has_slack(eps: float, target: float, accountant: str) -> bool:
  """Whether the exact ε leaves enough of the budget unused to search for it."""
  return eps == 0.0 or eps < target * (1.0 - _RAISE_SLACK_RTOL[accountant])


def _tighten_rate(q: float, target: float, sigma: float, rounds: int,
                  delta: float, accountant: str, max_rate: float = 1.0
                  ) -> tuple[float, float]:
  """Moves a searched q to the largest rate the exact accountant certifies.

  IDP-FedAvg Alg. 1's getSampleRate returns the largest q <= ``max_rate`` with
  ε(q) <= ε_p. The search that proposes ``q`` uses a conservative stand-in for
  the exact ε, so first q is lowered until the exact accountant confirms
  ε(q) <= ``target``. The stand-in can also be far too conservative:
  dp-accounting's RDP uses orders down to 1.1, and reports ε = 0 outright when
  the composed RDP at some order is below ~δ² (its KL-divergence bound), while
  the search ε (orders >= ~1.4) does not see that regime and can stop ~30%
  below the largest feasible rate. So when the exact ε at the verified q leaves
  more than ``_RAISE_SLACK_RTOL[accountant]`` of the budget unused (or is 0), q
  is raised with ``_raise_while_feasible`` on the exact accountant, at most to
  ``max_rate``.

  Returns:
    (q, exact ε at q), with exact ε <= ``target``.
  """
  shrink = 1e-4
  for _ in range(60):
    eps = exact.epsilon(q, sigma, rounds, delta, accountant)
    if eps <= target:
      break
    q *= 1.0 - shrink
    shrink = min(0.5, shrink * 2.0)
  else:
    raise RuntimeError(
        f"could not verify a sampling rate within ε={target} (σ={sigma}); "
        "refusing to return an unverified rate.")
  if q >= max_rate or not _has_slack(eps, target, accountant):
    return q, eps
  return _raise_while_feasible(
      lambda x: exact.epsilon(x, sigma, rounds, delta, accountant), q, eps,
      target, max_rate, _SEARCH_RTOL[accountant])


def _raise_while_feasible(eps_at: Callable[[float], float], x: float,
                          eps_x: float, target: float, x_max: float,
                          rtol: float) -> tuple[float, float]:
  """Largest verified point in [x, x_max] with eps_at <= target (eps_at increasing).

  ``eps_at`` is the exact accountant's ε; ``x`` must be verified with
  ``eps_at(x) = eps_x <= target``. A bracketed search: geometric expansion
  upwards (first step target/ε, since ε grows about linearly or faster; 2x
  from ε = 0), then ``largest_feasible`` (Illinois/bisection in log space) on
  the predicate eps_at <= target, which also copes with a cliff where the
  exact ε jumps from 0 to above target. At most ``_RAISE_MAX_EVALS``
  evaluations. Only points whose ε was evaluated and found within budget are
  returned (not ``largest_feasible``'s exp(log(x)), which may differ in the
  last bit); a point where dp-accounting fails (ValueError, e.g. at tiny rates)
  counts as over budget.

  Returns:
    (x', eps_at(x')) with x <= x' <= x_max and eps_at(x') <= target.
  """
  cache = {x: eps_x}
  best = [x, eps_x]

  def g(y: float) -> float:
    y = min(y, x_max)
    if y not in cache:
      try:
        cache[y] = eps_at(y)
      except ValueError:
        cache[y] = math.inf
      if cache[y] <= target and y > best[0]:
        best[:] = [y, cache[y]]
    return cache[y]

  lo = x
  factor = min(2.0, target / eps_x) if eps_x > 0.0 else 2.0
  factor = max(factor, 1.0 + 10.0 * rtol)
  while True:
    hi = min(x_max, lo * factor)
    if g(hi) > target:
      break
    lo = hi
    if lo >= x_max or len(cache) > _RAISE_MAX_EVALS:
      return best[0], best[1]
    factor = factor * factor
  budget = _RAISE_MAX_EVALS + 1 - len(cache)
  if budget > 0:
    largest_feasible(g, lo, hi, target, x_rtol=rtol, f_rtol=rtol, max_evals=budget)
  return best[0], best[1]


def _tighten_noise(sigma: float, target: float, q: float, rounds: int,
                   delta: float, accountant: str) -> float:
  """Moves a searched σ to the smallest one the exact accountant certifies.

  Alg. 1's getNoise returns the smallest σ with ε(σ) <= target. σ is raised
  until the exact accountant confirms ε(σ) <= target; then, as in
  ``_tighten_rate`` (same conservative search ε, e.g. optimal order 1.3 or the
  ε = 0 regime), if that leaves real slack, σ is lowered (1/σ raised with
  ``_raise_while_feasible``) while the exact check holds, down to
  ``MIN_NOISE_MULTIPLIER``.
  """
  grow = 1e-4
  for _ in range(60):
    eps = exact.epsilon(q, sigma, rounds, delta, accountant)
    if eps <= target:
      break
    sigma *= 1.0 + grow
    grow = min(1.0, grow * 2.0)
  else:
    raise RuntimeError(
        f"could not verify a noise multiplier within ε={target} (q={q}); "
        "refusing to return an unverified noise multiplier.")
  if sigma <= MIN_NOISE_MULTIPLIER or not _has_slack(eps, target, accountant):
    return sigma
  # In t = 1/σ, ε is increasing; σ = 1/t is computed the same way here and
  # inside eps_at, so the returned σ is exactly the one verified.
  t, _ = _raise_while_feasible(
      lambda t: exact.epsilon(q, 1.0 / t, rounds, delta, accountant),
      1.0 / sigma, eps, target, 1.0 / MIN_NOISE_MULTIPLIER,
      _SEARCH_RTOL[accountant])
  return sigma if t == 1.0 / sigma else 1.0 / t


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
  return _tighten_rate(q, epsilon, sigma, rounds, delta, accountant, max_rate)[0]


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

  def verified_rates_at(sigma: float, rates: Optional[np.ndarray] = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Rates at σ moved to the exact accountant's budget edge, and their ε.

    ``rates``: the search rates at σ, if already computed (copied, not changed).
    """
    rates = rates_at(sigma) if rates is None else rates.copy()
    achieved = np.where(sizes > 0, math.inf, 0.0)
    for p in np.flatnonzero(np.isfinite(eps)):
      rates[p], achieved[p] = _tighten_rate(rates[p], eps[p], sigma, rounds,
                                            delta, accountant, max_rate)
    return rates, achieved

  def rematch(sigma: float, rates: np.ndarray, achieved: np.ndarray
              ) -> tuple[float, np.ndarray, np.ndarray]:
    """Secant steps on log σ for Σ_p |G_p| q_p(σ) = c with the verified rates.

    Raising rates to the exact accountant's budget edge (``_tighten_rate``) can
    push the expected cohort above c, e.g. by ~0.5% for a single group; Alg. 1
    then wants a smaller σ. Every trial is fully verified, and the one whose
    cohort is closest to c is returned, so this never does worse than its start.
    """
    target = math.log(c)
    log_total = lambda r: math.log(max(1e-300, float(np.dot(sizes, r))))
    x0, f0 = math.log(sigma), log_total(rates)
    best = (abs(f0 - target), sigma, rates, achieved)
    x1 = x0 + max(-0.02, min(0.02, (target - f0) / 2.0))
    for _ in range(_REFINE_STEPS):
      try:
        r1, a1 = verified_rates_at(math.exp(x1))
      except InfeasibleBudgetError:
        break
      f1 = log_total(r1)
      if abs(f1 - target) < best[0]:
        best = (abs(f1 - target), math.exp(x1), r1, a1)
      if abs(f1 - target) <= _COHORT_RTOL or f1 == f0:
        break
      step = (target - f1) * (x1 - x0) / (f1 - f0)
      x0, f0, x1 = x1, f1, x1 + max(-0.3, min(0.3, step))
    return best[1], best[2], best[3]

  # Stage 1: a bracketed solve with the cheap integer-order RDP. Stage 2: a few
  # secant steps with the accountant's own (tighter, costlier) search ε from
  # there, with the stage-1 rates as hints. Stage 3 (rare): if the exact
  # accountant let some rates rise enough to overshoot the cohort, a few
  # secant steps on the verified rates bring it back to c.
  sigma, rates_at = solve("rdp_int", None, 0.5)
  sigma, rates_at = refine(accountant, sigma, rates_at)
  searched = rates_at(sigma)
  searched_total = float(np.dot(sizes, searched))
  rates, achieved = verified_rates_at(sigma, searched)
  total = float(np.dot(sizes, rates))
  if total > searched_total and total > c * (1.0 + _COHORT_RTOL):
    sigma, rates, achieved = rematch(sigma, rates, achieved)
  return result(sigma, rates, achieved)
