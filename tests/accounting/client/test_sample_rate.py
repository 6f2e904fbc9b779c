"""getSampleRate's exact tightening (IDP-FedAvg Alg. 1 subroutine), checked with fresh dp-accounting.

Every ε here comes from a freshly built dp-accounting accountant, never from
``tff_idp.accounting.exact``.
"""
import math

import dp_accounting
import pytest

from tff_idp.accounting.client import sample_rate


def fresh_epsilon(q, sigma, rounds, delta):
  acc = dp_accounting.rdp.RdpAccountant()
  acc.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), rounds))
  return acc.get_epsilon(delta)


SETTINGS = [  # (target ε, σ, rounds, δ, starting q well below the edge)
    (1.0, 0.84, 420, 1e-4, 1e-3),
    (2.0, 0.84, 420, 1e-4, 4e-3),
    (3.0, 0.84, 420, 1e-4, 8e-3),
    (0.5, 1.2, 100, 1e-5, 1e-3),
    (4.0, 1.0, 50, 1e-5, 2e-2),
    (8.0, 0.9, 200, 1e-3, 3e-2),
]


@pytest.mark.parametrize("target, sigma, rounds, delta, start", SETTINGS)
def test_raised_rate_is_within_budget_by_a_fresh_accountant_and_tight(target, sigma, rounds,
                                                                       delta, start):
  """The step that raises q to the budget edge never lands over the budget (issue 32).

  ``tighten_rate`` starts from a q with slack, so it raises q on the exact
  accountant. Property: a fresh dp-accounting RdpAccountant gives ε(q) <=
  target with no tolerance, and q is the edge (1% more breaks the budget).
  Bug caught: accepting a point up to 1e-4 relative over budget while
  raising (the search then converges onto that relaxed edge).
  """
  q, eps = sample_rate.tighten_rate(start, target, sigma, rounds, delta, "rdp")
  assert q > start
  assert fresh_epsilon(q, sigma, rounds, delta) <= target
  assert eps == pytest.approx(fresh_epsilon(q, sigma, rounds, delta), rel=1e-12)
  assert fresh_epsilon(q * 1.01, sigma, rounds, delta) > target


@pytest.mark.parametrize("slope,x_max,expect_x", [
    (3.0, 10.0, 1 / 3),    # the budget edge lies inside [x, x_max]: bracket, then search
    (0.01, 5.0, 5.0),      # never over budget up to x_max: the expansion returns x_max
])
def test_raise_while_feasible_returns_the_largest_verified_point_and_its_own_epsilon(
    slope, x_max, expect_x):
  """The step that raises q (or 1/σ) to the budget edge (issue 32, mutation survivors).

  Property: the returned (x', ε') has ε' = eps_at(x') exactly (the point was
  evaluated, not interpolated), ε' <= target, x <= x' <= x_max, and x' is
  within the relative tolerance of the true edge. Bugs caught: returning
  (ε', ε') instead of (x', ε') on either return path; keeping a point that is
  not the largest feasible one; counting an accountant failure as feasible.
  """
  target, rtol = 1.0, 1e-6
  calls = []

  def eps_at(y):
    calls.append(y)
    if y > 0.9 * x_max and slope > 1:  # dp-accounting failing far above the edge
      raise ValueError("no answer here")
    return slope * y

  x0 = 0.01
  x, eps = sample_rate._raise_while_feasible(eps_at, x0, slope * x0, target, x_max, rtol)
  assert x0 <= x <= x_max
  assert eps == slope * x and eps <= target
  assert x == pytest.approx(expect_x, rel=10 * rtol)
  assert len(calls) <= sample_rate._RAISE_MAX_EVALS + 1


def test_raise_while_feasible_treats_an_accountant_failure_as_over_budget():
  """A point where the accountant raises ValueError is never returned (it counts as ε = ∞)."""
  def eps_at(y):
    if y > 0.5:
      raise ValueError("dp-accounting failed")
    return 0.0  # the ε = 0 regime: every point below the cliff is free
  x, eps = sample_rate._raise_while_feasible(eps_at, 0.01, 0.0, 1.0, 1.0, 1e-6)
  assert x <= 0.5 and eps == 0.0
  assert x == pytest.approx(0.5, rel=1e-5)


def fresh_pld_epsilon(q, sigma, rounds, delta, discretization=1e-4):
  acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=discretization)
  acc.compose(dp_accounting.SelfComposedDpEvent(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), rounds))
  return acc.get_epsilon(delta)


# A synthetic search ε, linear in q/σ: its edges are known in closed form.
def linear_eps(q, sigma, rounds, delta):
  del delta
  return q * rounds / sigma


@pytest.mark.parametrize("hint", [None, 0.002, 0.05, 0.5])
def test_search_sample_rate_finds_the_edge_from_any_hint(hint):
  """search_sample_rate brackets the edge q* = εσ/T from above, below or a hint, and returns
  the largest q with eps_fn(q) <= ε, to its tolerance.

  With ε = 0.3, σ = 2, T = 60: q* = 0.01. Hints below and above the edge and
  none (expanding down from max_rate). Property: eps_fn(q) <= ε and q is
  within rtol of q*. Bugs caught: a wrong expansion direction or factor for
  either bracket side, a hint ignored or capped wrongly, returning the
  infeasible end.
  """
  q = sample_rate.search_sample_rate(0.3, 1e-5, 2.0, 60, linear_eps, hint=hint, rtol=1e-9)
  assert linear_eps(q, 2.0, 60, 1e-5) <= 0.3
  assert q == pytest.approx(0.01, rel=1e-8)


