"""Clip-Laplace NumPy reference (APES Def. 4, Thm 1, Eq. (1)); notes §2.1."""
import numpy as np
import pytest
from scipy import integrate

from tff_idp.accounting.shuffle import clip_laplace_reference as clap

C = 0.1

from tests.clip_laplace_vectors import TABLE  # noqa: E402


@pytest.mark.parametrize("eps,x,m,v", TABLE)
def test_mean_variance_table(eps, x, m, v):
  assert clap.mean(x, eps, C) == pytest.approx(m, abs=5e-9)
  assert clap.mean_eq1(x, eps, C) == pytest.approx(m, abs=5e-9)
  assert clap.variance(x, eps, C) == pytest.approx(v, abs=5e-9)


@pytest.mark.parametrize("eps,x,_m,_v", TABLE)
def test_moments_match_quadrature(eps, x, _m, _v):
  f = lambda z: clap.density(z, x, eps, C)
  kw = dict(points=[x], epsabs=1e-14, epsrel=1e-12)
  total = integrate.quad(f, -C, C, **kw)[0]
  m1 = integrate.quad(lambda z: z * f(z), -C, C, **kw)[0]
  m2 = integrate.quad(lambda z: z * z * f(z), -C, C, **kw)[0]
  assert total == pytest.approx(1.0, abs=1e-10)
  assert clap.mean(x, eps, C) == pytest.approx(m1, abs=1e-11)
  assert clap.variance(x, eps, C) == pytest.approx(m2 - m1 * m1, abs=1e-11)


def test_density_zero_outside_range_and_scale():
  assert clap.density(np.array([-0.2, 0.1000001, 0.5]), 0.0, 1.0, C).max() == 0.0
  assert clap.scale(0.5, C) == pytest.approx(0.4)
  np.testing.assert_allclose(clap.scale(np.array([1.0, 2.0]), C), [0.2, 0.1])


def test_tiny_epsilon_is_stable():
  # λ = 2000: Eq. (1) literally loses ~8 digits; the stable form must not.
  m = clap.mean(0.1, 1e-4, C)
  # E ≈ x(3C² − x²)/(6Cλ) + O(λ^-2) for large λ (Taylor expansion of Eq. (1)).
  lam = 2 * C / 1e-4
  assert m == pytest.approx(0.1 * (3 * C**2 - 0.1**2) / (6 * C * lam), rel=1e-3)
  assert clap.variance(0.0, 1e-4, C) == pytest.approx((2 * C) ** 2 / 12, rel=1e-4)


@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 2.0, 5.0])
def test_ldp_ratio_equals_epsilon_on_grid(eps):
  grid = np.linspace(-C, C, 201)
  logp = np.log(clap.density(grid[None, :], grid[:, None], eps, C))  # [x, z]
  # max over x, x', z of log p(z|x) − log p(z|x').
  worst = (logp.max(axis=0) - logp.min(axis=0)).max()
  assert worst <= eps * (1 + 1e-12)
  assert worst == pytest.approx(eps, rel=1e-9)  # attained at x=∓C, z=±C (on grid)


@pytest.mark.parametrize("eps,x", [(0.05, 0.1), (1.0, -0.03), (5.0, 0.05), (20.0, -0.1)])
def test_sampler_moments(eps, x):
  # Seeded, so deterministic; with fresh seeds each check (|z-score| < 5)
  # would fail with probability ~6e-7.
  n = 200_000
  u = np.random.default_rng(1234).uniform(size=n)
  z = clap.sample(x, eps, C, u)
  assert z.min() >= -C and z.max() <= C
  m, v = clap.mean(x, eps, C), clap.variance(x, eps, C)
  assert abs(z.mean() - m) < 5 * np.sqrt(v / n)
  # Var of the sample variance ≈ (μ4 − σ⁴)/n ≤ (C⁴)/n for a variable in [−C, C].
  assert abs(z.var() - v) < 5 * C**2 / np.sqrt(n)


