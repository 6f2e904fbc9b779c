"""tff_idp.run_apes: the APES runner runs what experiments.apes runs, with its defaults."""
import json

import pytest

from datasets import shuffle_users


@pytest.mark.slow
def test_run_apes_on_tiny_users_returns_the_table_and_the_rows(tmp_path):
  import tff_idp  # pylint: disable=g-import-not-at-top
  users = shuffle_users.synthetic_users(30)
  result = tff_idp.run_apes(users, output_dir=str(tmp_path), frameworks=["nonprivate", "apes"],
                            rounds=1, local_epochs=1, progress=False)
  assert [r["framework"] for r in result.rows] == ["nonprivate", "apes"]
  assert "| APES |" in result.table and "accuracy after 1 rounds" in result.table
  apes = result.rows[1]
  assert apes["eps_c"] is not None and apes["eps_c"] <= apes["eps_local_max"]
  assert 0.0 <= apes["accuracy"] <= 1.0
  config = json.load(open(tmp_path / "summary.json"))["config"]
  assert config["users"] == 30 and config["rounds"] == 1
  assert config["delta"] == 1e-4 and config["distribution"] == "uniform2"  # the defaults
  assert config["shuffle_delta"] == pytest.approx(1e-4 / (10 * users.num_params), rel=0.9)


def test_run_apes_refuses_an_unknown_framework_before_training(tmp_path):
  import tff_idp  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="frameworks has \\['magic'\\]"):
    tff_idp.run_apes(shuffle_users.synthetic_users(5), output_dir=str(tmp_path),
                     frameworks=["apes", "magic"])
  assert not any(tmp_path.iterdir())
