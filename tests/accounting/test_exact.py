"""tff_idp.accounting.exact: every calibration's final check, against fresh dp-accounting.

Each test recomputes ε with a dp-accounting accountant built here, from the
mechanism's definition (T compositions of a Poisson(q)-subsampled Gaussian
with noise multiplier σ), so a bug in the event, the accountant's settings or
the shortcuts of ``exact.epsilon`` shows as a mismatch (issue 32: this module
had no mirrored test, and 12 of its mutants survived).
"""
import dp_accounting
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
import pytest

from tff_idp.accounting import exact


def _fresh(q, sigma, rounds, delta, accountant="rdp", discretization=1e-4):
  acc = (rdp_privacy_accountant.RdpAccountant() if accountant == "rdp" else
         pld_privacy_accountant.PLDAccountant(value_discretization_interval=discretization))
  event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
  acc.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
  return acc.get_epsilon(delta)


@pytest.mark.parametrize("q,sigma,rounds,delta", [
    (0.01, 1.1, 1, 1e-5),     # one round: a shortcut at rounds == 1 would report 0
    (0.05, 0.9, 300, 1e-4),
    (0.3, 2.5, 40, 1e-6),
    (1.0, 4.0, 10, 1e-5),     # every client, every round
])
def test_rdp_epsilon_equals_a_fresh_accountant(q, sigma, rounds, delta):
  """The default accountant is RDP, and ε is the fresh accountant's to float precision."""
  assert exact.epsilon(q, sigma, rounds, delta) == pytest.approx(
      _fresh(q, sigma, rounds, delta), rel=1e-12)


def test_pld_epsilon_uses_the_discretization_it_is_given():
  """PLD at the default grid and at a coarse one: each equals a fresh PLD accountant with
  that grid (a coarse grid over-states ε, so the two differ)."""
  args = (0.05, 1.0, 50, 1e-5)
  fine = exact.epsilon(*args, accountant="pld")
  coarse = exact.epsilon(*args, accountant="pld", pld_discretization=0.05)
  assert fine == pytest.approx(_fresh(*args, accountant="pld"), rel=1e-9)
  assert coarse == pytest.approx(_fresh(*args, accountant="pld", discretization=0.05), rel=1e-9)
  assert coarse > fine


def test_no_sampling_or_no_rounds_spends_nothing_and_rates_above_one_are_one():
  """q = 0 or T = 0 costs exactly ε = 0; a rate above 1 is accounted as q = 1 (every round)."""
  assert exact.epsilon(0.0, 1.0, 100, 1e-5) == 0.0
  assert exact.epsilon(0.2, 1.0, 0, 1e-5) == 0.0
  assert exact.epsilon(1.7, 2.0, 5, 1e-5) == exact.epsilon(1.0, 2.0, 5, 1e-5)
  assert exact.epsilon(1.0, 2.0, 5, 1e-5) == pytest.approx(_fresh(1.0, 2.0, 5, 1e-5), rel=1e-12)


def test_unknown_accountants_are_refused_by_name():
  with pytest.raises(ValueError, match="accountant='moments' is not supported"):
    exact.epsilon(0.1, 1.0, 10, 1e-5, accountant="moments")
  assert exact.check_accountant("pld") == "pld"


def test_a_rate_too_small_for_dp_accounting_is_refused_with_its_cause_and_the_fix():
  """At q = 1e-8 dp-accounting's RDP rounds to a negative value and refuses; the error then
  names the rate and the settings and says what to change (raise ε or the cohort, lower
  the rounds), and keeps dp-accounting's error as its cause. Bugs caught: the message
  replaced or its advice garbled (a user is left with dp-accounting's bare complaint)."""
  with pytest.raises(ValueError) as info:
    exact.epsilon(1e-8, 1.0, 100, 1e-5)
  text = str(info.value)
  assert text.startswith("dp-accounting's 'rdp' accountant cannot evaluate ε at sampling rate "
                         "q=1e-08 (σ=1, 100 rounds, δ=1e-05)")
  assert text.endswith("raise the group's ε or clients_per_round, or lower the rounds.")
  assert isinstance(info.value.__cause__, ValueError)