@pytest.mark.parametrize("eps,x", [(0.05, 0.1), (1.0, -0.03), (5.0, 0.05)])
def test_cdf_matches_quadrature(eps, x):
  for z in [-C, -0.07, x, 0.02, C]:
    q = integrate.quad(lambda t: clap.density(t, x, eps, C), -C, z,
                       points=[x] if -C < x < z else None, epsabs=1e-14)[0]
    assert clap.cdf(z, x, eps, C) == pytest.approx(q, abs=1e-12)
  assert clap.cdf(-1.0, x, eps, C) == 0.0 and clap.cdf(1.0, x, eps, C) == 1.0


def test_sampler_is_inverse_cdf_and_stays_in_range():
  x, eps = 0.04, 1.0
  u = np.array([0.0, 1e-12, 0.25, 0.5, 0.75, 1 - 1e-16, 1.0])
  z = clap.sample(x, eps, C, u)
  assert np.all((z >= -C) & (z <= C))
  assert z[0] == pytest.approx(-C, abs=1e-12) and z[-1] == pytest.approx(C, abs=1e-12)
  assert np.all(np.diff(z) >= 0)
  for ui, zi in zip(u[2:5], z[2:5]):
    cdf = integrate.quad(lambda t: clap.density(t, x, eps, C), -C, zi, points=[x])[0]
    assert cdf == pytest.approx(ui, abs=1e-10)
  with pytest.raises(ValueError, match="uniforms"):
    clap.sample(0.0, 1.0, C, [1.5])


def test_broadcasting_shapes():
  x = np.linspace(-C, C, 5)[:, None]
  eps = np.array([0.1, 1.0, 3.0])[None, :]
  assert clap.mean(x, eps, C).shape == (5, 3)
  assert clap.variance(x, eps, C).shape == (5, 3)
  assert clap.sample(x, eps, C, np.full((5, 3), 0.3)).shape == (5, 3)


def test_debias_round_trip():
  eps = [0.05, 0.5, 1.0]
  e = clap.averaged_mean(0.05, eps, C)
  assert e == pytest.approx(0.0056392044, abs=1e-10)
  u_grid, e_grid = clap.debias_grid(eps, C)
  assert u_grid.shape == (1001,) and u_grid[0] == -C and u_grid[-1] == C
  assert clap.invert_averaged_mean(e, u_grid, e_grid) == pytest.approx(0.05, abs=1e-9)
  us = np.linspace(-C, C, 37)
  back = clap.invert_averaged_mean(clap.averaged_mean(us, eps, C), u_grid, e_grid)
  np.testing.assert_allclose(back, us, atol=1e-6)  # linear interpolation error


def test_debias_clamps_instead_of_wrapping():
  # Defect D7: below Ē(−C) the reference code wrapped to +C.
  u_grid, e_grid = clap.debias_grid([0.05, 0.5, 1.0], C)
  out = clap.invert_averaged_mean([e_grid[0] - 0.01, e_grid[-1] + 0.01], u_grid, e_grid)
  np.testing.assert_array_equal(out, [-C, C])


def test_averaged_mean_groups_equal_budgets():
  eps = np.array([0.3, 0.3, 0.3, 2.0])
  u = np.array([-0.05, 0.02])
  expect = (3 * clap.mean(u, 0.3, C) + clap.mean(u, 2.0, C)) / 4
  np.testing.assert_allclose(clap.averaged_mean(u, eps, C), expect, rtol=1e-14)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_bad_epsilon(bad):
  with pytest.raises(ValueError, match="epsilon"):
    clap.mean(0.0, bad, C)


@pytest.mark.parametrize("bad", [0.0, -0.1, np.inf])
def test_bad_clip(bad):
  with pytest.raises(ValueError, match="clip"):
    clap.density(0.0, 0.0, 1.0, bad)
