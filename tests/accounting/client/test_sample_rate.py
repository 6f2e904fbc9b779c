"""getSampleRate's exact tightening (IDP-FedAvg Alg. 1 subroutine), checked with fresh dp-accounting.

Every ε here comes from a freshly built dp-accounting accountant, never from
``tff_idp.accounting.exact``.
"""
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
