"""EoN as published (Thm 4 and the tables' numeric procedure); notes §2.6."""
import math

import numpy as np
import pytest

from tff_idp.accounting.shuffle import clip_laplace_reference as clap
from tff_idp.accounting.shuffle import eon
from tff_idp.accounting.shuffle import fmt22

N = 10_000
DELTA = 1e-8

VECTORS = [
    ("all 1.0", lambda: np.ones(N), 0.240816, 0.069611, 1e-6),
    ("all 0.5", lambda: np.full(N, 0.5), 0.106427, 0.027438, 1e-6),
    ("5000x0.1+5000x1", lambda: np.r_[np.full(5000, 0.1), np.ones(5000)], 0.206518, 0.057882, 1e-6),
    ("linspace", lambda: np.linspace(0.05, 1, N), 0.205144, 0.057496, 1e-6),
    ("Uniform2", lambda: clap.sample_epsilons("Uniform2", N, np.random.default_rng(0)), 0.20510, 0.05749, 1e-5),
    ("Uniform1", lambda: clap.sample_epsilons("Uniform1", N, np.random.default_rng(0)), 0.09864, 0.02514, 1e-5),
    ("Gauss2", lambda: clap.sample_epsilons("Gauss2", N, np.random.default_rng(0)), 0.19434, 0.05409, 1e-5),
    ("MixGauss2", lambda: clap.sample_epsilons("MixGauss2", N, np.random.default_rng(0)), 0.19734, 0.05492, 1e-5),
]


@pytest.mark.parametrize("name,make,closed,numeric,tol", VECTORS[:5] + VECTORS[6:7])
def test_notes_vectors(name, make, closed, numeric, tol):
  r = eon.bound(make(), DELTA)
  assert r.amplified
  assert r.epsilon_closed_form == pytest.approx(closed, abs=tol)
  assert r.epsilon_numeric == pytest.approx(numeric, abs=tol)


@pytest.mark.slow
@pytest.mark.parametrize("name,make,closed,numeric,tol", VECTORS[5:6] + VECTORS[7:])
def test_notes_vectors_more(name, make, closed, numeric, tol):
  r = eon.bound(make(), DELTA)
  assert r.epsilon_closed_form == pytest.approx(closed, abs=tol)
  assert r.epsilon_numeric == pytest.approx(numeric, abs=tol)


def test_delta_c_and_threshold():
  assert eon.delta_c(1.0, 1e-8) == pytest.approx(4.6211716e-9, rel=1e-7)
  small = np.full(50, 1.0)  # S = 49·e^{-1} ≈ 18 < 16 ln(4e8) ≈ 316
  r = eon.bound(small, DELTA)
  assert not r.amplified
  assert r.epsilon_numeric == r.epsilon_closed_form == 1.0
  assert eon.numeric(small, DELTA) == 1.0


def test_closed_form_has_the_square_root():
  s, em = 3678.4265, 1.0
  root = np.log(1 + np.tanh(em / 2) * (8 * np.sqrt(np.log(4 / DELTA) / s) + 8 / s))
  assert eon.closed_form(s, em, DELTA) == pytest.approx(root, rel=1e-14)


def test_threshold_closed_form_and_delta_by_hand():
  """Thm 4: threshold 16 ln(4/δ_s); at S equal to it the bound applies (≥), below it the
  local ε*; ε^c = ln(1 + tanh(ε*/2)(8√(ln(4/δ)/S) + 8/S)); δ^c = (e^{ε*}−1)/(e^{ε*}+1)·δ_s.

  Catches: ``>`` for ``≥`` at the threshold, a wrong constant, tanh(ε*) for tanh(ε*/2).
  """
  d = 1e-4
  t = 16 * math.log(4 / d)
  assert eon.threshold(d) == pytest.approx(t, rel=1e-14)
  em = 0.8
  r = (math.exp(em) - 1) / (math.exp(em) + 1)
  at = math.log(1 + r * (8 * math.sqrt(math.log(4 / d) / t) + 8 / t))
  assert eon.closed_form(t, em, d) == pytest.approx(at, rel=1e-12)
  assert eon.closed_form(math.nextafter(t, 0.0), em, d) == em
  assert eon.delta_c(em, d) == pytest.approx(r * d, rel=1e-14)
  for bad in (0.0, 1.0):
    with pytest.raises(ValueError, match="delta"):
      eon.threshold(bad)


def test_bound_fields_small_population():
  """For n = 2000 users at ε = 1 (S = 1999·e^{−1}, above the threshold at δ = 1e-4):
  S and its variance term by hand, δ^c = tanh(½)·δ, the numeric ε^c below the closed form,
  and close to Apple's blocked FMT22 loop at ε_max (the same procedure with a Binomial
  count; the Normal approximation moves it by well under 1%: 0.16% here).

  Catches: S or the variance wrong in the result, δ^c not scaled, the numeric search
  started elsewhere or run on a mis-specified Normal count.
  """
  n, d = 2000, 1e-4
  r = eon.bound(np.ones(n), d)
  p = math.exp(-1.0)
  assert r.amplified and r.epsilon_max == 1.0
  assert r.s == pytest.approx((n - 1) * p, rel=1e-12)
  assert r.variance == pytest.approx((n - 1) * n * (p / n) * (1 - p / n), rel=1e-12)
  assert r.delta_c == pytest.approx(math.tanh(0.5) * d, rel=1e-14)
  assert r.epsilon_closed_form == pytest.approx(
      math.log(1 + math.tanh(0.5) * (8 * math.sqrt(math.log(4 / d) / r.s) + 8 / r.s)),
      rel=1e-12)
  assert 0.0 < r.epsilon_numeric < r.epsilon_closed_form < 1.0
  assert r.epsilon_numeric == eon.numeric(np.ones(n), d)
  apple = fmt22.numeric_apple(n, 1.0, d, num_iterations=20, fix_typo=False)
  assert r.epsilon_numeric == pytest.approx(apple, rel=0.01)
  exact = fmt22.numeric(n, 1.0, d)
  assert r.epsilon_numeric > exact * 0.9
  below = eon.bound(np.ones(n), 1e-300)  # threshold 16 ln(4e300) ≈ 11074 > S
  assert not below.amplified and below.delta_c == 0.0 and below.epsilon_numeric == 1.0


def test_bound_passes_its_block_step_to_the_numeric_procedure():
  """``bound(..., step=s)`` reports ``numeric(..., step=s)``: the block width moves the number
  (0.06961 at 100, 0.06914 at 50 for 10,000 users at ε = 1). Bug caught: the step dropped."""
  e = np.ones(N)
  assert eon.bound(e, DELTA, step=50).epsilon_numeric == eon.numeric(e, DELTA, step=50)
  assert eon.numeric(e, DELTA, step=50) != pytest.approx(eon.numeric(e, DELTA), abs=1e-4)
  # numeric's own default is the published block width, 100 (Apple's computeamplification.py);
  # 101 lands on the same ε here (see docs/architecture.md, equivalent mutants).
  assert eon.numeric(e, DELTA) == eon.numeric(e, DELTA, step=100)
