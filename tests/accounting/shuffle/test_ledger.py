"""APES / S-APES ledger: Table 3/4 parity, the sound default, flags and errors."""
import json
import math

import numpy as np
import pytest
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from tests.accounting.shuffle.clone_reference import clip_laplace_clone_probs, clone_delta
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


# --- Fast settings (small n, small d) checked against numbers computed here ---------------
# Independent references: the clone reduction summed term by term (Poisson-binomial pmf by
# convolution, each pair divergence from the two shifted Bin(c, 1/2) pmfs), the optimal
# k-fold composition of (ε, δ)-DP (Kairouz, Oh, Viswanath 2015) with math.comb, the
# paper's advanced composition by hand, and a fresh dp_accounting PLD.

NS, DS, D_SMALL, UD = 400, 1e-4, 10, 1e-2


def _composed_delta(eps: float, delta: float, k: int, eps_g: float) -> float:
  """δ(ε_g) of k-fold optimal composition of (ε, δ)-DP (privacy-loss form, by math.comb)."""
  a = math.exp(eps) / (1.0 + math.exp(eps))
  s = sum(math.comb(k, j) * a**j * (1 - a)**(k - j)
          * max(0.0, -math.expm1(eps_g - eps * (2 * j - k))) for j in range(k + 1))
  return 1.0 - (1.0 - delta)**k + (1.0 - delta)**k * s


def _assert_smallest(delta_fn, eps: float, target: float, step: float = 1e-6):
  """``eps`` certifies ``target`` and a hair smaller does not (the bisection is tight)."""
  assert delta_fn(eps) <= target * (1 + 1e-9)
  assert delta_fn(eps - step) > target


def _advanced(eps: float, delta: float, k: int, delta_prime: float) -> float:
  return eps * math.sqrt(2 * k * math.log(1 / delta_prime)) + k * eps * math.expm1(eps)


def _fresh_pld(eps: float, delta: float, k: int, total: float) -> float:
  pld = pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(eps, delta),
                                        value_discretization_interval=1e-4)
  return float(pld.self_compose(k).get_epsilon_for_delta(total))


@pytest.fixture(scope="module")
def homogeneous():
  return L.ApesLedger(np.full(NS, 1.0), D_SMALL, DS, UD).round_account()


def test_homogeneous_round_against_independent_numbers(homogeneous):
  """APES per-user round, n=400 at ε=1: ε^c is the exact clone-reduction ε at δ_s (summed
  here term by term), δ^c = δ_s, the user level composes k = d = 10 coordinates (optimal
  composition, fresh PLD, advanced composition with δ′ = δ_user − kδ^c).

  Catches: a wrong clone probability, target α, δ^c or k; composing the wrong number of
  coordinates or at the wrong δ; the paper's δ′ or the PLD built from other inputs.
  """
  r = homogeneous
  assert (r.bound, r.n, r.d, r.b, r.k, r.selection) == ("per_user", NS, D_SMALL, None, 10, None)
  assert r.amplified and r.reason == "" and r.delta_c == DS
  assert r.epsilon_min == 1.0 and r.epsilon_max == 1.0
  assert r.epsilon_ul == (10.0, 10.0)
  probs = np.full(NS - 1, math.exp(-1.0))
  _assert_smallest(lambda x: clone_delta(probs, 1.0, x), r.epsilon_c, DS)
  assert 0.15 < r.epsilon_c < 0.25  # a real gain over the local ε = 1
  ul = r.user_level
  assert (ul.k, ul.delta, ul.feasible, ul.method) == (10, UD, True, "exact")
  _assert_smallest(lambda x: _composed_delta(r.epsilon_c, DS, 10, x), ul.epsilon, UD)
  assert r.user_level_pld.k == 10
  assert r.user_level_pld.epsilon == pytest.approx(_fresh_pld(r.epsilon_c, DS, 10, UD),
                                                   rel=1e-6)
  paper = r.user_level_paper
  assert paper.k == 10 and paper.method == "advanced"
  assert paper.epsilon == pytest.approx(_advanced(r.epsilon_c, DS, 10, UD - 10 * DS), rel=1e-12)
  assert paper.delta == pytest.approx(UD, rel=1e-12)
  assert r.epsilon_c_claimed is None and r.epsilon_ul_published is None
  (lv,) = r.levels
  assert (lv["epsilon_lo"], lv["epsilon_hi"], lv["users"]) == (1.0, 1.0, NS)
  assert lv["epsilon_c"] == r.epsilon_c
  assert lv["user_level_epsilon"] == pytest.approx(ul.epsilon, abs=1e-9)


