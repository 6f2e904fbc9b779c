"""User-level composition: the paper's tables (notes §2.3) and dp_accounting PLD (§2.6)."""
import math

import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

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


# --- Independent references --------------------------------------------------------------


def _kov_delta(eps: float, delta: float, k: int, eps_g: float) -> float:
  """δ(ε_g) of the optimal k-fold composition of (ε, δ)-DP (Kairouz, Oh, Viswanath 2015),
  privacy-loss form with the binomial written out by math.comb: with probability
  1−(1−δ)^k the loss is +∞, else ε(2J−k), J ~ Bin(k, e^ε/(1+e^ε))."""
  a = math.exp(eps) / (1.0 + math.exp(eps))
  s = sum(math.comb(k, j) * a**j * (1 - a)**(k - j)
          * max(0.0, 1.0 - math.exp(eps_g - eps * (2 * j - k))) for j in range(k + 1))
  return 1.0 - (1.0 - delta)**k + (1.0 - delta)**k * s


def _fresh_pld(eps: float, delta: float, k: int, total: float, interval: float = 1e-4) -> float:
  pld = pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(eps, delta),
                                        value_discretization_interval=interval)
  return float(pld.self_compose(k).get_epsilon_for_delta(total))


@pytest.mark.parametrize("eps,delta,k,total", [
    (0.5, 1e-6, 10, 1e-4),
    (1.0, 0.0, 1, 1e-6),
    (0.2, 1e-5, 40, 1e-3),
    (2.0, 1e-3, 3, 0.05),
    (0.05, 0.0, 120, 1e-5),
])
def test_exact_is_the_smallest_certified_epsilon(eps, delta, k, total):
  """``exact`` returns the smallest ε_g (to 1e-9) at which the optimal k-fold composition's
  δ(ε_g), computed here with math.comb, is ≤ δ_total.

  Catches: a wrong binomial weight (e^{−ε}/(1+e^{−ε})), the ∞-loss mass 1−(1−δ)^k dropped
  or counted k·δ, the bisection returning its lower end (ε too small: δ over budget).
  """
  r = comp.exact(eps, delta, k, total)
  assert r.feasible and r.k == k and r.delta == total and r.method == "exact"
  assert _kov_delta(eps, delta, k, r.epsilon) <= total * (1 + 1e-9)
  assert _kov_delta(eps, delta, k, r.epsilon - 1e-9 * max(1.0, r.epsilon)) > total
  assert r.epsilon <= eps * k


def test_exact_zero_cases():
  """ε = 0 composes to 0; when δ(0) ≤ δ_total already (tiny ε, large δ_total) the answer is
  0 (checked here: δ(0) = E[(1 − e^{−L})_+] ≤ δ_total).

  Catches: returning ε·k or the bisection's first midpoint instead of 0.
  """
  r = comp.exact(0.0, 1e-6, 5, 1e-3)
  assert r.epsilon == 0.0 and r.feasible and r.k == 5
  assert r.delta == 1e-3 and r.method == "exact"
  assert _kov_delta(1e-4, 0.0, 4, 0.0) <= 0.5
  z = comp.exact(1e-4, 0.0, 4, 0.5)
  assert z.epsilon == 0.0 and z.feasible and z.delta == 0.5
  assert z.k == 4 and z.method == "exact"


def test_exact_spent_boundary():
  """The budget is spent iff 1−(1−δ)^k ≥ δ_total, the tie included (then ε = ∞,
  infeasible, with k and the method kept); just below, a finite ε is returned.

  Catches: ``>`` for ``>=`` at the boundary, k·δ instead of 1−(1−δ)^k.
  """
  delta, k = 1e-3, 10
  spent = 1.0 - (1.0 - delta)**k  # 0.009955 < k·δ = 0.01
  over = comp.exact(0.1, delta, k, spent * (1 - 1e-9))
  assert over.epsilon == math.inf and over.feasible is False and "spent" in over.reason
  assert over.delta == pytest.approx(spent * (1 - 1e-9)) and over.k == k
  assert over.method == "exact"
  tie = comp.exact(0.1, delta, k, -math.expm1(k * math.log1p(-delta)))  # = 1−(1−δ)^k
  assert tie.epsilon == math.inf and tie.feasible is False
  ok = comp.exact(0.1, delta, k, 0.00999)  # between 1−(1−δ)^k and k·δ
  assert ok.feasible and math.isfinite(ok.epsilon)
  assert _kov_delta(0.1, delta, k, ok.epsilon) <= 0.00999 * (1 + 1e-9)


def test_exact_large_k_close_to_pld():
  """For k = 1000 the exact answer is at most a fresh dp_accounting PLD (pessimistic by its
  discretization) and within 0.5% of it.

  Catches: the truncation of the binomial's lower tail (``binom.ppf(1e-30)``) dropping
  mass that matters, or that mass not charged (``below``).
  """
  r = comp.exact(0.05, 1e-8, 1000, 1e-4)
  fine = _fresh_pld(0.05, 1e-8, 1000, 1e-4)
  assert r.epsilon <= fine <= r.epsilon * 1.005


