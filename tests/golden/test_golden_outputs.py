"""The experiment modules' golden outputs stay bit-identical (see runs.py).

With ``--insecure_reproducible_noise`` and fixed seeds, a small run of each
experiment module is deterministic: its normalised ``summary.json`` and its
printed tables must equal the recorded ones exactly (floats included). A
failure means a change altered results; if that was intended, re-record with
``python -m tests.golden.record <name>`` and say why in the commit.
"""
import pytest

from tests.golden import runs


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(runs.RUNS))
def test_golden_output_is_bit_identical(name, tmp_path):
  expected = runs.load(name)
  got = runs.run(name, tmp_path)
  assert got["tables"] == expected["tables"]
  assert got["summary"] == expected["summary"]
