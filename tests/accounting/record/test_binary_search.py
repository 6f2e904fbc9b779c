"""BinarySearch (IDP-SGD's SAMPLE bisection, rPDP-FL §7.1.2's baseline) against dp-accounting.

Every rate is checked with :func:`rdp_two_stage.epsilon_reference`, which
evaluates Theorem 1 with dp-accounting's own RDP functions (not the
vectorised bound the search calls): the rate must be within its budget, and
one tolerance above it must be over budget. No TensorFlow.
"""
import numpy as np
import pytest

from tff_idp.accounting.record import binary_search
from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams

FIG5 = TwoStageParams(noise_multiplier=1.0, local_steps=5, rounds=20, client_rate=0.5,
                      delta=1e-3)
FIG5_TYPE1 = TwoStageParams(noise_multiplier=1.0, local_steps=5, rounds=20, client_rate=0.5,
                            delta=1e-3, threat_model="type1")
# dp-accounting's evaluation and the vectorised one differ by < 1e-13 relative
# (tests/accounting/record/test_rdp_two_stage.py).
REF_RTOL = 1e-9


def eps_ref(q: float, params: TwoStageParams) -> float:
  return rdp_two_stage.epsilon_reference(min(q, 1.0), params)


@pytest.mark.parametrize("params", [FIG5, FIG5_TYPE1], ids=["type2", "type1"])
@pytest.mark.parametrize("budget", [0.3, 2.0, 25.0])
def test_rate_is_feasible_and_within_tolerance_of_the_edge(params: TwoStageParams,
                                                           budget: float):
  """ε(q) ≤ budget < ε(q + tolerance), with dp-accounting's ε.

  Catches a search that keeps the infeasible end of its bracket (over budget),
  moves the wrong end, stops early (q far below the edge) or ignores the
  tolerance it is given.
  """
  for tolerance in (1e-6, 1e-3):
    q = binary_search.binary_search_rate(budget, params, tolerance=tolerance)
    assert 0.0 < q < 1.0
    assert eps_ref(q, params) <= budget * (1 + REF_RTOL)
    assert eps_ref(q + tolerance, params) > budget


def test_default_tolerance_is_1e_6():
  """Without ``tolerance`` the rate is within 1e-6 of the budget edge (the documented default).

  Catches a changed default that stops the bisection early.
  """
  q = binary_search.binary_search_rate(2.0, FIG5)
  assert eps_ref(q, FIG5) <= 2.0 * (1 + REF_RTOL) < eps_ref(q + 1e-6, FIG5)


def test_bisection_points_are_dyadic():
  """With tolerance 2⁻⁴ the search halves [0, 1] four times: q is a multiple of 1/16.

  Catches a midpoint other than (lo + hi)/2 and a stopping rule that runs
  past the tolerance or stops before it.
  """
  q = binary_search.binary_search_rate(2.0, FIG5, tolerance=1 / 16)
  assert q * 16 == int(q * 16)
  assert eps_ref(q, FIG5) <= 2.0 < eps_ref(q + 1 / 16, FIG5)


def test_budget_at_or_above_eps_star_one_gets_q_one():
  """A budget ≥ ε*(1) affords every round with q = 1 (and exactly ε*(1) does too).

  Catches a strict comparison at ε*(1) and a search that never returns 1.
  """
  eps_one = rdp_two_stage.epsilon(1.0, FIG5)
  assert eps_one == pytest.approx(eps_ref(1.0, FIG5), rel=REF_RTOL)
  assert binary_search.binary_search_rate(eps_one, FIG5) == 1.0
  assert binary_search.binary_search_rate(eps_one * 2, FIG5) == 1.0
  below = binary_search.binary_search_rate(eps_one * 0.999, FIG5)
  assert below < 1.0 and eps_ref(below, FIG5) <= eps_one * 0.999 * (1 + REF_RTOL)


def test_rates_solve_each_distinct_budget_and_keep_the_shape():
  """binary_search_rates maps each budget to its own feasible, tight rate, in the input's shape.

  Catches a mix-up of the de-duplication (rates given to the wrong budgets),
  a lost shape, and a tolerance that is not passed on (with 2⁻⁴ every rate
  must be a multiple of 1/16).
  """
  eps_one = rdp_two_stage.epsilon(1.0, FIG5)
  budgets = np.array([[30.0, 3.0, 30.0], [eps_one * 3, 12.0, 3.0]])
  q = binary_search.binary_search_rates(budgets, FIG5, tolerance=1 / 16)
  assert q.shape == budgets.shape
  assert q[0, 0] == q[0, 2] and q[0, 1] == q[1, 2]
  assert q[1, 0] == 1.0
  assert q[0, 1] < q[1, 1] < q[0, 0] < 1.0
  for b, rate in zip(budgets.reshape(-1), q.reshape(-1)):
    assert rate * 16 == int(rate * 16)
    assert eps_ref(rate, FIG5) <= b * (1 + REF_RTOL)
    if rate < 1.0:
      assert eps_ref(rate + 1 / 16, FIG5) > b
  fine = binary_search.binary_search_rates(np.array([1.5]), FIG5)
  assert eps_ref(fine[0], FIG5) <= 1.5 * (1 + REF_RTOL) < eps_ref(fine[0] + 1e-6, FIG5)
