"""`python -m tff_idp.idp_fedavg.calibrate`, run as users run it, checked with dp-accounting."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args):
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
  return subprocess.run([sys.executable, "-m", "tff_idp.idp_fedavg.calibrate", *args],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


from tests.independent_dp import dp_epsilon


FMNIST_ARGS = ["--epsilons=1,2,3", "--ratios=0.34,0.43,0.23", "--num_clients=3383",
               "--clients_per_round=30", "--rounds=420", "--delta=1e-4"]


@pytest.fixture(scope="module")
def fmnist_json():
  proc = run_cli(*FMNIST_ARGS, "--json")
  assert proc.returncode == 0, proc.stderr
  return json.loads(proc.stdout)


def test_json_fmnist_matches_independent_recomputation(fmnist_json):
  d = fmnist_json
  sigma, rates = d["noise_multiplier"], d["sampling_rates"]
  assert d["group_sizes"] == [1150, 1455, 778]
  assert d["num_clients"] == 3383
  assert d["accountant"] == "rdp" and d["rounds"] == 420 and d["delta"] == 1e-4
  assert d["target_epsilons"] == [1.0, 2.0, 3.0]
  recomputed = [dp_epsilon(q, sigma, 420, 1e-4) for q in rates]
  for eps, target in zip(recomputed, [1.0, 2.0, 3.0]):
    assert eps <= target
  np.testing.assert_allclose(d["achieved_epsilons"], recomputed, rtol=1e-6)
  expected = float(np.dot([1150, 1455, 778], rates))
  assert expected == pytest.approx(30, rel=5e-3)
  assert d["expected_clients_per_round"] == pytest.approx(expected, rel=1e-12)
  # σ is the paper's fixed point: 2% less noise cannot keep these rates.
  assert dp_epsilon(rates[0], 0.98 * sigma, 420, 1e-4) > 1.0
  assert d["seconds"] >= 0


def test_json_rates_equal_get_sample_rate_at_reported_sigma(fmnist_json):
  """Each q_p is the largest rate at σ for ε_p: 5% more breaks the budget."""
  d = fmnist_json
  for q, target in zip(d["sampling_rates"], d["target_epsilons"]):
    assert dp_epsilon(1.05 * q, d["noise_multiplier"], 420, 1e-4) > target


def test_json_with_non_private_group():
  proc = run_cli("--epsilons=2,inf", "--ratios=0.95,0.05", "--num_clients=1000",
                 "--clients_per_round=80", "--rounds=50", "--delta=1e-5", "--json")
  assert proc.returncode == 0, proc.stderr
  d = json.loads(proc.stdout)
  assert d["group_sizes"] == [950, 50]
  assert d["sampling_rates"][1] == 1.0
  assert dp_epsilon(d["sampling_rates"][0], d["noise_multiplier"], 50, 1e-5) <= 2.0
  assert d["expected_clients_per_round"] == pytest.approx(80, rel=5e-3)


def test_json_output_is_strict_json():
  # inf budgets and ε are written as null, never the non-standard Infinity.
  proc = run_cli("--epsilons=2,inf", "--ratios=0.95,0.05", "--num_clients=1000",
                 "--clients_per_round=80", "--rounds=50", "--delta=1e-5", "--json")
  assert proc.returncode == 0, proc.stderr

  def reject(token):
    raise ValueError(f"non-standard JSON token {token}")

  json.loads(proc.stdout, parse_constant=reject)


def test_table_output():
  proc = run_cli(*FMNIST_ARGS)
  assert proc.returncode == 0, proc.stderr
  assert "noise multiplier σ" in proc.stdout
  assert "verified with dp-accounting" in proc.stdout
  assert len([l for l in proc.stdout.splitlines() if l.strip().startswith(("0 ", "1 ", "2 "))]) == 3


def test_bad_ratios_exit_2_with_message():
  proc = run_cli("--epsilons=1,2,3", "--ratios=0.5,0.6,0.1")
  assert proc.returncode == 2
  assert proc.stdout == ""
  assert "error: ratios=" in proc.stderr and "not 1" in proc.stderr
  assert "Traceback" not in proc.stderr


def test_mismatched_lengths_exit_2():
  proc = run_cli("--epsilons=1,2", "--ratios=0.34,0.43,0.23")
  assert proc.returncode == 2
  assert "--epsilons has 2 values but --ratios has 3" in proc.stderr


def test_infeasible_budget_exit_2():
  proc = run_cli("--epsilons=0.001", "--ratios=1", "--rounds=1000")
  assert proc.returncode == 2
  assert "noise multiplier above" in proc.stderr
  assert "Traceback" not in proc.stderr


def test_non_numeric_epsilon_exit_2():
  proc = run_cli("--epsilons=1,abc", "--ratios=0.5,0.5")
  assert proc.returncode == 2
  assert "error: --epsilons: 'abc' is not a number" in proc.stderr


def test_cli_does_not_import_tensorflow():
  code = ("import sys, runpy; sys.argv = ['calibrate', '--epsilons=1', '--ratios=1', "
          "'--rounds=5', '--num_clients=100', '--clients_per_round=5', '--json'];\n"
          "try:\n  runpy.run_module('tff_idp.idp_fedavg.calibrate', run_name='__main__')\n"
          "except SystemExit as e:\n  assert e.code in (0, None), e.code\n"
          "bad = [m for m in sys.modules if m.startswith('tensorflow')]\n"
          "assert not bad, bad\n")
  proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr
  assert json.loads(proc.stdout)["sampling_rates"][0] == pytest.approx(0.05, rel=1e-3)



def _printed_calibration(stdout):
  """(σ, [q_p]) exactly as the table prints them (text a user would copy)."""
  sigma, rates, _ = _table_values(stdout)
  return sigma, rates


@pytest.mark.parametrize("args, rounds, delta, targets", [
    (FMNIST_ARGS, 420, 1e-4, [1.0, 2.0, 3.0]),
    (["--epsilons=0.5,1,8", "--ratios=0.2,0.5,0.3", "--num_clients=725",
      "--clients_per_round=20", "--rounds=200", "--delta=1e-5"], 200, 1e-5, [0.5, 1.0, 8.0]),
])
def test_printed_values_copied_by_hand_stay_within_budget(args, rounds, delta, targets):
  """Privacy (issue 31 item 6): ε recomputed from the *printed text* never exceeds the target.

  Bug caught: rates printed rounded to nearest (group 0's q = 0.050898 gave
  ε = 1.0000053 > 1) or σ rounded down. Recomputed with a fresh
  dp-accounting RDP accountant from the copied strings.
  """
  proc = run_cli(*args)
  assert proc.returncode == 0, proc.stderr
  sigma, rates = _printed_calibration(proc.stdout)
  assert len(rates) == len(targets)
  assert "rounded up" in proc.stdout and "q down" in proc.stdout
  for q, target in zip(rates, targets):
    assert dp_epsilon(float(q), float(sigma), rounds, delta) <= target, (q, sigma)


def test_round_toward_is_directed_and_tight():
  from tff_idp.idp_fedavg import calibrate  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  for x in np.concatenate([rng.uniform(1e-6, 1, 200), rng.uniform(1, 50, 50), [0.0508985]]):
    down = float(calibrate.round_toward(float(x), 7, "down"))
    up = float(calibrate.round_toward(float(x), 7, "up"))
    assert down <= x <= up
    assert x - down <= 1e-6 * x and up - x <= 1e-6 * x
  # The float nearest 0.0508989 lies just below it: rounding down must not print it.
  assert calibrate.round_toward(0.0508989, 6, "down") == "0.0508988"
  assert calibrate.round_toward(0.375, 6, "down") == "0.375000"
  assert calibrate.round_toward(0.0508989, 3, "down") == "0.0508"
  assert calibrate.round_toward(1.23456, 3, "up") == "1.24"


def _table_values(table):
  """(σ, [q_p], [ε achieved]) as the printed strings of :func:`calibrate.format_table`."""
  lines = table.splitlines()
  sigma = next(l.split()[-1] for l in lines if l.startswith("noise multiplier σ"))
  rows = [l.split() for l in lines if l.strip()[:1].isdigit() and len(l.split()) == 5]
  return sigma, [r[3] for r in rows], [r[4] for r in rows]


def test_table_rounds_sigma_up_rates_down_and_epsilon_up_exactly():
  """Privacy (issue 48 item 6): each printed value is on the safe side of the calibrated one.

  Bug caught: rates printed rounded up, or σ rounded down. The copied-values
  test above recomputes ε from the text at two settings whose slack absorbs
  a 7th-digit error; here each printed decimal is compared with the exact
  binary value it stands for (``decimal.Decimal``), so a rounding direction
  flipped on any of σ, the three q_p or the achieved ε fails. Deterministic.
  """
  import decimal  # pylint: disable=g-import-not-at-top
  from tff_idp.accounting.client import sample  # pylint: disable=g-import-not-at-top
  from tff_idp.idp_fedavg import calibrate  # pylint: disable=g-import-not-at-top
  cal = sample.get_group_sampling_rates([1.0, 2.0, 4.0], [300, 400, 300], 1e-5, 50, 20.0)
  sigma, rates, achieved = _table_values(calibrate.format_table(cal))
  exact = decimal.Decimal
  assert exact(sigma) >= exact(cal.noise_multiplier)
  assert exact(sigma) - exact(cal.noise_multiplier) < exact(1e-6) * exact(sigma)
  for printed, q in zip(rates, cal.sampling_rates):
    assert exact(printed) <= exact(q), (printed, q)
    assert exact(q) - exact(printed) < exact(1e-6) * exact(q)
  for printed, eps in zip(achieved, cal.achieved_epsilons):
    assert exact(printed) >= exact(eps), (printed, eps)
  # Not vacuous: the values are not exact 7-digit decimals, so a flipped direction shows.
  assert exact(sigma) != exact(cal.noise_multiplier)
  assert all(exact(p) != exact(q) for p, q in zip(rates, cal.sampling_rates))


def test_round_toward_prints_plain_decimals_and_passes_non_finite_and_zero():
  """Rates far below 1 print as plain decimals (a copied '1.2E-9' is easy to misread)."""
  from tff_idp.idp_fedavg import calibrate  # pylint: disable=g-import-not-at-top
  assert calibrate.round_toward(1.2345678e-9, 7, "down") == "0.000000001234567"
  assert calibrate.round_toward(1.2345678e-9, 7, "up") == "0.000000001234568"
  assert calibrate.round_toward(123456789.5, 7, "down") == "123456700"
  assert calibrate.round_toward(123456789.5, 7, "up") == "123456800"
  assert calibrate.round_toward(1.0, 7, "down") == "1.000000"
  assert calibrate.round_toward(0.0, 7, "up") == "0.0"
  assert calibrate.round_toward(float("inf"), 7, "down") == "inf"
  assert calibrate.round_toward(float("nan"), 7, "up") == "nan"


def test_table_says_how_it_rounds_and_parse_floats_names_the_flag():
  from tff_idp.accounting.client import sample  # pylint: disable=g-import-not-at-top
  from tff_idp.idp_fedavg import calibrate  # pylint: disable=g-import-not-at-top
  cal = sample.get_group_sampling_rates([2.0], [100], 1e-5, 5, 10.0)
  lines = calibrate.format_table(cal).splitlines()
  assert lines[-2:] == ["", "σ is rounded up and q down to 7 significant digits, so copied "
                        "values stay within budget; --json prints them at full precision."]
  assert calibrate._parse_floats(["1", "2.5", "inf"], "epsilons") == [1.0, 2.5, float("inf")]  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="--ratios must be a comma-separated list of numbers"):
    calibrate._parse_floats(["1", "x"], "ratios")  # pylint: disable=protected-access