def test_search_sample_rate_caps_at_max_rate():
  """A budget that holds at max_rate (directly, or after expanding up from a hint, or with
  ε = ∞) returns max_rate exactly, never more. Bug caught: stepping past the cap or
  returning the last feasible point below it."""
  assert sample_rate.search_sample_rate(100.0, 1e-5, 2.0, 60, linear_eps, max_rate=0.5) == 0.5
  assert sample_rate.search_sample_rate(100.0, 1e-5, 2.0, 60, linear_eps, max_rate=0.5,
                                        hint=0.01) == 0.5
  assert sample_rate.search_sample_rate(100.0, 1e-5, 2.0, 60, linear_eps, max_rate=0.5,
                                        hint=0.9) == 0.5
  assert sample_rate.search_sample_rate(math.inf, 1e-5, 2.0, 60, linear_eps,
                                        max_rate=0.25) == 0.25
  # Just feasible at the cap after one upward step from the hint (0.2 -> 0.25).
  q = sample_rate.search_sample_rate(0.25 * 60 / 2.0, 1e-5, 2.0, 60, linear_eps,
                                     max_rate=0.25, hint=0.2)
  assert q == 0.25


def test_search_sample_rate_refuses_a_budget_below_the_smallest_rate():
  """A budget needing q < MIN_SAMPLING_RATE is refused by name, not returned as a tiny q.
  Bug caught: the refusal threshold moved or dropped (an endless or useless search)."""
  edge = sample_rate.MIN_SAMPLING_RATE / 3  # q* below the smallest rate
  with pytest.raises(sample_rate.InfeasibleBudgetError, match="even at sampling rate"):
    sample_rate.search_sample_rate(edge * 60 / 2.0, 1e-5, 2.0, 60, linear_eps)
  # A little above it (the bracket steps by 4x), the edge is found.
  edge = sample_rate.MIN_SAMPLING_RATE * 20
  q = sample_rate.search_sample_rate(edge * 60 / 2.0, 1e-5, 2.0, 60, linear_eps, rtol=1e-9)
  assert q == pytest.approx(edge, rel=1e-8)


@pytest.mark.parametrize("edge", [0.05, 0.4, 3.0, 40.0])
def test_search_noise_finds_the_smallest_sigma(edge):
  """search_noise returns the smallest σ with eps_fn(q, σ) <= ε: here σ* = qT/ε, on either
  side of its starting point σ = 1. Property: eps_fn(q, σ) <= ε and σ within rtol of σ*.
  Bugs caught: a wrong halving/doubling direction in the bracket, returning the
  infeasible end, inverting t = 1/σ wrongly."""
  q, rounds = 0.1, 50
  eps = q * rounds / edge
  sigma = sample_rate.search_noise(eps, 1e-5, q, rounds, linear_eps, rtol=1e-9)
  assert linear_eps(q, sigma, rounds, 1e-5) <= eps
  assert sigma == pytest.approx(edge, rel=1e-8)


def test_search_noise_limits():
  """σ* below MIN_NOISE_MULTIPLIER stops at a feasible σ <= 2·MIN (no endless halving);
  σ* above MAX_NOISE_MULTIPLIER is refused by name. Bugs caught: either limit moved,
  dropped or compared the wrong way; a loose default tolerance; an edge exactly on the
  doubling lattice taken as infeasible (``<`` for ``<=``: an invalid bracket, refused);
  σ* in (512, 1000] refused (the doubling jumped from 512 to 1024), or σ* in (1000, 1024]
  accepted."""
  q, rounds = 0.1, 50
  tiny = sample_rate.MIN_NOISE_MULTIPLIER / 4
  sigma = sample_rate.search_noise(q * rounds / tiny, 1e-5, q, rounds, linear_eps)
  # It stops on the first power-of-two σ below which the next halving passes MIN.
  assert sample_rate.MIN_NOISE_MULTIPLIER <= sigma < 2 * sample_rate.MIN_NOISE_MULTIPLIER
  for huge in (sample_rate.MAX_NOISE_MULTIPLIER * 1.01, sample_rate.MAX_NOISE_MULTIPLIER * 1.5):
    with pytest.raises(sample_rate.InfeasibleBudgetError, match="noise multiplier above 1000"):
      sample_rate.search_noise(q * rounds / huge, 1e-5, q, rounds, linear_eps)
  # An edge on the doubling lattice (σ* = 0.5, ε(t = 2) == ε exactly) is feasible.
  assert sample_rate.search_noise(2.0, 1e-5, 0.25, 4, linear_eps) == 0.5
  # The default tolerance is tight (1e-7), not "anywhere in the bracket".
  sigma = sample_rate.search_noise(q * rounds / 3.0, 1e-5, q, rounds, linear_eps)
  assert sigma == pytest.approx(3.0, rel=1e-6)
  # Every σ* up to the limit itself is found: the doubling's last step is σ = 1000, not 1024
  # (σ* in (512, 1000] was refused as "above 1000").
  for ok in (sample_rate.MAX_NOISE_MULTIPLIER * 0.4, 700.0, sample_rate.MAX_NOISE_MULTIPLIER):
    sigma = sample_rate.search_noise(q * rounds / ok, 1e-5, q, rounds, linear_eps, rtol=1e-9)
    assert sigma == pytest.approx(ok, rel=1e-8)
  # Through the exact accountant: ε = 0.005 at q = 1 needs σ ≈ 540, inside the limit.
  sigma = sample_rate.get_noise(0.005, 1e-5, 1.0, 1)
  assert 512 < sigma < sample_rate.MAX_NOISE_MULTIPLIER
  assert fresh_epsilon(1.0, sigma, 1, 1e-5) <= 0.005


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_get_sample_rate_is_the_budget_edge_of_a_fresh_accountant(accountant):
  """getSampleRate (Alg. 1): the largest q within budget, checked with a fresh dp-accounting
  accountant of the kind asked for.

  Property: ε(q) <= target and ε(1.01·q) > target (PLD: 1.03, its pessimistic
  search grid leaves up to 1% by design). Bugs caught: the search run on the
  wrong accountant or tolerance, the exact verification skipped, or a loose
  (not raised) rate.
  """
  target, sigma, rounds, delta = 1.5, 1.0, 40, 1e-5
  fresh = fresh_epsilon if accountant == "rdp" else fresh_pld_epsilon
  q = sample_rate.get_sample_rate(target, delta, sigma, rounds, accountant)
  assert fresh(q, sigma, rounds, delta) <= target
  assert fresh(q * (1.01 if accountant == "rdp" else 1.03), sigma, rounds, delta) > target


