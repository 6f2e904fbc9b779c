"""EoN as published (Thm 4 and the tables' numeric procedure); notes §2.6."""
import numpy as np
import pytest

from tff_idp.accounting.shuffle import clip_laplace_reference as clap
from tff_idp.accounting.shuffle import eon

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
