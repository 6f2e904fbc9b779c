"""User-level composition: the paper's tables (notes §2.3) and dp_accounting PLD (§2.6)."""
import math

import pytest

from tff_idp.accounting.shuffle import composition as comp

D = 7850
DC2 = math.tanh(0.5) * 1e-8    # δ^c for ε* = 1 (Uniform2), 4.62e-9
DC1 = math.tanh(0.25) * 1e-8   # δ^c for ε* = 0.5 (Uniform1), 2.45e-9


@pytest.mark.parametrize("eps_c,delta_c,kw,expect", [
    (0.05749, DC2, dict(delta_prime=1e-8), 57.62),     # APES, Uniform2 (Table 3)
    (0.06967, DC2, dict(delta_prime=1e-8), 76.93),     # UniS, Uniform2
    (0.02514, DC1, dict(delta_total=3.6e-5), 15.47),   # APES, Uniform1 (Table 4)
    (0.02752, DC1, dict(delta_total=3.6e-5), 17.46),   # UniS, Uniform1
    (0.05, 0.0, dict(delta_prime=3.6e-5), 40.16),      # LDP-min
])
def test_advanced_composition_tables(eps_c, delta_c, kw, expect):
  r = comp.advanced(eps_c, delta_c, D, **kw)
  assert r.epsilon == pytest.approx(expect, abs=5e-3)
  if "delta_prime" in kw and delta_c:
    assert r.delta == pytest.approx(3.63e-5, abs=5e-8)


@pytest.mark.parametrize("eps_c,delta_c,expect", [(0.05749, DC2, 25.62), (0.02514, DC1, 8.46)])
def test_sapes_prop1(eps_c, delta_c, expect):
  r = comp.sapes_prop1(eps_c, delta_c, 1570, delta_total=3.6e-5)
  assert r.epsilon == pytest.approx(expect, abs=5e-3)
  assert r.k == 3140


@pytest.mark.parametrize("total,expect", [
    (3.7e-5, 37.15),
    pytest.param(4.63e-5, 34.31, marks=pytest.mark.slow),
    pytest.param(1e-4, 32.09, marks=pytest.mark.slow),
])
def test_pld_notes_table(total, expect):
  r = comp.pld(0.05749, 4.62e-9, D, total)
  assert r.feasible and r.epsilon == pytest.approx(expect, abs=0.03)
  ex = comp.exact(0.05749, 4.62e-9, D, total)
  assert ex.epsilon <= r.epsilon  # PLD discretization is pessimistic
  assert ex.epsilon == pytest.approx(r.epsilon, rel=0.015)


def test_exact_matches_fine_pld_small_k():
  a = comp.exact(0.5, 1e-6, 10, 1e-4).epsilon
  b = comp.pld(0.5, 1e-6, 10, 1e-4, value_discretization_interval=1e-5).epsilon
  assert a - 1e-9 <= b <= a + 1e-4
  # One ε-DP step at δ > 0: just below ε (randomized response's hockey stick).
  assert 1.0 - 1e-5 < comp.exact(1.0, 0.0, 1, 1e-6).epsilon < 1.0


def test_budget_spent_is_infinite_with_reason():
  for r in (comp.pld(0.05749, 4.62e-9, D, 3.6e-5), comp.exact(0.05749, 4.62e-9, D, 3.6e-5),
            comp.advanced(0.05749, 4.62e-9, D, delta_total=3.6e-5)):
    assert r.epsilon == math.inf and not r.feasible
    assert "spent" in r.reason


def test_forty_rounds_fast():
  r = comp.exact(0.05749, 4.62e-9, D * 40, 3e-3)
  assert r.k == 314_000 and 600 < r.epsilon < 630
  assert r.epsilon < comp.advanced(0.05749, 4.62e-9, D * 40, delta_total=3e-3).epsilon


@pytest.mark.slow
def test_forty_rounds_pld():
  r = comp.pld(0.05749, 4.62e-9, D, 3e-3, rounds=40)
  assert r.k == 314_000
  assert r.epsilon == pytest.approx(comp.exact(0.05749, 4.62e-9, D * 40, 3e-3).epsilon, rel=0.03)


def test_errors():
  with pytest.raises(ValueError, match="k="):
    comp.exact(0.1, 1e-9, 0, 1e-5)
  with pytest.raises(ValueError, match="exactly one"):
    comp.advanced(0.1, 1e-9, 10)
  with pytest.raises(ValueError, match="b="):
    comp.sapes_prop1(0.1, 1e-9, 0, delta_total=1e-5)
  with pytest.raises(ValueError, match="delta_total"):
    comp.pld(0.1, 1e-9, 10, 1.5)
  assert comp.local_composed(0.05, D) == pytest.approx(392.5)
