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


# Table 2 of the APES paper (notes §2.4): name -> (kind, parameters, clip range).
TABLE2 = {
    "Uniform1": ("uniform", (0.05, 0.5), None),
    "Uniform2": ("uniform", (0.05, 1.0), None),
    "Gauss1": ("normal", (0.1, 1.0), (0.05, 0.5)),
    "Gauss2": ("normal", (0.2, 1.0), (0.05, 1.0)),
    "MixGauss1": ("mix", (0.1, 0.5), (0.05, 0.5)),
    "MixGauss2": ("mix", (0.2, 1.0), (0.05, 1.0)),
}


@pytest.mark.parametrize("name", sorted(TABLE2))
@pytest.mark.parametrize("n", [1, 10, 1001])
def test_sample_epsilons_follow_table2(name, n):
  """Budgets are drawn from the paper's Table 2 in the documented order: U(lo, hi);
  clip(N(μ, 1)); 90% N(μ_major, 1) then 10% N(μ_minor, 1), clipped (a fresh generator with
  the same seed, driven here by hand, gives the same numbers).

  Catches: a wrong Table 2 parameter (mean, std, clip range, 90/10 weight) or draw order,
  which would change every budget the APES tables are reproduced from.
  """
  kind, params, rng_range = TABLE2[name]
  got = clap.sample_epsilons(name, n, np.random.default_rng(11))
  ref = np.random.default_rng(11)
  if kind == "uniform":
    want = ref.uniform(params[0], params[1], n)
  elif kind == "normal":
    want = np.clip(ref.normal(params[0], 1.0, n), *rng_range)
  else:
    major = int(round(0.9 * n))
    want = np.clip(np.concatenate([ref.normal(params[0], 1.0, major),
                                   ref.normal(params[1], 1.0, n - major)]), *rng_range)
  np.testing.assert_array_equal(got, want)
  assert got.shape == (n,)


def test_sample_epsilons_min_and_errors():
  """'min', 'min1', 'min2' put every user at 0.05 (LDP-min); unknown names and n < 1 or
  non-integer n are refused.

  Catches: a wrong LDP-min budget, a silently accepted unknown distribution.
  """
  rng = np.random.default_rng(0)
  for name in ("min", "min1", "min2"):
    got = clap.sample_epsilons(name, 4, rng)
    assert got.shape == (4,) and np.all(got == 0.05)
  assert clap.sample_epsilons("Uniform1", 3.0, rng).shape == (3,)
  with pytest.raises(ValueError, match="unknown"):
    clap.sample_epsilons("Uniform3", 10, rng)
  for bad in (0, 2.5, -1):
    with pytest.raises(ValueError, match="n="):
      clap.sample_epsilons("Uniform1", bad, rng)


def test_inputs_outside_the_range_are_clipped():
  """Every function clips x to [−C, C] first (the randomizer's input clipping), so x = 5C
  behaves as x = C and x = −5C as −C (Def. 4 assumes x ∈ [−C, C]; the ε-LDP proof needs it).

  Catches: a missing or one-sided input clip (the sensitivity, hence ε, would be unbounded).
  """
  z = np.linspace(-C, C, 9)
  for far, edge in ((5 * C, C), (-5 * C, -C)):
    np.testing.assert_array_equal(clap.density(z, far, 1.0, C), clap.density(z, edge, 1.0, C))
    np.testing.assert_array_equal(clap.cdf(z, far, 1.0, C), clap.cdf(z, edge, 1.0, C))
    assert clap.mean(far, 1.0, C) == clap.mean(edge, 1.0, C)
    assert clap.mean_eq1(far, 1.0, C) == clap.mean_eq1(edge, 1.0, C)
    assert clap.variance(far, 1.0, C) == clap.variance(edge, 1.0, C)
    u = np.array([0.1, 0.5, 0.9])
    np.testing.assert_array_equal(clap.sample(far, 1.0, C, u), clap.sample(edge, 1.0, C, u))
  # The density at x = C integrates to 1 and peaks at z = C.
  d = clap.density(z, C, 1.0, C)
  assert np.argmax(d) == z.size - 1


