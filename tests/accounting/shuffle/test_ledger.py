"""APES / S-APES ledger: Table 3/4 parity, the sound default, flags and errors."""
import json
import math

import numpy as np
import pytest

from tff_idp.accounting.shuffle import clip_laplace_reference as clap
from tff_idp.accounting.shuffle import ledger as L

N, D = 10_000, 7850


@pytest.fixture(scope="module")
def uniform2():
  return clap.sample_epsilons("Uniform2", N, np.random.default_rng(0))


@pytest.fixture(scope="module")
def uniform1():
  return clap.sample_epsilons("Uniform1", N, np.random.default_rng(0))


def test_table3_uniform2_parity(uniform2):
  eon = L.ApesLedger(uniform2, D, 1e-8, 3.7e-5, bound="eon_paper", paper_delta_prime=1e-8)
  r = eon.round_account()
  assert r.amplified and r.label.startswith("EoN as published")
  assert r.epsilon_c == pytest.approx(0.05749, abs=1e-5)
  assert r.delta_c == pytest.approx(4.62e-9, rel=1e-3)
  assert r.user_level_paper.epsilon == pytest.approx(57.62, abs=0.02)
  assert r.user_level_pld.epsilon == pytest.approx(37.15, abs=0.03)
  assert r.epsilon_ul == pytest.approx((392.5, 7850), rel=3e-3)
  unis = L.ApesLedger(uniform2, D, 1e-8, 3.7e-5, bound="fmt22_max", paper_delta_prime=1e-8,
                      include_pld=False).round_account()
  assert unis.epsilon_c == pytest.approx(0.069670, abs=1e-6)
  assert unis.user_level_paper.epsilon == pytest.approx(76.93, abs=0.01)
  sapes = L.ApesLedger(uniform2, D, 1e-8, 3.6e-5, b=1570, bound="eon_paper",
                       include_pld=False).round_account()
  assert sapes.k == 1570 and sapes.epsilon_ul == pytest.approx((78.5, 1570), rel=3e-3)
  assert sapes.user_level_paper.epsilon == pytest.approx(25.62, abs=0.02)


def test_table4_uniform1_parity(uniform1):
  eon = L.ApesLedger(uniform1, D, 1e-8, 3.6e-5, bound="eon_paper", include_pld=False)
  assert eon.round_account().user_level_paper.epsilon == pytest.approx(15.47, abs=0.02)
  unis = L.ApesLedger(uniform1, D, 1e-8, 3.6e-5, bound="fmt22_max", include_pld=False)
  assert unis.round_account().user_level_paper.epsilon == pytest.approx(17.46, abs=0.02)
  sapes = L.ApesLedger(uniform1, D, 1e-8, 3.6e-5, b=1570, bound="eon_paper", include_pld=False)
  assert sapes.round_account().user_level_paper.epsilon == pytest.approx(8.46, abs=0.02)


def test_per_user_default(uniform2):
  led = L.ApesLedger(uniform2, D, 4.62e-9, 3.7e-5)
  r = led.round_account()
  assert led.bound == "per_user" and r.label.startswith("per-user")
  assert r.amplified and r.reason == ""
  assert r.delta_c == 4.62e-9  # the exact reduction certifies δ_s itself
  assert r.epsilon_c == pytest.approx(0.061689, abs=5e-6)
  assert r.user_level.epsilon == pytest.approx(40.51, abs=0.02)
  assert r.user_level.epsilon <= r.user_level_pld.epsilon <= r.user_level_paper.epsilon
  assert len(r.levels) == 32 and r.levels[-1]["epsilon_c"] == r.epsilon_c
  assert all(lv["user_level_epsilon"] <= r.user_level.epsilon + 1e-9 for lv in r.levels)
  d = led.to_dict(rounds=2)
  json.dumps(d)
  assert d["cumulative"]["rounds"] == 2


def test_delta_budget_spent_is_flagged(uniform2):
  r = L.ApesLedger(uniform2[:2000], D, 1e-8, 3.7e-5, include_pld=False).round_account()
  assert math.isinf(r.user_level.epsilon) and not r.user_level.feasible
  assert "spent" in r.user_level.reason


def test_cumulative_rounds():
  e = np.random.default_rng(1).uniform(0.05, 1.0, 2000)
  led = L.ApesLedger(e, 100, 1e-9, 1e-4, include_pld=False)
  h = led.history(5)
  assert all(a < b for a, b in zip(h, h[1:]))
  c = led.cumulative(5, include_pld=True)
  assert c.user_level.k == 500 and c.user_level.epsilon == h[-1]
  assert c.user_level.epsilon <= c.user_level_pld.epsilon <= c.user_level.epsilon * 1.02
  assert c.user_level_paper.epsilon > c.user_level.epsilon


def test_no_amplification_reasons():
  few = np.full(50, 1.0)
  eon = L.ApesLedger(few, 10, 1e-8, 1e-5, bound="eon_paper").round_account()
  assert not eon.amplified and eon.epsilon_c == 1.0 and eon.delta_c == 0.0
  assert "S >= 16 ln(4/δ_s)" in eon.reason
  two = L.ApesLedger([2.0, 2.0], 10, 1e-8, 1e-5).round_account()
  assert not two.amplified and two.epsilon_c == 2.0 and "no amplification" in two.reason
  assert two.user_level.epsilon <= 20.0
  unis = L.ApesLedger(few, 10, 1e-8, 1e-5, bound="fmt22_max").round_account()
  assert "blocked loop is empty" in unis.reason and unis.epsilon_c <= 1.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(epsilons=[1.0, 0.0]), "finite and > 0"),
    (dict(epsilons=[1.0, np.nan]), "finite and > 0"),
    (dict(epsilons=[1.0, np.inf]), "finite and > 0"),
    (dict(epsilons=[1.0]), "n >= 2"),
    (dict(clip=0.0), "clip"),
    (dict(b=0), "b="),
    (dict(b=11), "b="),
    (dict(delta_s=0.0), "delta_s"),
    (dict(user_delta=1.0), "user_delta"),
    (dict(d=0), "d="),
    (dict(bound="eon"), "bound="),
])
def test_errors(kwargs, match):
  args = dict(epsilons=[0.5, 1.0], d=10, delta_s=1e-6, user_delta=1e-5)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    L.ApesLedger(**args)


def test_rounds_error():
  with pytest.raises(ValueError, match="rounds"):
    L.ApesLedger([0.5, 1.0], 10, 1e-6, 1e-5).cumulative(0)
