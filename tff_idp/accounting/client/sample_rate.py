"""SAMPLE's building blocks (IDP-FedAvg paper, Alg. 1 subroutines): getSampleRate, getNoise.

The privacy of client i is that of ``rounds`` compositions of the
Poisson(q_i)-subsampled Gaussian(σ) mechanism (Boenisch et al. 2023, Thm. 3.1,
lifted from records to clients). :func:`get_sample_rate` gives the largest q
within a budget at a given σ, :func:`get_noise` the smallest σ at a given q;
the Alg. 1 solver that combines them over groups is
:mod:`tff_idp.accounting.client.sample`.

Searches run on a fast, conservative ε (vectorised integer-order RDP, or a
coarse pessimistic PLD); every returned value is then re-verified with a fresh
dp-accounting accountant and tightened until it is within budget. Where that
accountant shows the conservative search left real slack, a returned sampling
rate is also raised towards the largest rate it still certifies, since Alg. 1's
getSampleRate asks for the largest q within budget (see ``tighten_rate``).
"""
from __future__ import annotations

import math
from typing import Callable

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
SEARCH_RTOL = {"rdp_int": 1e-7, "rdp": 1e-4, "pld": 2e-4}
# Final verification raises q (or lowers σ) only when the exact ε leaves more
# than this share of the budget unused (or is 0). The PLD search runs on a
# pessimistic grid that by design leaves ~0.1-0.3% of ε (hence of q) unused;
# recovering that would cost several ~1 s exact PLD evaluations per group, so
# PLD raises only on slack beyond what that grid explains.
_RAISE_SLACK_RTOL = {"rdp": 1e-3, "pld": 1e-2}
# At most this many exact evaluations are spent raising one rate (or 1/σ).
_RAISE_MAX_EVALS = 25


def search_epsilon_fn(search: str) -> EpsilonFn:
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


def tighten_rate(q: float, target: float, sigma: float, rounds: int,
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
      target, max_rate, SEARCH_RTOL[accountant])


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
  ``tighten_rate`` (same conservative search ε, e.g. optimal order 1.3 or the
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
      SEARCH_RTOL[accountant])
  return sigma if t == 1.0 / sigma else 1.0 / t


def search_sample_rate(epsilon: float, delta: float, sigma: float, rounds: int,
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
  hint = search_sample_rate(epsilon, delta, sigma, rounds,
                             search_epsilon_fn("rdp_int"), max_rate,
                             rtol=SEARCH_RTOL["rdp_int"])
  q = search_sample_rate(epsilon, delta, sigma, rounds,
                          search_epsilon_fn(accountant), max_rate, hint=hint,
                          rtol=SEARCH_RTOL[accountant])
  if math.isinf(epsilon):
    return q
  return tighten_rate(q, epsilon, sigma, rounds, delta, accountant, max_rate)[0]


def search_noise(epsilon: float, delta: float, q: float, rounds: int,
                  eps_fn: EpsilonFn, rtol: float = 1e-7) -> float:
  """Smallest σ (to tolerance) with eps_fn(q, σ) <= ε (no exact verification).

  Doubles σ from 1 until it is feasible, with ``MAX_NOISE_MULTIPLIER`` itself as
  the last step (σ = 1000 is tried; the doubling alone jumped from 512 to 1024
  and refused budgets that σ in (512, 1000] meets).
  """
  g = lambda t: eps_fn(q, 1.0 / t, rounds, delta)  # increasing in t = 1/σ
  t_lo = 1.0
  while g(t_lo) > epsilon:
    if t_lo <= 1.0 / MAX_NOISE_MULTIPLIER:  # σ = 1000 tried and infeasible
      raise InfeasibleBudgetError(
          f"ε={epsilon} at δ={delta} over {rounds} rounds with sampling rate "
          f"q={q:.4g} would need a noise multiplier above {MAX_NOISE_MULTIPLIER:g}; "
          "raise ε, lower the rounds or the clients per round.")
    t_lo = max(t_lo / 2.0, 1.0 / MAX_NOISE_MULTIPLIER)
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
  sigma = search_noise(epsilon, delta, q, rounds, search_epsilon_fn(accountant),
                        SEARCH_RTOL[accountant])
  return _tighten_noise(sigma, epsilon, q, rounds, delta, accountant)