def test_get_sample_rate_caps_at_max_rate():
  """A budget that holds at max_rate gets max_rate; ε = ∞ gets max_rate. A tighter one gets
  its edge below the cap. Bugs caught: the cap dropped or replaced by 1."""
  assert sample_rate.get_sample_rate(math.inf, 1e-5, 1.0, 10, max_rate=0.3) == 0.3
  assert sample_rate.get_sample_rate(50.0, 1e-5, 1.0, 10, max_rate=0.3) == 0.3
  q = sample_rate.get_sample_rate(1.0, 1e-5, 1.0, 10, max_rate=0.3)
  assert q < 0.3 and fresh_epsilon(q, 1.0, 10, 1e-5) <= 1.0


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_get_noise_is_the_budget_edge_of_a_fresh_accountant(accountant):
  """getNoise (Alg. 1): the smallest σ within budget, by a fresh accountant of the kind asked.

  Property: ε(σ) <= target and ε(0.99·σ) > target (PLD: 0.97). ε = ∞ needs no
  noise (σ = 0). Bugs caught: the search on the wrong accountant, the exact
  check skipped, the lowering of a loose σ (``_tighten_noise``) broken.
  """
  target, q, rounds, delta = 2.0, 0.05, 100, 1e-5
  fresh = fresh_epsilon if accountant == "rdp" else fresh_pld_epsilon
  sigma = sample_rate.get_noise(target, delta, q, rounds, accountant)
  assert fresh(q, sigma, rounds, delta) <= target
  assert fresh(q, sigma * (0.99 if accountant == "rdp" else 0.97), rounds, delta) > target
  assert sample_rate.get_noise(math.inf, delta, q, rounds, accountant) == 0.0


@pytest.mark.parametrize("start_factor", [0.9, 1.5])
def test_tighten_noise_moves_any_sigma_to_the_exact_edge(start_factor):
  """_tighten_noise from an over-budget σ (0.9 of the edge: raised) or a wasteful one (1.5x:
  lowered) ends at the smallest σ a fresh RdpAccountant certifies.

  Property: ε(σ) <= target, ε(0.999·σ) > target. Bugs caught: the raise loop
  growing the wrong way or accepting an over-budget σ, the lowering step
  skipped or returning an unverified σ.
  """
  target, q, rounds, delta = 2.0, 0.05, 100, 1e-5
  edge = sample_rate.get_noise(target, delta, q, rounds)
  sigma = sample_rate._tighten_noise(edge * start_factor, target, q, rounds, delta, "rdp")
  assert fresh_epsilon(q, sigma, rounds, delta) <= target
  assert fresh_epsilon(q, sigma * 0.999, rounds, delta) > target


def test_search_epsilon_fns_are_conservative_and_the_pld_one_is_coarse():
  """The search ε never understates the exact one (a search on it cannot overshoot), and
  the PLD search ε is dp-accounting's PLD on the coarse 3e-3 grid (pessimistic).
  Bugs caught: the functions swapped or the PLD grid changed to the fine default
  (the searches then cost ~10x more)."""
  args = (0.03, 1.1, 80, 1e-5)
  exact_rdp = fresh_epsilon(*args)
  assert sample_rate.search_epsilon_fn("rdp_int")(*args) >= exact_rdp
  assert sample_rate.search_epsilon_fn("rdp")(*args) >= exact_rdp * (1 - 1e-9)
  assert (sample_rate.search_epsilon_fn("rdp_int")(*args)
          >= sample_rate.search_epsilon_fn("rdp")(*args))
  pld = sample_rate.search_epsilon_fn("pld")(*args)
  assert pld == pytest.approx(fresh_pld_epsilon(*args, discretization=3e-3), rel=1e-9)
  assert pld >= fresh_pld_epsilon(*args)
  with pytest.raises(ValueError, match="not supported"):
    sample_rate.search_epsilon_fn("gdp")


