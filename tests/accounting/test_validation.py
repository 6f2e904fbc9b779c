"""Bad inputs fail loudly with a message that says what to change."""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tff_idp.accounting.client import sample
from tff_idp.accounting import validation
from tff_idp.accounting.client.sample import InfeasibleBudgetError

REPO = Path(__file__).resolve().parents[2]
GOOD = dict(epsilons=[1.0, 2.0], group_sizes=[600, 400], delta=1e-5, rounds=100,
            clients_per_round=20)


def calibrate(**overrides):
  kwargs = dict(GOOD, **overrides)
  return sample.get_group_sampling_rates(**kwargs)


def test_good_baseline_is_valid():
  """The inputs the error tests perturb are themselves fine."""
  cal = calibrate()
  assert cal.expected_clients_per_round == pytest.approx(20, rel=5e-3)


# ---------------------------------------------------------------------------
# ε, δ, rounds, q, σ
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [0.0, -1.0, -math.inf])
def test_epsilon_not_positive(bad):
  with pytest.raises(ValueError, match=r"epsilons\[1\]=.* must be > 0"):
    calibrate(epsilons=[1.0, bad])
  with pytest.raises(ValueError, match="must be > 0"):
    sample.get_noise(bad, 1e-5, 0.1, 10)
  with pytest.raises(ValueError, match="must be > 0"):
    sample.get_sample_rate(bad, 1e-5, 1.0, 10)


def test_epsilon_nan():
  with pytest.raises(ValueError, match=r"epsilons\[0\]=nan is not a valid privacy budget"):
    calibrate(epsilons=[math.nan, 1.0])
  with pytest.raises(ValueError, match="nan is not a valid privacy budget"):
    sample.get_noise(math.nan, 1e-5, 0.1, 10)


@pytest.mark.parametrize("bad", [0.0, -1e-5, 1.0, 1.5, math.nan, math.inf])
def test_delta_out_of_range(bad):
  with pytest.raises(ValueError, match="must lie strictly between 0 and 1"):
    calibrate(delta=bad)
  with pytest.raises(ValueError, match="must lie strictly between 0 and 1"):
    sample.get_sample_rate(1.0, bad, 1.0, 10)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_rounds_not_positive_integer(bad):
  with pytest.raises(ValueError, match="must be a positive integer"):
    calibrate(rounds=bad)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, math.nan])
def test_sampling_rate_out_of_range(bad):
  with pytest.raises(ValueError, match=r"must lie in \(0, 1\]"):
    sample.get_noise(1.0, 1e-5, bad, 10)
  with pytest.raises(ValueError, match=r"max_rate=.* must lie in \(0, 1\]"):
    calibrate(max_rate=bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf])
def test_noise_multiplier_invalid(bad):
  with pytest.raises(ValueError, match="must be a finite number > 0"):
    sample.get_sample_rate(1.0, 1e-5, bad, 10)


# ---------------------------------------------------------------------------
# ratios, group sizes, cohort
# ---------------------------------------------------------------------------

def test_ratios_not_summing_to_one():
  with pytest.raises(ValueError, match=r"sum to 1\.2, not 1; rescale them"):
    validation.group_sizes_from_ratios([0.5, 0.6, 0.1], 100)
  with pytest.raises(ValueError, match="not 1"):
    validation.group_sizes_from_ratios([0.3, 0.3], 100)


def test_ratios_within_rounding_tolerance_are_accepted():
  assert validation.group_sizes_from_ratios([1 / 3] * 3, 10).sum() == 10


@pytest.mark.parametrize("bad", [[-0.1, 1.1], [math.nan, 1.0], [math.inf, 0.0]])
def test_ratio_negative_or_not_finite(bad):
  with pytest.raises(ValueError, match="must all be finite and >= 0"):
    validation.group_sizes_from_ratios(bad, 100)


def test_ratios_empty():
  with pytest.raises(ValueError, match="non-empty list"):
    validation.group_sizes_from_ratios([], 100)


def test_cohort_larger_than_population():
  with pytest.raises(ValueError, match=r"clients_per_round=1001 exceeds num_clients=1000"):
    calibrate(clients_per_round=1001)


@pytest.mark.parametrize("bad", [0, -5])
def test_cohort_not_positive(bad):
  with pytest.raises(ValueError, match="must be > 0"):
    calibrate(clients_per_round=bad)


