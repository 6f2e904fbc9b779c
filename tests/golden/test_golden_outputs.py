"""The experiment modules' golden outputs stay bit-identical (see runs.py).

With ``--insecure_reproducible_noise`` and fixed seeds, a small run of each
experiment module is deterministic: its normalised ``summary.json`` and its
printed tables must equal the recorded ones exactly (floats included). A
failure means a change altered results; if that was intended, re-record with
``python -m tests.golden.record <name>`` and say why in the commit.
"""
import pytest

from tests.golden import runs


# The other experiments' golden runs are in make bench; in make test: the two runs whose
# numbers are privacy accounting end to end (the main job's SAMPLE/SCALE ledger, rPDP-FL's
# record-level ledger), and each experiment's own end-to-end tests.
IN_MAKE_TEST = ("idp_fedavg", "rpdp")


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    name if name in IN_MAKE_TEST else pytest.param(name, marks=pytest.mark.bench)
    for name in sorted(runs.RUNS)])
def test_golden_output_is_bit_identical(name, tmp_path):
  expected = runs.load(name)
  got = runs.run(name, tmp_path)
  assert got["tables"] == expected["tables"]
  assert got["summary"] == expected["summary"]