@pytest.mark.parametrize("call,match", [
    (lambda: sample_rate.get_sample_rate(0.0, 1e-5, 1.0, 10), "epsilon=0.0"),
    (lambda: sample_rate.get_sample_rate(1.0, 1.0, 1.0, 10), "delta=1.0"),
    (lambda: sample_rate.get_sample_rate(1.0, 1e-5, 0.0, 10), "noise_multiplier=0.0"),
    (lambda: sample_rate.get_sample_rate(1.0, 1e-5, 1.0, 0), "rounds=0"),
    (lambda: sample_rate.get_sample_rate(1.0, 1e-5, 1.0, 10, max_rate=1.5), "max_rate=1.5"),
    (lambda: sample_rate.get_sample_rate(1.0, 1e-5, 1.0, 10, "gdp"), "not supported"),
    (lambda: sample_rate.get_noise(-1.0, 1e-5, 0.1, 10), "epsilon=-1.0"),
    (lambda: sample_rate.get_noise(1.0, 0.0, 0.1, 10), "delta=0.0"),
    (lambda: sample_rate.get_noise(1.0, 1e-5, 1.5, 10), "q=1.5"),
    (lambda: sample_rate.get_noise(1.0, 1e-5, 0.1, 2.5), "rounds=2.5"),
    (lambda: sample_rate.get_noise(1.0, 1e-5, 0.1, 10, "gdp"), "not supported"),
])
def test_getsamplerate_and_getnoise_check_their_inputs(call, match):
  """Each argument of getSampleRate/getNoise is validated and named in the error. Bug caught:
  a check dropped (a nonsense budget silently calibrated) or the wrong name reported."""
  with pytest.raises(ValueError, match=match):
    call()


def _counting_exact(monkeypatch):
  """Counts the exact accountant calls that sample_rate makes."""
  calls = []
  real = sample_rate.exact.epsilon

  def counted(*args, **kwargs):
    calls.append(args)
    return real(*args, **kwargs)

  monkeypatch.setattr(sample_rate.exact, "epsilon", counted)
  return calls


def test_tighten_rate_raises_only_where_the_exact_epsilon_leaves_real_slack(monkeypatch):
  """The raise costs exact (slow) accountant calls, so it runs only where ε(q) is more than
  _RAISE_SLACK_RTOL below the budget (IDP-FedAvg Alg. 1 wants the largest q; a point
  within that share of the edge is kept as is).

  Three starting rates, each placed by a fresh accountant: at the edge, just inside the
  slack threshold (kept, one exact call), and 1% below the edge (raised to the edge).
  Bugs caught: the slack test inverted, made always true, or compared against
  target·(1 + rtol) (a raise search, up to 25 calls, on every verified rate), or
  never true (a loose rate returned).
  """
  target, sigma, rounds, delta = 1.0, 0.84, 420, 1e-4
  rtol = sample_rate._RAISE_SLACK_RTOL["rdp"]
  edge, _ = sample_rate.tighten_rate(1e-3, target, sigma, rounds, delta, "rdp")
  inside = edge * (1 - rtol / 4)
  assert target * (1 - rtol) < fresh_epsilon(inside, sigma, rounds, delta) <= target
  calls = _counting_exact(monkeypatch)
  for q in (edge, inside):
    calls.clear()
    assert sample_rate.tighten_rate(q, target, sigma, rounds, delta, "rdp")[0] == q
    assert len(calls) == 1
  calls.clear()
  below = edge * 0.99
  assert fresh_epsilon(below, sigma, rounds, delta) < target * (1 - rtol)
  q, eps = sample_rate.tighten_rate(below, target, sigma, rounds, delta, "rdp")
  assert q > below and eps <= target and len(calls) > 1
  assert fresh_epsilon(q * 1.01, sigma, rounds, delta) > target


@pytest.mark.parametrize("over", [1.0005, 1.3, 4.0])
def test_tighten_rate_lowers_an_over_budget_rate_into_the_budget(over):
  """A searched q above the exact edge (the search ε is only an approximation) is lowered
  until a fresh RdpAccountant finds it within budget, and ends at the edge.
  Bugs caught: the lowering step growing the wrong way or stalling, an over-budget q
  accepted."""
  target, sigma, rounds, delta = 2.0, 0.84, 420, 1e-4
  edge, _ = sample_rate.tighten_rate(4e-3, target, sigma, rounds, delta, "rdp")
  q, eps = sample_rate.tighten_rate(edge * over, target, sigma, rounds, delta, "rdp")
  assert fresh_epsilon(q, sigma, rounds, delta) <= target
  assert eps == pytest.approx(fresh_epsilon(q, sigma, rounds, delta), rel=1e-12)
  assert fresh_epsilon(q * 1.01, sigma, rounds, delta) > target


def test_raise_while_feasible_keeps_a_point_whose_epsilon_is_exactly_the_budget():
  """ε(x') == target is within budget: on a plateau at exactly the target (ε = 0 up to 0.2,
  then exactly 1.0 up to 0.6, then above), the returned point lies on the plateau.
  Bug caught: ``<`` for ``<=`` when recording the best verified point, which throws
  away every point at the budget edge (here a 3x lower rate)."""
  def eps_at(y):
    return 0.0 if y < 0.2 else (1.0 if y < 0.6 else 5.0)

  x, eps = sample_rate._raise_while_feasible(eps_at, 0.01, 0.0, 1.0, 1.0, 1e-6)
  assert eps == 1.0 and 0.2 <= x < 0.6