def test_mismatched_lengths():
  with pytest.raises(ValueError, match="got 3 budgets but 2 group sizes"):
    calibrate(epsilons=[1.0, 2.0, 3.0])


@pytest.mark.parametrize("bad", [[600, -1], [600.5, 400]])
def test_group_sizes_not_non_negative_integers(bad):
  with pytest.raises(ValueError, match="must be non-negative integers"):
    calibrate(group_sizes=bad)


def test_no_clients():
  with pytest.raises(ValueError, match="num_clients=0 must be a positive integer"):
    calibrate(group_sizes=[0, 0])


# ---------------------------------------------------------------------------
# infeasible budgets, unknown accountant
# ---------------------------------------------------------------------------

def test_infeasible_budget_group():
  with pytest.raises(InfeasibleBudgetError,
                     match="would need a noise multiplier above 1000; raise ε"):
    calibrate(epsilons=[1e-3, 2.0], rounds=1000)


def test_infeasible_budget_get_noise():
  with pytest.raises(InfeasibleBudgetError, match="noise multiplier above"):
    sample.get_noise(1e-4, 1e-5, 0.5, 1000)


def test_infeasible_budget_get_sample_rate():
  with pytest.raises(InfeasibleBudgetError, match="even at sampling rate"):
    sample.get_sample_rate(0.01, 1e-7, 0.3, 500)


def test_infeasible_is_a_value_error():
  assert issubclass(InfeasibleBudgetError, ValueError)


def test_infinite_group_too_big_for_cohort():
  with pytest.raises(ValueError, match=r"400 clients with ε=inf .* max_rate"):
    calibrate(epsilons=[1.0, math.inf])
  # The suggested fix works: a max_rate below the quoted bound is accepted.
  cal = calibrate(epsilons=[1.0, math.inf], max_rate=0.04)
  assert cal.sampling_rates[1] == 0.04


def test_max_rate_too_low_for_cohort():
  with pytest.raises(InfeasibleBudgetError, match="raise max_rate"):
    calibrate(max_rate=0.01)


@pytest.mark.parametrize("bad", ["gdp", "RDP", ""])
def test_unknown_accountant(bad):
  with pytest.raises(ValueError, match=r"is not supported; choose one of \('rdp', 'pld'\)"):
    calibrate(accountant=bad)
  with pytest.raises(ValueError, match="is not supported"):
    sample.get_noise(1.0, 1e-5, 0.1, 10, accountant=bad)
  with pytest.raises(ValueError, match="is not supported"):
    sample.get_sample_rate(1.0, 1e-5, 1.0, 10, accountant=bad)


# ---------------------------------------------------------------------------
# group_sizes_from_ratios
# ---------------------------------------------------------------------------

def test_group_sizes_fmnist():
  sizes = validation.group_sizes_from_ratios([0.34, 0.43, 0.23], 3383)
  assert list(sizes) == [1150, 1455, 778]
  assert sizes.dtype.kind == "i"


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(weights=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8).filter(
    lambda w: sum(w) > 1e-3), num_clients=st.integers(1, 100_000))
def test_group_sizes_sum_to_n_and_within_one(weights, num_clients):
  ratios = np.asarray(weights) / sum(weights)
  sizes = validation.group_sizes_from_ratios(ratios, num_clients)
  assert sizes.shape == ratios.shape
  assert int(sizes.sum()) == num_clients
  assert np.all(sizes >= 0)
  assert np.all(np.abs(sizes - ratios * num_clients) < 1.0)


# ---------------------------------------------------------------------------
# no TensorFlow in the accounting code
# ---------------------------------------------------------------------------

def test_accounting_does_not_import_tensorflow():
  code = ("import sys, tff_idp.accounting, tff_idp.accounting.client.ledger, "
          "tff_idp.accounting.client.scale, tff_idp.idp_fedavg.calibrate, tff_idp.accounting.record.rdp_two_stage, "
          "tff_idp.accounting.record.scf, tff_idp.accounting.record.calibration, "
          "tff_idp.accounting.record.binary_search, tff_idp.accounting.record.ledger, "
          "tff_idp.accounting.owner.plan, tff_idp.engine.group_metrics, "
          "tff_idp.preferences, tff_idp.accounting.record.plan; "
          # Calibrating record-level plans (rates only) stays TF-free too.
          "from tff_idp.accounting.record.rdp_two_stage import TwoStageParams; "
          "budgets = {'a': [0.5, 1.0, 5.0], 'b': [2.0, 0.5]}; "
          "params = TwoStageParams(2.0, 2, 4, 0.7, 1e-4); "
          "plans = [tff_idp.accounting.record.plan.make_record_plan(m, budgets, params, 1.0) "
          "         for m in tff_idp.accounting.record.plan.METHODS]; "
          "[p.new_accountant() for p in plans]; "
          "bad = [m for m in sys.modules if m.split('.')[0] in "
          "('tensorflow', 'tensorflow_federated', 'tensorflow_privacy')]; "
          "assert not bad, bad")
  subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


