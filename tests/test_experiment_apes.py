"""experiments.apes: the Table 3/4-style run end to end on a tiny federation, and bad flags."""
import json
import os

import pytest

from tests import flag_driver
from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(args, out, timeout=900):
  return forked_runs.run_module("experiments.apes", ["--progress=false",
                                                     f"--output_dir={out}", *args],
                                timeout=timeout)


TINY = ["--users=40", "--rounds=2", "--local_epochs=2"]


@pytest.mark.slow
def test_tiny_run_prints_the_table(tmp_path):
  proc = _run(TINY, tmp_path / "out")
  assert proc.returncode == 0, proc.stderr[-3000:]
  for label in ("Non-private", "LDP-min", "PLDP", "UniS", "APES", "S-APES",
                "S-APES (paper's top-b)"):
    assert f"| {label} |" in proc.stdout, proc.stdout
  summary = json.load(open(tmp_path / "out" / "summary.json"))
  rows = {r["framework"]: r for r in summary["results"]}
  assert rows["pldp"]["accuracy"] == rows["unis"]["accuracy"]  # one run, two accountings
  assert rows["nonprivate"]["eps_c"] is None  # ε = ∞, written as null (one schema)
  assert rows["ldp_min"]["eps_c"] == pytest.approx(rows["apes"]["eps_local_min"])  # no shuffle
  assert rows["pldp"]["eps_c"] == pytest.approx(rows["apes"]["eps_local_max"])
  assert rows["apes"]["eps_uc_total"] >= rows["apes"]["eps_uc_round"]
  assert os.path.isfile(tmp_path / "out" / "accuracy.png")
  assert len(rows["apes"]["history"]) == 2


@pytest.mark.slow
@pytest.mark.bench  # make bench (issue 52); in make test: test_tiny_run_prints_the_table above
# and the driver returning a finished run's stored rows (tests/engine/test_run_safety.py)
def test_rerunning_a_finished_run_trains_nothing_and_prints_the_same_table(tmp_path):
  proc = _run(TINY, tmp_path / "out")
  assert proc.returncode == 0, proc.stderr[-3000:]
  again = _run(TINY, tmp_path / "out")
  assert again.returncode == 0, again.stderr[-3000:]
  table = lambda s: s[s.index("| framework"):]
  assert table(again.stdout) == table(proc.stdout)


BAD_FLAGS = [
    (["--users=1"], "--users=1: users"),
    (["--clip=0"], "--clip=0(\\.0)?: per-coordinate clip C must be"),
    (["--keep_fraction=0"], "--keep_fraction=0"),
    (["--keep_fraction=1.5"], "--keep_fraction=1.5"),
    (["--shuffle_delta=1"], "--shuffle_delta=1"),
    (["--delta=0"], "--delta=0"),
    (["--rounds=0"], "--rounds=0"),
    (["--frameworks=apes,magic"], "--frameworks has \\['magic'\\]"),
    (["--preset=paper"], "needs MNIST-shaped data: pass --data_dir"),
]


@pytest.fixture(scope="module")
def bad_flag_results(tmp_path_factory):
  out = tmp_path_factory.mktemp("bad_flags")
  return flag_driver.run_bad_flags("experiments.apes", [f"--output_dir={out}"],
                                   [a for a, _ in BAD_FLAGS])


@pytest.mark.parametrize("index", range(len(BAD_FLAGS)),
                         ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flags_fail_fast_with_advice(index, bad_flag_results):
  flag_driver.assert_fails_with_advice(bad_flag_results[index], BAD_FLAGS[index][1])