def test_search_sample_rate_defaults_and_an_edge_hint():
  """Defaults: the cap is 1 (a rate is a probability) and the tolerance tight (1e-7). A
  hint exactly at the edge (ε(hint) == budget, exact in floats: 0.25·4/1 = 1) is
  feasible and returned. Bugs caught: a default cap of 2, a default tolerance of ~1
  (any point in the bracket), the edge test ``<`` for ``<=`` (the bracket is then
  built on the wrong side and the search refuses it)."""
  assert sample_rate.search_sample_rate(100.0, 1e-5, 2.0, 60, linear_eps) == 1.0
  q = sample_rate.search_sample_rate(0.3, 1e-5, 2.0, 60, linear_eps)
  assert linear_eps(q, 2.0, 60, 1e-5) <= 0.3 and q == pytest.approx(0.01, rel=1e-6)
  assert sample_rate.search_sample_rate(1.0, 1e-5, 1.0, 4, linear_eps, hint=0.25) == 0.25


def test_get_sample_rate_hands_the_cheap_searchs_rate_to_the_costly_one_as_a_hint(
    monkeypatch):
  """getSampleRate first searches on the cheap integer-order ε, then hands that rate as a
  hint to the search on the accountant's costlier ε (a PLD composition each, ~1 s), which
  then needs fewer of its evaluations than the same search without a hint.
  Bugs caught: the hint dropped or not computed (every get_sample_rate pays a full
  bracket search on the costly ε)."""
  args = (1.5, 1e-5, 1.0, 40)
  real = sample_rate.search_epsilon_fn
  counts = {"rdp_int": 0, "rdp": 0}

  def counted(search):
    fn = real(search)

    def f(*a):
      counts[search] += 1
      return fn(*a)

    return f

  monkeypatch.setattr(sample_rate, "search_epsilon_fn", counted)
  sample_rate.get_sample_rate(*args, "rdp")
  with_hint = counts["rdp"]
  counts["rdp"] = 0
  sample_rate.search_sample_rate(*args, counted("rdp"), rtol=sample_rate.SEARCH_RTOL["rdp"])
  assert counts["rdp_int"] > 0
  assert with_hint < counts["rdp"], (with_hint, counts["rdp"])


def test_search_sample_rate_brackets_exact_edges_and_cliffs():
  """Edges that the downward bracket meets exactly, and a cliff.

  (1) ε = qT/σ = 1 at q = 0.25 = 1/4, a point of the 4x downward bracket: it is feasible
  and returned. (2) An edge just above MIN_SAMPLING_RATE, reached from max_rate =
  16·MIN through the bracket point MIN itself, is found, not refused. (3) ε jumping from
  0 to ∞ at q* (dp-accounting's ε = 0 regime): only the x tolerance can stop the search,
  and it is the one asked for. Bugs caught: the bracket test ``>=`` for ``>`` (a feasible
  edge point taken as infeasible, then an invalid bracket), the MIN refusal ``<=`` for
  ``<``, and the search's x tolerance left at its default instead of ``rtol``.
  """
  assert sample_rate.search_sample_rate(1.0, 1e-5, 1.0, 4, linear_eps) == 0.25
  low = sample_rate.MIN_SAMPLING_RATE
  q = sample_rate.search_sample_rate(2 * low * 4 / 1.0, 1e-5, 1.0, 4, linear_eps,
                                     max_rate=16 * low, rtol=1e-9)
  assert q == pytest.approx(2 * low, rel=1e-8)
  cliff = lambda q, s, r, d: 0.0 if q <= 0.0123 else math.inf
  q = sample_rate.search_sample_rate(1.0, 1e-5, 1.0, 4, cliff, rtol=1e-10)
  assert q <= 0.0123 and q == pytest.approx(0.0123, rel=1e-9)


def test_tighten_noise_raises_a_large_sigma_to_its_edge():
  """A strict budget needs σ ≈ 3: from 0.9 of it (over budget) the raise multiplies σ up
  to the edge a fresh accountant certifies. Bug caught: σ *set* to 1 + grow instead of
  multiplied (it can never pass 2, and the calibration fails)."""
  target, q, rounds, delta = 0.3, 0.1, 100, 1e-5
  edge = sample_rate.get_noise(target, delta, q, rounds)
  assert edge > 2.5
  sigma = sample_rate._tighten_noise(edge * 0.9, target, q, rounds, delta, "rdp")
  assert fresh_epsilon(q, sigma, rounds, delta) <= target
  assert fresh_epsilon(q, sigma * 0.999, rounds, delta) > target


def test_tighten_noise_accepts_a_sigma_at_exactly_the_budget(monkeypatch):
  """ε(σ) == target is within budget: with an exact ε that equals the target on the whole
  interval σ ∈ [1, 2) (and exceeds it below 1), σ = 1.5 is kept, not raised. Bug caught:
  ``<`` for ``<=`` in the verification (a σ at the edge is raised, adding noise)."""
  target = 0.7
  monkeypatch.setattr(sample_rate.exact, "epsilon",
                      lambda q, s, r, d, acc="rdp", **k: target if s >= 1.0 else 5.0)
  assert sample_rate._tighten_noise(1.5, target, 0.1, 10, 1e-5, "rdp") == 1.5