def test_cumulative_composes_k_times_rounds(homogeneous):
  """After t rounds the user level is the (d·t)-fold composition (optimal, PLD, advanced);
  ``history`` lists t = 1..T.

  Catches: composing k or rounds instead of k·rounds; the PLD of one round only; a history
  off by one round.
  """
  led = L.ApesLedger(np.full(NS, 1.0), D_SMALL, DS, UD)
  eps_c = homogeneous.epsilon_c
  c = led.cumulative(3, include_pld=True)
  assert c.rounds == 3 and c.user_level.k == 30 and c.user_level_paper.k == 30
  _assert_smallest(lambda x: _composed_delta(eps_c, DS, 30, x), c.user_level.epsilon, UD)
  assert c.user_level_paper.epsilon == pytest.approx(_advanced(eps_c, DS, 30, UD - 30 * DS),
                                                     rel=1e-12)
  assert c.user_level_pld.k == 30
  assert c.user_level_pld.epsilon == pytest.approx(_fresh_pld(eps_c, DS, 30, UD), rel=2e-3)
  assert c.user_level.epsilon <= c.user_level_pld.epsilon
  assert led.cumulative(2).user_level_pld is None  # include_pld defaults to False
  h = led.history(3)
  assert len(h) == 3 and h[-1] == c.user_level.epsilon
  _assert_smallest(lambda x: _composed_delta(eps_c, DS, 20, x), h[1], UD)
  assert led.to_dict()["round"]["user_level"]["k"] == 10 and "cumulative" not in led.to_dict()
  with pytest.raises(ValueError, match="rounds"):
    led.cumulative(1.5)


def test_paper_delta_prime_is_used_when_given(homogeneous):
  """With ``paper_delta_prime`` the paper's column uses that δ′ (and δ^{uc} = δ′ + kδ^c);
  the sound user level still uses δ_user.

  Catches: ignoring the given δ′, or using it for the sound column.
  """
  led = L.ApesLedger(np.full(NS, 1.0), D_SMALL, DS, UD, paper_delta_prime=1e-5,
                     include_pld=False)
  r = led.round_account()
  assert r.user_level_pld is None
  assert r.user_level_paper.epsilon == pytest.approx(
      _advanced(r.epsilon_c, DS, 10, 1e-5), rel=1e-12)
  assert r.user_level_paper.delta == pytest.approx(1e-5 + 10 * DS, rel=1e-12)
  assert r.user_level.epsilon == homogeneous.user_level.epsilon
  assert led.to_dict()["settings"]["paper_delta_prime"] == 1e-5


def test_sapes_random_composes_b_coordinates(homogeneous):
  """S-APES with the data-independent random b-subset (the default selection): k = b,
  ε^{ul} = b·ε, the same coordinate-level ε^c, Prop. 1 (2b compositions) for the paper.

  Catches: composing d instead of b, a default selection other than ``random``, Prop. 1
  over b instead of 2b, or rounds not multiplying b in the paper's column.
  """
  led = L.ApesLedger(np.r_[np.full(NS - 1, 1.0), 0.5], D_SMALL, DS, UD, b=3)
  assert led.selection == "random" and led.k == 3
  r = led.round_account()
  assert r.b == 3 and r.k == 3 and r.selection == "random" and r.amplified
  assert r.epsilon_ul == (1.5, 3.0)
  _assert_smallest(lambda x: _composed_delta(r.epsilon_c, DS, 3, x), r.user_level.epsilon, UD)
  paper = r.user_level_paper
  assert paper.k == 6 and paper.method == "sapes_prop1"
  assert paper.epsilon == pytest.approx(_advanced(r.epsilon_c, DS, 6, UD - 6 * DS), rel=1e-12)
  c = led.cumulative(2)
  assert c.user_level.k == 6 and c.user_level_paper.k == 12
  assert c.user_level_paper.epsilon == pytest.approx(
      _advanced(r.epsilon_c, DS, 12, UD - 12 * DS), rel=1e-12)
  assert led.to_dict()["settings"]["selection"] == "random"