def test_cdf_ends_and_continuity():
  """The CDF is 0 at and below −C, 1 at and above C, continuous at z = x (both branches
  give the same value there), and equals the density's integral on each side of x.

  Catches: ``<`` for ``≤`` at the ends, the two branches swapped or mis-normalised.
  """
  x, eps = 0.03, 2.0
  assert clap.cdf(-C, x, eps, C) == 0.0 and clap.cdf(C, x, eps, C) == 1.0
  below = clap.cdf(np.nextafter(x, -1), x, eps, C)
  above = clap.cdf(np.nextafter(x, 1), x, eps, C)
  assert below == pytest.approx(above, abs=1e-12)
  q = integrate.quad(lambda t: clap.density(t, x, eps, C), -C, x, epsabs=1e-14)[0]
  assert clap.cdf(x, x, eps, C) == pytest.approx(q, abs=1e-12)
  for z in (-0.09, 0.08):
    q = integrate.quad(lambda t: clap.density(t, x, eps, C), -C, z, points=[x] if z > x else None,
                       epsabs=1e-14)[0]
    assert clap.cdf(z, x, eps, C) == pytest.approx(q, abs=1e-12)


def test_debias_grid_and_inverse_validation():
  """``debias_grid`` needs ≥ 2 integer points and a valid clip; the inverse needs two 1-D,
  equally long, strictly increasing grids; 2 points already give the end points.

  Catches: a grid check that refuses 2 points or accepts 1, a non-monotone grid accepted
  (the interpolation would silently return garbage).
  """
  u, e = clap.debias_grid([0.5, 1.0], C, points=2)
  assert u.tolist() == [-C, C] and e[0] < 0 < e[1]
  for bad in (1, 2.5, 0):
    with pytest.raises(ValueError, match="points"):
      clap.debias_grid([0.5], C, points=bad)
  with pytest.raises(ValueError, match="clip"):
    clap.debias_grid([0.5], 0.0)
  with pytest.raises(ValueError, match="empty"):
    clap.averaged_mean(0.0, [], C)
  with pytest.raises(ValueError, match="epsilon"):
    clap.averaged_mean(0.0, [0.5, -1.0], C)
  good = np.array([0.0, 1.0, 2.0])
  for ug, eg in ((good, good[:2]), (good[None, :], good[None, :]), (good[:1], good[:1])):
    with pytest.raises(ValueError, match="1-D"):
      clap.invert_averaged_mean(0.5, ug, eg)
  for eg in (np.array([0.0, 1.0, 1.0]), np.array([0.0, 2.0, 1.0])):
    with pytest.raises(ValueError, match="increasing"):
      clap.invert_averaged_mean(0.5, good, eg)
  assert clap.invert_averaged_mean(0.5, good, np.array([0.0, 1.0, 3.0])) == 0.5
  assert clap.invert_averaged_mean(2.0, good, np.array([0.0, 1.0, 3.0])) == 1.5


@pytest.mark.parametrize("eps", [0.05, 1.0, 20.0])
def test_sampler_ends_and_median(eps):
  """At u = 0 and u = 1 the inverse CDF lands on −C and +C for every input x (float
  rounding there can step outside, which the final clip absorbs), and at u = ½ the draw
  for x = 0 is the median 0 of the symmetric CLap(0).

  Catches: a one-sided output clip (reports outside [−C, C] break the ε-LDP range), the
  sign of the Laplace step divided instead of multiplied (0/0 at the median).
  """
  x = np.linspace(-C, C, 401)
  lo = clap.sample(x, eps, C, np.zeros_like(x))
  hi = clap.sample(x, eps, C, np.ones_like(x))
  assert np.all(lo >= -C) and np.all(hi <= C)
  np.testing.assert_allclose(lo, -C, atol=1e-12)
  np.testing.assert_allclose(hi, C, atol=1e-12)
  assert clap.sample(0.0, eps, C, 0.5) == pytest.approx(0.0, abs=1e-15)


def test_inverse_on_the_smallest_grid():
  """A 2-point grid is a valid (linear) inverse: Ē(±C) map back to ±C, the midpoint value
  to the interpolated u.

  Catches: a size check that refuses 2-point grids.
  """
  u, e = clap.debias_grid([0.5, 1.0], C, points=2)
  np.testing.assert_allclose(clap.invert_averaged_mean(e, u, e), [-C, C], rtol=1e-15)
  assert clap.invert_averaged_mean(e.mean(), u, e) == pytest.approx(0.0, abs=1e-15)


def test_averaged_mean_of_one_budget_is_its_mean():
  """A population of one budget averages to that budget's Eq. (1) mean (by hand here).

  Catches: a single budget refused as if empty.
  """
  x, eps = 0.05, 0.5
  lam = 2 * C / eps
  e1, e2 = np.exp((-C - x) / lam), np.exp((-C + x) / lam)
  eq1 = ((C + lam) * (e1 - e2) + 2 * x) / (2 - e1 - e2)
  assert clap.averaged_mean(x, [eps], C) == pytest.approx(eq1, rel=1e-12)
