"""tff_idp.apes.runs: the APES experiment's data, ε draws, ledger hook and table."""
import os

import numpy as np
import pytest

from datasets import shuffle_users
from tff_idp.apes import runs as apes_runs


def test_synthetic_users_have_the_papers_shape():
  fed = shuffle_users.synthetic_users(50, samples_per_user=12, seed=3)
  assert fed.num_users == 50 and fed.num_params == 60 * 10 + 10
  assert all(len(fed.x[c]) == 10 and len(fed.y[c]) == 10 for c in fed.client_ids)
  assert len(fed.test_y) == 100
  norms = np.linalg.norm(np.concatenate(list(fed.x.values())), axis=1)
  np.testing.assert_allclose(norms, 1.0, rtol=1e-5)  # unit-norm records, as QMNIST in the code
  again = shuffle_users.synthetic_users(50, samples_per_user=12, seed=3)
  np.testing.assert_array_equal(fed.x["user_00007"], again.x["user_00007"])


def test_synthetic_users_rejects_bad_sizes():
  with pytest.raises(ValueError, match="at least 2 users"):
    shuffle_users.synthetic_users(1)
  with pytest.raises(ValueError, match="test_per_user"):
    shuffle_users.synthetic_users(10, samples_per_user=2, test_per_user=2)


def _fake_mnist(tmp_path, per_class=30):
  rng = np.random.default_rng(0)
  y = np.repeat(np.arange(10), per_class)
  rng.shuffle(y)
  x = rng.integers(0, 256, size=(len(y), 28, 28)).astype(np.uint8)
  np.savez(tmp_path / "mnist.npz", x_train=x[:200], y_train=y[:200], x_test=x[200:],
           y_test=y[200:])


def test_mnist_users_follow_the_reference_label_cycle(tmp_path):
  _fake_mnist(tmp_path)
  fed = shuffle_users.mnist_users(20, 12, str(tmp_path))
  assert fed.num_params == 7850
  for u, cid in enumerate(fed.client_ids):
    np.testing.assert_array_equal(fed.y[cid], (u + np.arange(10)) % 10)
  assert len(fed.test_y) == 40
  with pytest.raises(ValueError, match="--users"):
    shuffle_users.mnist_users(30, 12, str(tmp_path))  # 360 records > 300 images


def test_mnist_users_missing_or_corrupt_data_is_clear(tmp_path):
  with pytest.raises(ValueError, match="--data_dir"):
    shuffle_users.mnist_users(5, 12, None)
  (tmp_path / "mnist.npz").write_bytes(b"not a zip")
  with pytest.raises(ValueError, match="not a readable Keras mnist.npz"):
    shuffle_users.mnist_users(5, 12, str(tmp_path))


def test_epsilon_draws_follow_table_2():
  eps = apes_runs.draw_epsilons("uniform2", 10_000, 0)
  assert 0.05 <= eps.min() and eps.max() <= 1.0 and abs(eps.mean() - 0.525) < 0.01
  eps = apes_runs.draw_epsilons("gauss1", 10_000, 0)
  assert eps.min() == pytest.approx(0.05) and eps.max() == pytest.approx(0.5)
  np.testing.assert_array_equal(apes_runs.draw_epsilons("mixgauss2", 100, 4),
                                apes_runs.draw_epsilons("mixgauss2", 100, 4))
  with pytest.raises(ValueError, match="choose from"):
    apes_runs.draw_epsilons("cauchy", 10, 0)


def test_run_epsilons_and_keep_count():
  eps = np.array([0.3, 0.05, 1.0])
  np.testing.assert_array_equal(apes_runs.run_epsilons("ldp_min", eps), [0.05] * 3)
  np.testing.assert_array_equal(apes_runs.run_epsilons("apes", eps), eps)
  assert apes_runs.keep_count(apes_runs.ApesTraining(keep_fraction=0.2), 7850) == 1570
  assert apes_runs.keep_count(apes_runs.ApesTraining(keep_fraction=1e-9), 10) == 1


def test_training_settings_are_checked():
  with pytest.raises(ValueError, match="rounds"):
    apes_runs.ApesTraining(rounds=0)
  with pytest.raises(ValueError, match="clip"):
    apes_runs.ApesTraining(clip=0)
  with pytest.raises(ValueError, match="keep_fraction"):
    apes_runs.ApesTraining(keep_fraction=1.5)
  with pytest.raises(ValueError, match="bound"):
    apes_runs.ApesAccounting(bound="optimistic")
  with pytest.raises(ValueError, match=r"\(0, 1\)"):
    apes_runs.ApesAccounting(delta=1.0)