def test_sapes_top_b_is_not_amplified_and_composes_d(homogeneous):
  """Post-top-b S-APES certifies no shuffle gain: ε^c = ε_max, δ^c = 0, k = d (pure
  composition of d coordinates at ε_max), ε^{ul} = d·ε; the paper's b·ε and the per-user
  ε^c are kept only as claims, which feed the paper's Prop. 1 column.

  Catches: reporting the per-coordinate amplified ε^c (or b compositions) as the guarantee
  of top-b — the release is only d·ε-LDP (sparsified_density) — or losing the claims.
  """
  led = L.ApesLedger(np.full(NS, 1.0), D_SMALL, DS, UD, b=2, selection="top_b",
                     include_pld=False)
  assert led.k == D_SMALL
  r = led.round_account()
  assert not r.amplified and r.reason == L.TOP_B_REASON
  assert r.epsilon_c == 1.0 and r.delta_c == 0.0 and r.k == D_SMALL
  assert r.epsilon_ul == (10.0, 10.0) and r.epsilon_ul_published == (2.0, 2.0)
  assert r.epsilon_c_claimed == homogeneous.epsilon_c
  assert r.levels is None
  _assert_smallest(lambda x: _composed_delta(1.0, 0.0, D_SMALL, x), r.user_level.epsilon, UD)
  assert r.user_level_paper.k == 4 and r.user_level_paper.epsilon == pytest.approx(
      _advanced(homogeneous.epsilon_c, DS, 4, UD - 4 * DS), rel=1e-12)
  d = r.to_dict()
  assert d["epsilon_ul_published"] == [2.0, 2.0] and d["epsilon_ul"] == [10.0, 10.0]
  c = led.cumulative(2)
  assert c.user_level.k == 2 * D_SMALL and c.user_level_paper.k == 8
  # After 2 rounds the paper's column still composes the claimed per-coordinate ε^c.
  assert c.user_level_paper.epsilon == pytest.approx(
      _advanced(homogeneous.epsilon_c, DS, 8, UD - 8 * DS), rel=1e-12)
  _assert_smallest(lambda x: _composed_delta(1.0, 0.0, 2 * D_SMALL, x), c.user_level.epsilon, UD)


def test_two_budget_levels_against_independent_numbers():
  """Two budgets (300 users at 0.5, 100 at 1.0): one exact level per budget (its own
  clone probabilities without the target, its own α), ε^c = the max level, and each
  level's user-level ε is the k-fold composition at that level's (ε_g, δ_s).

  Catches: the wrong level as the population ε^c, a level composed at δ = 0 or with the
  population's ε^c, or a level's users miscounted.
  """
  e = np.r_[np.full(300, 0.5), np.full(100, 1.0)]
  r = L.ApesLedger(e, D_SMALL, DS, UD, include_pld=False).round_account()
  assert r.epsilon_min == 0.5 and r.epsilon_max == 1.0 and r.epsilon_ul == (5.0, 10.0)
  lo, hi = r.levels
  assert (lo["epsilon_hi"], lo["users"], hi["epsilon_hi"], hi["users"]) == (0.5, 300, 1.0, 100)
  for lv, eps_u in ((lo, 0.5), (hi, 1.0)):
    others = np.r_[np.full(300 - (eps_u == 0.5), 0.5), np.full(100 - (eps_u == 1.0), 1.0)]
    probs = clip_laplace_clone_probs(others, eps_u)
    _assert_smallest(lambda x: clone_delta(probs, eps_u, x), lv["epsilon_c"], DS)
    _assert_smallest(lambda x: _composed_delta(lv["epsilon_c"], DS, 10, x),
                     lv["user_level_epsilon"], UD)
  assert r.epsilon_c == max(lo["epsilon_c"], hi["epsilon_c"]) == hi["epsilon_c"]
  _assert_smallest(lambda x: _composed_delta(r.epsilon_c, DS, 10, x), r.user_level.epsilon, UD)


