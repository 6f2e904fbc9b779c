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