def test_pld_matches_fresh_accountant_and_rounds():
  """``pld`` equals a fresh dp_accounting PLD of the same (ε, δ), composed k times and then
  ``rounds`` times; k in the result is k·rounds.

  Catches: rounds ignored or squared (or ignored at two rounds: an under-reported ε),
  k·rounds wrong in the result, the discretization interval not passed on, the spent
  budget's tie handed to dp_accounting.
  """
  r = comp.pld(0.3, 1e-7, 20, 1e-4)
  assert r.feasible and r.k == 20 and r.method == "pld" and r.delta == 1e-4
  assert r.epsilon == pytest.approx(_fresh_pld(0.3, 1e-7, 20, 1e-4), rel=1e-9)
  r3 = comp.pld(0.3, 1e-7, 20, 1e-4, rounds=3)
  assert r3.k == 60
  assert r3.epsilon == pytest.approx(_fresh_pld(0.3, 1e-7, 60, 1e-4), rel=2e-3)
  assert r3.epsilon > r.epsilon * 1.5
  # Two rounds are composed too (the smallest count past one round).
  r2 = comp.pld(0.3, 1e-7, 20, 1e-4, rounds=2)
  assert r2.k == 40
  assert r2.epsilon == pytest.approx(_fresh_pld(0.3, 1e-7, 40, 1e-4), rel=2e-3)
  coarse = comp.pld(0.3, 1e-7, 20, 1e-4, value_discretization_interval=1e-2)
  assert coarse.epsilon == pytest.approx(_fresh_pld(0.3, 1e-7, 20, 1e-4, 1e-2), rel=1e-9)
  assert coarse.epsilon != r.epsilon
  assert comp.pld(0.3, 1e-3, 10, 0.0296, rounds=3).feasible  # 1−(1−1e-3)^30 = 0.02955
  gone = comp.pld(0.3, 1e-3, 10, 0.0295, rounds=3)
  assert gone.epsilon == math.inf and gone.feasible is False and gone.k == 30
  assert gone.delta == 0.0295 and gone.method == "pld"
  assert "spent" in gone.reason
  # The tie 1−(1−δ)^(k·rounds) = δ_total is spent too (nothing is left for the finite part).
  tie = comp.pld(0.3, 1e-3, 10, comp._spent(30, 1e-3), rounds=3)
  assert tie.feasible is False and "spent" in tie.reason
  with pytest.raises(ValueError, match="rounds"):
    comp.pld(0.3, 1e-7, 20, 1e-4, rounds=0)


def test_advanced_formula_by_hand():
  """Advanced composition: ε√(2k ln(1/δ′)) + kε(e^ε−1), δ^{uc} = δ′ + kδ, with δ′ given or
  δ′ = δ_total − kδ; ∞ once kδ ≥ δ_total.

  Catches: a wrong constant or term in the formula, δ^{uc} without kδ, δ′ from δ_total
  computed wrongly, the spent test off at the boundary.
  """
  eps, delta, k = 0.1, 1e-6, 50
  by_hand = eps * math.sqrt(2 * k * math.log(1 / 1e-5)) + k * eps * (math.exp(eps) - 1)
  r = comp.advanced(eps, delta, k, delta_prime=1e-5)
  assert r.epsilon == pytest.approx(by_hand, rel=1e-12)
  assert r.delta == pytest.approx(1e-5 + 50e-6, rel=1e-12) and r.k == 50 and r.feasible
  t = comp.advanced(eps, delta, k, delta_total=6e-5)  # δ′ = 6e-5 − 5e-5 = 1e-5
  assert t.epsilon == pytest.approx(by_hand, rel=1e-9)
  assert t.delta == pytest.approx(6e-5, rel=1e-12) and t.method == "advanced"
  edge = comp.advanced(eps, delta, k, delta_total=k * delta)  # δ′ = 0 exactly
  assert edge.epsilon == math.inf and edge.feasible is False and edge.delta == k * delta
  assert edge.k == k and edge.method == "advanced"
  assert "spent" in edge.reason
  with pytest.raises(ValueError, match="exactly one"):
    comp.advanced(eps, delta, k, delta_prime=1e-5, delta_total=6e-5)
  with pytest.raises(ValueError, match=r"^delta_prime=1\.0 must"):
    comp.advanced(eps, delta, k, delta_prime=1.0)


def test_sapes_prop1_is_advanced_over_2b():
  """Prop. 1: ε√(4b ln(1/δ′)) + 2bε(e^ε−1), δ^{uc} = δ′ + 2bδ (by hand).

  Catches: b or 4b compositions instead of 2b, the method label lost.
  """
  eps, delta, b = 0.05, 1e-7, 30
  r = comp.sapes_prop1(eps, delta, b, delta_prime=1e-6)
  assert r.epsilon == pytest.approx(
      eps * math.sqrt(4 * b * math.log(1e6)) + 2 * b * eps * math.expm1(eps), rel=1e-12)
  assert r.delta == pytest.approx(1e-6 + 60 * 1e-7, rel=1e-12)
  assert r.k == 60 and r.method == "sapes_prop1" and r.feasible
  assert comp.sapes_prop1(eps, delta, 1, delta_prime=1e-6).k == 2
  with pytest.raises(ValueError, match="b="):
    comp.sapes_prop1(eps, delta, 2.5, delta_prime=1e-6)