def test_tighten_noise_lowers_only_on_real_slack_and_to_the_pld_edge(monkeypatch):
  """The lowering of σ costs exact calls: at the edge (no slack) one exact call and σ is
  kept. Under PLD, a σ 1.1x the edge is lowered to the PLD edge (a fresh PLD accountant
  breaks 1% below it), not to RDP's larger one.
  Bugs caught: the no-slack test joined by ``and`` (a lowering search on every σ), and
  the lowering or the first verification evaluated with the default RDP accountant
  (over-noising PLD runs ~10%)."""
  target, q, rounds, delta = 2.0, 0.05, 100, 1e-5
  edge = sample_rate.get_noise(target, delta, q, rounds)
  calls = _counting_exact(monkeypatch)
  assert sample_rate._tighten_noise(edge, target, q, rounds, delta, "rdp") == edge
  assert len(calls) == 1
  monkeypatch.undo()
  pld_edge = sample_rate.get_noise(target, delta, q, rounds, "pld")
  sigma = sample_rate._tighten_noise(1.1 * pld_edge, target, q, rounds, delta, "pld")
  assert fresh_pld_epsilon(q, sigma, rounds, delta) <= target
  assert fresh_pld_epsilon(q, 0.99 * sigma, rounds, delta) > target
  # With the budget set to PLD's exact ε at that σ, a σ just below it is raised by the
  # first 1e-4 step only (RDP's edge is ~10% up).
  at_edge = sample_rate.exact.epsilon(q, pld_edge, rounds, delta, "pld")
  just_below = sample_rate._tighten_noise(pld_edge * (1 - 1e-5), at_edge, q, rounds, delta,
                                          "pld")
  assert just_below == pytest.approx(pld_edge * (1 - 1e-5) * (1 + 1e-4), rel=1e-12)


def test_tighten_noise_stops_at_the_smallest_noise_and_returns_the_verified_sigma(
    monkeypatch):
  """Two limits of the lowering. (1) A budget loose enough for any σ: σ is lowered to
  MIN_NOISE_MULTIPLIER, not below (real accountant, ε(1e-3) ≈ 5.5e5 <= 1e6). (2) Where no
  smaller σ is feasible (ε = 0 at σ >= 49, over budget below), exactly the verified
  σ = 49 is returned, not 1/(1/49) = 49.00000000000001 (never verified).
  Bugs caught: the floor moved (2/MIN for 1/MIN), the float round trip returned."""
  sigma = sample_rate._tighten_noise(0.0015, 1e6, 1e-3, 1, 1e-5, "rdp")
  assert sigma == pytest.approx(sample_rate.MIN_NOISE_MULTIPLIER, rel=1e-12)
  assert sigma >= sample_rate.MIN_NOISE_MULTIPLIER * (1 - 1e-12)
  monkeypatch.setattr(sample_rate.exact, "epsilon",
                      lambda q, s, r, d, acc="rdp", **k: 0.0 if s >= 49.0 else 5.0)
  assert 1.0 / (1.0 / 49.0) != 49.0
  assert sample_rate._tighten_noise(49.0, 1.0, 0.1, 10, 1e-5, "rdp") == 49.0


def test_get_sample_rate_never_exceeds_max_rate():
  """A budget that holds well above ``max_rate`` gives exactly ``max_rate`` (Alg. 1's cap,
  e.g. SAMPLE's cap for the ε = ∞ groups), never more. Bugs caught: the cap left out of
  the main search or of the exact stage (which then keeps or raises a rate above it)."""
  for cap in (0.05, 0.3):
    q = sample_rate.get_sample_rate(8.0, 1e-5, 2.0, 10, max_rate=cap)
    assert q == cap
    assert fresh_epsilon(q, 2.0, 10, 1e-5) <= 8.0


def test_tighten_rate_lowers_a_rate_far_above_the_edge_into_the_budget():
  """A proposed q = 1, hundreds of times the budget edge, is lowered (the shrink factor
  grows to halving) into the budget, then raised back to the edge a fresh accountant
  finds. Bug caught: the shrink factor capped above 1, which makes q zero or negative."""
  target, sigma, rounds, delta = 1.0, 0.84, 420, 1e-4
  q, eps = sample_rate.tighten_rate(1.0, target, sigma, rounds, delta, "rdp")
  assert 0.0 < q < 0.01
  assert fresh_epsilon(q, sigma, rounds, delta) <= target
  assert fresh_epsilon(q * 1.01, sigma, rounds, delta) > target


def test_tighten_rate_raises_with_the_runs_own_accountant():
  """With PLD, the raise to the edge runs on PLD too: the returned ε is a fresh PLD
  accountant's at the returned q, and 1% more q is over budget under PLD. Bug caught: the
  raise evaluated with the default RDP accountant (a looser edge, and an RDP ε reported
  as if it were the PLD one)."""
  target, sigma, rounds, delta = 1.0, 0.84, 420, 1e-4
  edge, _ = sample_rate.tighten_rate(1e-3, target, sigma, rounds, delta, "pld")
  q, eps = sample_rate.tighten_rate(edge * 0.9, target, sigma, rounds, delta, "pld")
  assert eps == pytest.approx(fresh_pld_epsilon(q, sigma, rounds, delta), rel=1e-9)
  assert eps <= target
  assert fresh_pld_epsilon(q * 1.01, sigma, rounds, delta) > target
  assert q > edge * 0.99