def test_fmt22_max_bound_small_and_large_n():
  """UniS (``fmt22_max``): δ^c = tanh(ε_max/2)·δ_s; for n ≤ 100 the exact FMT22 reduction at
  ε_max (Bin(n−1, e^{−ε_max}) clones, summed here); for n > 100 Apple's blocked loop,
  which over-approximates the exact value. Budgets below ε_max do not enter.

  Catches: δ^c = δ_s, using the blocked loop (≈ 0, unsound) for n ≤ 100, ε_min instead
  of ε_max.
  """
  e = np.r_[np.full(99, 1.0), 0.2]  # n = 100
  r = L.ApesLedger(e, D_SMALL, 1e-3, 0.1, bound="fmt22_max", include_pld=False).round_account()
  assert r.amplified and "exact FMT22 reduction" in r.reason
  assert r.delta_c == pytest.approx(math.tanh(0.5) * 1e-3, rel=1e-12)
  probs = np.full(99, math.exp(-1.0))
  _assert_smallest(lambda x: clone_delta(probs, 1.0, x), r.epsilon_c, 1e-3)
  big = np.r_[np.full(NS - 1, 1.0), 0.2]
  rb = L.ApesLedger(big, D_SMALL, DS, UD, bound="fmt22_max", include_pld=False).round_account()
  assert rb.amplified and rb.reason == "" and rb.label.startswith("UniS")
  probs = np.full(NS - 1, math.exp(-1.0))
  assert clone_delta(probs, 1.0, rb.epsilon_c) <= DS  # certifies δ_s (over-approximates)
  assert rb.epsilon_c < 1.0
  assert rb.delta_c == pytest.approx(math.tanh(0.5) * DS, rel=1e-12)


def test_eon_bound_delta_and_threshold():
  """EoN as published: amplified only once S ≥ 16 ln(4/δ_s), then δ^c = tanh(ε_max/2)·δ_s
  and ε^c below ε_max.

  Catches: δ^c = δ_s for EoN, or the threshold test inverted.
  """
  e = np.full(2000, 1.0)  # S = (n−1)e^{−1} = 735 ≥ 16 ln(4e4) = 170
  r = L.ApesLedger(e, D_SMALL, 1e-4, 0.1, bound="eon_paper", include_pld=False).round_account()
  assert r.amplified and r.reason == "" and 0.0 < r.epsilon_c < 1.0
  assert r.delta_c == pytest.approx(math.tanh(0.5) * 1e-4, rel=1e-12)


def test_settings_at_the_edges_are_accepted():
  """Valid edge settings construct: d = 1, b = 1 and b = d, n = 2, tiny/near-1 deltas.

  Catches: off-by-one ranges in the settings check (b ≤ d, d ≥ 1, δ < 1).
  """
  e = [0.5, 1.0]
  assert L.ApesLedger(e, 1, 1e-6, 1e-5).k == 1
  assert L.ApesLedger(e, 10, 1e-6, 1e-5, b=10).k == 10
  assert L.ApesLedger(e, 10, 1e-6, 1e-5, b=1).k == 1
  assert L.ApesLedger(e, 10, 1e-6, 1e-5, b=np.int64(4)).b == 4
  assert L.ApesLedger(e, np.int64(3), 0.999, 0.999).d == 3
  for bound in L.BOUNDS:
    assert L.ApesLedger(e, 10, 1e-6, 1e-5, bound=bound).bound == bound
  led = L.ApesLedger(e, 10, 1e-6, 1e-5, clip=2.5)
  s = led.to_dict()["settings"]
  assert s == {"n": 2, "d": 10, "b": None, "selection": None, "delta_s": 1e-6,
               "user_delta": 1e-5, "bound": "per_user", "clip": 2.5,
               "paper_delta_prime": None}