def test_mnist_users_default_count_fits_the_rarest_class(tmp_path):
  _fake_mnist(tmp_path, per_class=30)
  fed = shuffle_users.mnist_users(None, 12, str(tmp_path))
  assert fed.num_users == (30 * 10) // 12 - 10


def _sapes_rows(d=60, keep=12, rounds=2):
  eps = apes_runs.draw_epsilons("uniform2", 400, 0)
  accounting = apes_runs.ApesAccounting(shuffle_delta=1e-7, delta=1e-4)
  return eps, {f: apes_runs.framework_ledger(f, eps, d, keep, rounds, accounting)
               for f in ("apes", "sapes", "sapes_top_b")}


def test_sapes_ledger_composes_over_the_b_coordinates_that_carry_data():
  """Random b-subset: ε^{ul} = b·ε, and ε^{uc} is the b-fold composition of the
  per-coordinate (ε^c, δ^c), recomputed here with dp-accounting's PLD."""
  from tff_idp.accounting.shuffle import composition
  eps, rows = _sapes_rows()
  sapes, apes = rows["sapes"], rows["apes"]
  assert sapes["eps_ul_min"] == pytest.approx(12 * eps.min())
  assert sapes["eps_ul_max"] == pytest.approx(12 * eps.max())
  assert sapes["eps_c"] == apes["eps_c"] and sapes["amplified"]
  assert sapes["compositions_per_round"] == 12
  pld = composition.pld(sapes["eps_c"], sapes["delta_c"], 12, 1e-4).epsilon
  assert sapes["eps_uc_round"] <= pld * (1 + 1e-6)
  assert sapes["eps_uc_round"] == pytest.approx(
      composition.exact(sapes["eps_c"], sapes["delta_c"], 12, 1e-4).epsilon)
  assert sapes["eps_uc_round"] < apes["eps_uc_round"]
  assert sapes["eps_uc_round_paper"] >= sapes["eps_uc_round"]  # Prop. 1's 2b is looser


def test_post_top_b_ledger_is_the_sound_unamplified_one_with_the_claims_beside():
  eps, rows = _sapes_rows()
  top = rows["sapes_top_b"]
  assert top["eps_ul_max"] == pytest.approx(60 * eps.max())  # d·ε, not b·ε
  assert top["eps_ul_paper_max"] == pytest.approx(12 * eps.max())
  assert top["eps_c"] == pytest.approx(eps.max()) and not top["amplified"]
  assert top["delta_c"] == 0.0 and top["reason"].startswith("post-top-b")
  assert top["eps_c_claimed"] == pytest.approx(rows["sapes"]["eps_c"])
  assert top["eps_uc_round"] <= 60 * eps.max()
  assert top["eps_uc_round"] > rows["sapes"]["eps_uc_round_paper"]
  assert top["eps_uc_total"] >= top["eps_uc_round"]


def test_table_never_prints_the_published_b_eps_as_the_top_b_guarantee():
  _, rows = _sapes_rows()
  table_rows = []
  for f, r in rows.items():
    table_rows.append({**r, "framework": f, "label": apes_runs.LABELS[f], "accuracy": 0.5})
  table = apes_runs.format_table(table_rows, apes_runs.ApesTraining(rounds=2),
                                 apes_runs.ApesAccounting())
  line = next(l for l in table.splitlines() if l.startswith("| S-APES (paper's top-b)"))
  cells = [c.strip() for c in line.split("|")[1:-1]]
  top = rows["sapes_top_b"]
  assert cells[1].startswith(apes_runs._range(top["eps_ul_min"], top["eps_ul_max"]))
  assert "(paper: " in cells[1] and cells[1].endswith("‡)")
  assert "none certified" in cells[2]
  assert cells[5].endswith("‡")  # the Prop. 1 claim is marked
  assert "‡ S-APES with the paper's post-top-b" in table
  sapes_line = next(l for l in table.splitlines() if l.startswith("| S-APES |"))
  assert "‡" not in sapes_line and "†" not in sapes_line


def test_the_federation_line_names_users_budgets_and_settings():
  users = shuffle_users.synthetic_users(5, 4, seed=0)
  line = apes_runs.federation_line(
      users, 4, "uniform", np.array([0.5, 2.0]), apes_runs.ApesTraining(rounds=3),
      apes_runs.ApesAccounting(shuffle_delta=1e-6, delta=1e-5))
  assert line.startswith(f"federation: 5 users × 4 records ({users.name}), d = ")
  assert "ε ~ uniform [0.5, 2]" in line and "T = 3" in line and "δ_s = 1e-06" in line