def test_raise_while_feasible_from_a_point_at_exactly_the_budget():
  """A start whose ε is exactly the budget (allowed: ``eps_x <= target``) still moves up a
  plateau of that ε: the expansion factor is at least 1 + 10·rtol, never 1. Bug caught: a
  floor of 1 − 10·rtol, which leaves the factor at 1 and the search stuck on one point."""
  def eps_at(y):
    return 1.0 if y < 0.6 else 5.0

  x, eps = sample_rate._raise_while_feasible(eps_at, 0.3, 1.0, 1.0, 1.0, 1e-6)
  assert eps == 1.0 and 0.45 < x < 0.6   # (ε equals the budget all along: f_rtol stops it)


def test_tighten_rate_caps_at_one_by_default():
  """Without ``max_rate`` the cap is 1 (a rate is a probability): a budget that holds at
  q = 1 gives exactly 1. Bug caught: a default cap of 2, whose search brackets past 1 (where
  the accountant refuses) and ends just below 1."""
  q, eps = sample_rate.tighten_rate(0.3, 50.0, 2.0, 5, 1e-5, "rdp")
  assert q == 1.0 and eps == pytest.approx(fresh_epsilon(1.0, 2.0, 5, 1e-5), rel=1e-9)


def test_raise_while_feasible_steps_out_by_two_then_squares_the_step():
  """Property (the documented expansion): the first probe is x·min(2, target/ε(x)) (2 from
  ε = 0), and each later step squares the factor, until a probe is over budget.
  Bugs caught: a first step of 3 (either branch), a step that does not grow."""
  for eps_x, eps_at in [(0.01, lambda y: y), (0.0, lambda y: 0.0 if y < 0.5 else 2.0)]:
    calls = []

    def counted(y, f=eps_at):
      calls.append(y)
      return f(y)
    sample_rate._raise_while_feasible(counted, 0.01, eps_x, 1.0, 10.0, 1e-6)
    assert calls[:3] == pytest.approx([0.02, 0.08, 1.28], rel=1e-12)
  calls = []
  sample_rate._raise_while_feasible(lambda y: calls.append(y) or y / 10, 0.01, 0.001, 1.0,
                                    10.0, 1e-6)
  assert calls[0] == pytest.approx(0.02, rel=1e-12)  # min(2, 1000): never more than 2x


@pytest.mark.parametrize("x0", [0.01, 1.0 - 1e-7])
@pytest.mark.parametrize("first_over", [4, 5, 12, 23, 24, 25, 26, 30])
def test_raise_while_feasible_spends_exactly_its_evaluation_budget_when_asked_for_full_precision(
    first_over, x0):
  """Property: with rtol = 0 (never converged) the raise evaluates exactly
  ``_RAISE_MAX_EVALS`` = 25 new points, wherever the edge lies. ε is a cliff: c0 < 1 below
  x_e = 1 and 2 − c0 above, so no point ever meets the target exactly; ε(x) = c0 makes the
  first factor 1/c0, chosen so that the expansion's probe number ``first_over`` (probe n
  sits at log position ln(1/c0)·(2^n − 1) above x; 1/c0 < 2 from 4 on) is the first over
  budget, which takes the expansion past 24 steps for the larger values. From x = 1 − 1e-7
  the bracket is already narrower than the search's default tolerance (1e-6). The
  returned point is the largest evaluated one within budget, with its own ε.

  Bugs caught: the expansion's stop at ``>=`` 25 points, the search's budget miscounted
  (+2, −1, or the points used added instead of subtracted), a one-point budget skipped,
  ``max_evals`` or either tolerance not passed to ``largest_feasible`` (its defaults
  stop it early or let it run past the budget)."""
  x_edge = 1.0
  c0 = math.exp(-math.log(x_edge / x0) / (2.0 ** (first_over - 0.5) - 1.0))
  calls = []

  def eps_at(y):
    calls.append(y)
    return c0 if y < x_edge else 2.0 - c0  # symmetric: the search's steps bisect

  x, eps = sample_rate._raise_while_feasible(eps_at, x0, c0, 1.0, 1e6, 0.0)
  assert c0 < 1.0 and eps == c0
  over = [i for i, y in enumerate(calls, start=1) if y >= x_edge]
  if first_over <= 25:
    assert over[0] == first_over
  else:
    assert not over
  assert len(calls) == sample_rate._RAISE_MAX_EVALS
  assert x == max([x0] + [y for y in calls if y < x_edge])