@pytest.mark.parametrize("kwargs,match", [
    (dict(b=2.5), "b="),
    (dict(d=2.0), "d="),
    (dict(delta_s=1.0), "delta_s"),
    (dict(user_delta=0.0), "user_delta"),
    (dict(clip=math.inf), "clip"),
    (dict(clip=math.nan), "clip"),
    (dict(clip=-1.0), "clip"),
    (dict(epsilons=[1.0, -1.0]), "finite and > 0"),
    (dict(selection="random"), "selection="),
    (dict(b=2, selection="top"), "selection="),
])
def test_more_errors(kwargs, match):
  """Invalid settings are refused: non-integer b or d, δ outside (0, 1), a non-finite or
  negative clip, a selection for APES or an unknown one for S-APES.

  Catches: a dropped or weakened settings check (each case alone).
  """
  args = dict(epsilons=[0.5, 1.0], d=10, delta_s=1e-6, user_delta=1e-5)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    L.ApesLedger(**args)


def test_max_levels_is_passed_to_the_population_bound():
  """With ``max_levels=1`` the per-user bound groups all 300 users (budgets 0.3, 0.8, 1.5)
  into one level bounded at ε_hi = 1.5 with every user's clone probability q_j =
  a(ε_j)b(1.5)e^{−ε_j} except the largest (summed here); ε^c is that level's.

  Catches: the ledger's ``max_levels`` ignored (three exact levels reported instead).
  """
  e = np.r_[np.full(150, 0.3), np.full(100, 0.8), np.full(50, 1.5)]
  r = L.ApesLedger(e, D_SMALL, DS, UD, max_levels=1, include_pld=False).round_account()
  (lv,) = r.levels
  assert (lv["epsilon_lo"], lv["epsilon_hi"], lv["users"]) == (0.3, 1.5, 300)
  q = np.sort(clip_laplace_clone_probs(e, 1.5))[:-1]
  _assert_smallest(lambda x: clone_delta(q, 1.5, x), r.epsilon_c, DS)
  assert lv["epsilon_c"] == r.epsilon_c
  assert len(L.ApesLedger(e, D_SMALL, DS, UD, max_levels=2,
                          include_pld=False).round_account().levels) == 2


def test_fmt22_max_without_gain_is_plain_ldp():
  """UniS with two users at ε = 1 and δ_s = 1e-9: FMT22 (exact reduction, n ≤ 100) gives
  no gain, so the round is plain LDP: ε^c = ε_max, δ^c = 0, not amplified, and the reason
  names both the missing gain and the empty published loop; the user level is then the
  pure d-fold composition (by hand).

  Catches: a no-gain bound reported as amplified (with δ^c = tanh(ε/2)·δ_s), δ^c ≠ 0 for
  plain LDP, a threshold above ε_max.
  """
  r = L.ApesLedger([1.0, 1.0], D_SMALL, 1e-9, UD, bound="fmt22_max",
                   include_pld=False).round_account()
  assert not r.amplified and r.epsilon_c == 1.0 and r.delta_c == 0.0
  assert "gives no gain" in r.reason and "blocked loop is empty" in r.reason
  _assert_smallest(lambda x: _composed_delta(1.0, 0.0, D_SMALL, x), r.user_level.epsilon, UD)


def test_a_level_the_shuffle_does_not_amplify_composes_as_pure_dp():
  """A level whose ε^c is its own ε (no amplification: at δ_s = 1e-12 the 10.0 user among
  three 0.5s gains nothing) charges δ_g = 0 per round, so its user-level ε is the k-fold
  composition of pure ε-DP, checked against the binomial form.

  Catches: the unamplified branch charging δ_g = 1 (a per-round δ that certifies nothing).
  """
  e = np.r_[[0.5, 0.5, 0.5], [10.0]]
  r = L.ApesLedger(e, D_SMALL, 1e-12, UD, include_pld=False).round_account()
  lo, hi = r.levels
  assert hi["epsilon_hi"] == hi["epsilon_c"] == 10.0 and lo["epsilon_c"] < lo["epsilon_hi"]
  _assert_smallest(lambda x: _composed_delta(10.0, 0.0, D_SMALL, x), hi["user_level_epsilon"],
                   UD)