@pytest.mark.parametrize("args,match", [
    ((-0.1, 1e-9, 10, 1e-5), "epsilon"),
    ((math.inf, 1e-9, 10, 1e-5), "epsilon"),
    ((math.nan, 1e-9, 10, 1e-5), "epsilon"),
    ((0.1, -1e-9, 10, 1e-5), "delta"),
    ((0.1, 1.0, 10, 1e-5), "delta"),
    ((0.1, 1e-9, 2.5, 1e-5), "k="),
    ((0.1, 1e-9, 10, 0.0), r"^delta_total=0.0 must"),
    ((0.1, 1e-9, 10, 1.0), r"^delta_total=1.0 must"),
])
def test_more_errors(args, match):
  """Invalid ε, per-step δ, k or δ_total are refused by every accountant.

  Catches: a weakened range check (each bound alone), δ_total's refusal naming another
  parameter.
  """
  with pytest.raises(ValueError, match=match):
    comp.exact(*args)
  with pytest.raises(ValueError, match=match):
    comp.pld(*args)


def test_valid_edges_accepted():
  """ε = 0, δ = 0 and k = 1 are valid inputs; local composition is k·ε.

  Catches: a settings check that refuses a valid edge.
  """
  assert comp.exact(0.0, 0.0, 1, 0.5).epsilon == 0.0
  assert comp.advanced(0.0, 0.0, 1, delta_prime=0.5).epsilon == 0.0
  assert comp.local_composed(2, 3) == 6.0 and isinstance(comp.local_composed(2, 3), float)
  assert comp.Composed(1.0, 1e-5, 2, "x").to_dict() == {
      "epsilon": 1.0, "delta": 1e-5, "k": 2, "method": "x", "feasible": True, "reason": ""}


def test_reasons_say_what_spent_the_budget_and_are_empty_when_feasible():
  """Property: a feasible result carries no reason; each infeasible one says which term
  spent δ, with its value and what to change (the ``reason`` goes into every result's
  ``to_dict``); dp_accounting's own ∞ (δ_total a hair above the spent 1−(1−δ)^k, which
  its PLD of the same pair cannot meet) is reported as infeasible with its cause.

  Bugs caught: a reason on a feasible PLD result, an infeasible PLD result without one,
  the advanced composition's k·δ^c misprinted, the explanations' text changed."""
  delta, k = 1e-3, 10
  spent = comp._spent(k, delta)
  assert comp.pld(0.3, delta, k, 1e-2).reason == ""
  assert comp.exact(0.3, delta, k, 1e-2).reason == ""
  hair = comp.pld(0.3, delta, k, spent * (1 + 1e-15))
  assert hair.epsilon == math.inf and hair.feasible is False
  assert hair.reason == "dp_accounting returned inf (δ_total too small)."
  assert comp.pld(0.3, delta, k, 5e-3, rounds=2).reason == (
      "1-(1-δ^c)^(k·rounds) = 0.01981 >= δ_total = 0.005: the δ budget is spent; lower "
      "δ^c, k or rounds, or raise δ_total.")
  assert comp.exact(0.3, delta, k, 5e-3).reason == (
      "1-(1-δ^c)^k = 0.009955 >= δ_total = 0.005: the δ budget is spent; lower δ^c "
      "(the shuffle δ_s), k, or raise δ_total.")
  assert comp.advanced(0.3, delta, k, delta_total=5e-3).reason == (
      "k·δ^c = 0.01 >= δ_total = 0.005: the δ budget is spent; lower δ^c or k, or raise "
      "δ_total.")


def _smallest_certified(eps: float, delta: float, k: int, total: float) -> float:
  """The smallest ε_g with δ(ε_g) ≤ total by a 200-step bisection of ``_kov_delta``."""
  lo, hi = 0.0, eps * k
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    if _kov_delta(eps, delta, k, mid) <= total:
      hi = mid
    else:
      lo = mid
  return hi


def test_exact_is_within_its_stated_tolerance_of_the_optimum():
  """Property: ``exact`` stops its bisection once the bracket is narrower than
  1e-12·max(1, ε), so its answer is certified and at most that far above the smallest
  certified ε (found here by a 200-step bisection), on twelve settings with answers
  below 2. Bug caught: a looser stopping rule (the bracket's floor doubled)."""
  gaps = []
  for eps, k in [(0.01, 30), (0.02, 40), (0.03, 25), (0.05, 10), (0.07, 12), (0.1, 8),
                 (0.15, 6), (0.2, 5), (0.3, 4), (0.4, 3), (0.6, 2), (0.9, 1)]:
    r = comp.exact(eps, 1e-7, k, 1e-3)
    best = _smallest_certified(eps, 1e-7, k, 1e-3)
    assert 0.0 < r.epsilon < 2.0
    gaps.append((r.epsilon - best) / max(1.0, r.epsilon))
  assert min(gaps) >= -1e-14 and max(gaps) <= 1e-12, gaps
