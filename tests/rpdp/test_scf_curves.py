"""tff_idp/rpdp/scf_curves.py: SCF's fits and Figs. 5-6 of rPDP-FL, in process (no TensorFlow)."""
import json
import os

import pytest

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.rpdp import scf_curves


def test_run_reproduces_fig5_fits_and_curves(tmp_path):
  report = scf_curves.run(sigmas=[1.0, 2.0], rounds=20, local_steps=5, client_rate=0.5,
                          delta=1e-3, out=str(tmp_path))
  assert os.path.exists(report["png"]) and os.path.exists(report["json"])
  on_disk = json.loads(open(report["json"]).read())
  assert on_disk["fits"] == report["fits"] and on_disk["curves"] == report["curves"]
  fits = {f["sigma"]: f for f in report["fits"]}
  assert fits[1.0]["r_squared"] > 0.99 and fits[2.0]["r_squared"] > 0.99  # Figs. 5-6
  assert fits[2.0]["epsilon_at_one"] < fits[1.0]["epsilon_at_one"]
  p = TwoStageParams(1.0, 5, 20, 0.5, 1e-3)
  for curve in report["curves"]:
    # Each left-panel curve's minimum is Theorem 1's ε*(q).
    assert curve["epsilon_star"] == pytest.approx(rdp_two_stage.epsilon(curve["q"], p),
                                                  rel=1e-12)
    assert min(curve["epsilon"]) == pytest.approx(curve["epsilon_star"], rel=1e-12)
    assert curve["best_order"] in rdp_two_stage.ORDERS
  table = scf_curves.format_table(report)
  assert table.count("\n") == 3 and "0.5617" in table  # ε*(0.01) at Fig. 5


def test_run_rejects_duplicate_or_missing_sigmas(tmp_path):
  with pytest.raises(ValueError, match="twice"):
    scf_curves.run([1.0, 1.0], 5, 2, 0.5, 1e-3, out=str(tmp_path))
  with pytest.raises(ValueError, match="at least one"):
    scf_curves.run([], 5, 2, 0.5, 1e-3, out=str(tmp_path))
