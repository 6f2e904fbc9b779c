"""experiments.scf_curves: the CLI end to end (subprocess); its fits: tests/rpdp/test_scf_curves.py."""
import json
import os
import re

import numpy as np
import pytest

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record import scf
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tests import forked_runs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _cli(args, timeout=300):
  return forked_runs.run_module("experiments.scf_curves", args, timeout=timeout)


def test_cli_writes_png_json_and_table(tmp_path):
  out = tmp_path / "curves"
  proc = _cli(["--sigmas=1,3", "--rounds=6", "--local_steps=2", "--client_rate=0.4",
               "--delta=1e-4", "--threat_model=type1", "--curve_rates=0.02,0.3",
               f"--out={out}"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| σ | a | b | c | R² |" in proc.stdout
  assert "| 1 |" in proc.stdout and "| 3 |" in proc.stdout
  png = (out / "scf_curves.png").read_bytes()
  assert png.startswith(PNG_MAGIC) and len(png) > 20_000
  report = json.loads((out / "scf_curves.json").read_text())
  s = report["setting"]
  assert (s["sigmas"], s["rounds"], s["local_steps"], s["client_rate"], s["delta"],
          s["threat_model"], s["curve_sigma"]) == ([1.0, 3.0], 6, 2, 0.4, 1e-4, "type1", 1.0)
  # The fit in the JSON is the library's fit of exactly these parameters.
  for fit in report["fits"]:
    p = TwoStageParams(fit["sigma"], 2, 6, 0.4, 1e-4, "type1")
    ref = scf.fit_scf(p)
    assert fit["r_squared"] == pytest.approx(ref.r_squared, rel=1e-9)
    assert (fit["a"], fit["b"], fit["c"]) == pytest.approx((ref.a, ref.b, ref.c), rel=1e-6)
    assert fit["epsilon_at_one"] == pytest.approx(rdp_two_stage.epsilon(1.0, p), rel=1e-12)
    np.testing.assert_allclose(fit["epsilon_grid"], rdp_two_stage.epsilon(
        np.asarray(fit["q_grid"]), p), rtol=1e-12)
  assert [c["q"] for c in report["curves"]] == [0.02, 0.3]


def test_cli_bad_flags_fail_fast(tmp_path):
  for args, match in ((["--sigmas=0,1"], "--sigmas=0,1: item 0 is out of range"),
                      (["--client_rate=1.5"], "--client_rate=1.5: client sampling rate λ must be a finite number > 0 and <= 1"),
                      (["--curve_rates=0,0.5"], "--curve_rates")):
    proc = _cli(args + [f"--out={tmp_path}"])
    assert proc.returncode == 2, (args, proc.stderr[-2000:])
    assert "error:" in proc.stderr and match in proc.stderr, proc.stderr[-2000:]
  assert not (tmp_path / "scf_curves.png").exists()
  for out, match in (("", "--out is empty"),
                     (str(tmp_path / "file"), "--out=.*exists and is not a directory")):
    (tmp_path / "file").write_text("x")
    proc = _cli([f"--out={out}"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and re.search(match, last), last