def test_verification_steps_follow_their_schedule_and_refuse_after_sixty(monkeypatch):
  """Property: where the exact ε never comes within budget, ``tighten_rate`` lowers q by
  factors 1 − min(0.5, 1e-4·2^i) and ``_tighten_noise`` raises σ by 1 + min(1, 1e-4·2^i),
  i = 0, 1, ..., one exact call each, and after exactly 60 calls both refuse loudly
  rather than return an unverified value. (A σ or q just off the edge is thus fixed by a
  1e-4 step, not overshot by a doubling.)
  Bugs caught: the first step 1.0001 or 2 + grow, the steps growing ×3 or capped at 2,
  61 attempts."""
  seen = []

  def over_budget(q, s, r, d, acc="rdp", **k):
    seen.append((q, s))
    return 5.0
  monkeypatch.setattr(sample_rate.exact, "epsilon", over_budget)
  steps = [1e-4 * 2.0**i for i in range(59)]
  with pytest.raises(RuntimeError, match="refusing to return an unverified rate"):
    sample_rate.tighten_rate(0.3, 1.0, 1.0, 10, 1e-5, "rdp")
  assert len(seen) == 60
  qs = [q for q, _ in seen]
  assert [b / a for a, b in zip(qs, qs[1:])] == pytest.approx(
      [1.0 - min(0.5, s) for s in steps], rel=1e-12)
  seen.clear()
  with pytest.raises(RuntimeError, match="refusing to return an unverified noise"):
    sample_rate._tighten_noise(0.7, 1.0, 0.1, 10, 1e-5, "rdp")
  assert len(seen) == 60
  sigmas = [s for _, s in seen]
  assert [b / a for a, b in zip(sigmas, sigmas[1:])] == pytest.approx(
      [1.0 + min(1.0, s) for s in steps], rel=1e-12)


def test_tighten_rate_keeps_a_rate_at_the_budget_and_raises_only_below_the_slack_edge(
    monkeypatch):
  """Property: a q whose exact ε equals the target is kept (one call); so is one whose ε
  is exactly at the slack threshold target·(1 − 1e-3), or exactly 1.0 under a target
  just above it (slack means strictly below the threshold, or ε = 0).
  Bugs caught: ``<`` for ``<=`` in the verification, ``<=`` in the slack test, slack
  declared at ε = 1 instead of ε = 0."""
  for eps_below, target in [(0.7, 0.7), (1.0 * (1.0 - 1e-3), 1.0), (1.0, 1.0005)]:
    calls = []

    def exact_eps(q, s, r, d, acc="rdp", **k):
      calls.append(q)
      return eps_below if q <= 0.5 else 5.0
    monkeypatch.setattr(sample_rate.exact, "epsilon", exact_eps)
    assert sample_rate.tighten_rate(0.3, target, 1.0, 10, 1e-5, "rdp") == (0.3, eps_below)
    assert calls == [0.3]


def test_searches_bracket_as_documented_and_reach_the_tolerance_they_are_given():
  """Property (the cheap searches' brackets, which decide their cost): the rate search
  steps ×1.25 up from a hint, or from ``max_rate`` down by /4 without one; the noise
  search halves t = 1/σ from 1, then tries twice the feasible t; both then reach the
  caller's tolerance (1e-12 here, not their default 1e-7 or ``largest_feasible``'s
  1e-6). Bugs caught: other bracket factors or directions, the hint ignored, the
  tolerance not passed on."""
  qs = []

  def linear(q, sigma, rounds, delta):
    qs.append(q)
    return q
  q = sample_rate.search_sample_rate(0.5, 1e-5, 1.0, 1, linear, 1.0, hint=0.1, rtol=1e-12)
  assert qs[:3] == pytest.approx([0.1, 0.125, 0.15625], rel=1e-12)
  assert q == pytest.approx(0.5, rel=1e-11) and q <= 0.5
  qs.clear()
  sample_rate.search_sample_rate(0.5, 1e-5, 1.0, 1, linear, 1.0, rtol=1e-12)
  assert qs[:2] == pytest.approx([1.0, 0.25], rel=1e-12)
  sigmas = []

  def steep(q, sigma, rounds, delta):  # ε = (1/σ)^8: curved and steep in log t
    sigmas.append(sigma)
    return sigma**-8
  sigma = sample_rate.search_noise(0.3**8, 1e-5, 0.1, 1, steep, rtol=1e-12)
  assert sigmas[:4] == pytest.approx([1.0, 2.0, 4.0, 2.0], rel=1e-12)
  assert sigma == pytest.approx(1 / 0.3, rel=1e-10) and sigma**-8 <= 0.3**8


def test_get_noise_and_get_sample_rate_search_with_each_accountants_tolerance(monkeypatch):
  """Property (cost): the public calibrations hand the cheap searches the tolerance of
  the search ε they use (``SEARCH_RTOL``: 2e-4 for PLD, not the searches' default 1e-7;
  the rate's first, integer-order RDP search uses its own 1e-7). Bug caught: the
  tolerance dropped in either."""
  import inspect  # pylint: disable=g-import-not-at-top
  seen = []

  def recording(name, real):
    def wrapper(*args, **kwargs):
      bound = inspect.signature(real).bind(*args, **kwargs)
      bound.apply_defaults()
      seen.append((name, bound.arguments["rtol"]))
      return real(*args, **kwargs)
    return wrapper
  monkeypatch.setattr(sample_rate, "search_sample_rate",
                      recording("rate", sample_rate.search_sample_rate))
  monkeypatch.setattr(sample_rate, "search_noise", recording("noise", sample_rate.search_noise))
  sample_rate.get_sample_rate(2.0, 1e-5, 1.0, 20, "pld")
  sample_rate.get_noise(2.0, 1e-5, 0.05, 20, "pld")
  pld, rdp_int = sample_rate.SEARCH_RTOL["pld"], sample_rate.SEARCH_RTOL["rdp_int"]
  assert seen == [("rate", rdp_int), ("rate", pld), ("noise", pld)], seen