# ---------------------------------------------------------------------------
# check_cohort's edges (issue 32, mutation survivors)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("clients_per_round,num_clients", [
    (1, 1),      # a single client, sampled every round
    (0.5, 10),   # less than one expected client per round
    (10, 10),    # the whole population every round
    (1e-3, 1),
])
def test_check_cohort_accepts_every_valid_edge(clients_per_round, num_clients):
  """Any positive expected cohort up to and including the population is valid, and so is a
  population of one. Bugs caught: the edges made strict or shifted (``<= 1``/``< 2`` for
  ``< 1`` clients, ``> 1`` for ``> 0`` per round, ``>=`` for ``>`` against the
  population), which refuse a valid run (e.g. c = N, everyone sampled: q = 1)."""
  assert validation.check_cohort(clients_per_round, num_clients) is None


@pytest.mark.parametrize("clients_per_round,num_clients,match", [
    (1, 0, "num_clients=0 must be a positive integer"),
    (1, 2.5, "num_clients=2.5 must be a positive integer"),
    (0, 5, "clients_per_round=0 must be > 0"),
    (5.000001, 5, "exceeds num_clients=5"),
])
def test_check_cohort_refuses_just_past_each_edge(clients_per_round, num_clients, match):
  """Just past each edge the cohort is refused with the argument named."""
  with pytest.raises(ValueError, match=match):
    validation.check_cohort(clients_per_round, num_clients)


def test_each_check_accepts_its_edge_and_names_its_argument_by_default():
  """The checks' inclusive edges are valid (1 round, q = 1, ε = ∞, any tiny σ, δ just inside
  (0, 1)), and by default an error names the argument as the user knows it (``q``,
  ``epsilon``). Bugs caught: an edge made strict (``rounds <= 1`` refuses a one-round
  run, ``q < 1`` refuses full participation) and the default argument name changed."""
  assert validation.check_rounds(1) == 1
  assert validation.check_rounds(2.0) == 2
  assert validation.check_sampling_rate(1.0) == 1.0
  assert validation.check_sampling_rate(1e-12) == 1e-12
  assert validation.check_epsilon(math.inf) == math.inf
  assert validation.check_epsilon(1e-300) == 1e-300
  assert validation.check_noise_multiplier(1e-300) == 1e-300
  assert validation.check_delta(1e-300) == 1e-300
  assert validation.check_delta(1 - 1e-16) == 1 - 1e-16
  with pytest.raises(ValueError, match=r"^q=1\.5 must lie in \(0, 1\]"):
    validation.check_sampling_rate(1.5)
  with pytest.raises(ValueError, match=r"^epsilon=0\.0 is not a valid privacy budget"):
    validation.check_epsilon(0.0)
  with pytest.raises(ValueError, match=r"^rounds=0 must be a positive integer"):
    validation.check_rounds(0)


def test_group_sizes_give_the_leftover_clients_to_the_largest_remainders():
  """Largest-remainder apportionment, checked by hand: ratios (0.6, 0.3, 0.1) of 12 clients
  are 7.2, 3.6, 1.2; the floors 7, 3, 1 leave one client, which goes to the largest
  remainder (0.6, the middle group): (7, 4, 1). Bug caught: ordering by the quota plus
  the floor instead of the remainder, which gives (8, 3, 1), still "within one" of the
  quotas (so the property test above cannot see it) but not the largest-remainder split."""
  assert list(validation.group_sizes_from_ratios([0.6, 0.3, 0.1], 12)) == [7, 4, 1]


def test_ratios_given_as_strings_are_read_as_numbers():
  """Ratios typed on a command line ("0.34,0.43,0.23" split into strings) are converted to
  floats, not compared as text. Bug caught: the float dtype dropped (a string array, on
  which the sign and sum checks fail)."""
  r = validation.check_ratios(["0.34", "0.43", "0.23"])
  assert r.dtype == np.float64
  np.testing.assert_allclose(r, [0.34, 0.43, 0.23])
