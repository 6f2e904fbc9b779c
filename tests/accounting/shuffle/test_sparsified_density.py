"""The S-APES and APES local claims against the exact density of what a user releases.

Pure NumPy. For d ≤ 6, b ∈ {1, 2} and the worst input pairs (all 0, all +C,
all −C, alternating ±C, +C/0), the largest log density ratio of the release
on a grid (a lower bound on the true local ε) must never exceed the ε^{ul}
that the ledger charges. The grid holds ±C, 0 and reports of ±1e-3·C, where
the post-top-b ratio approaches its supremum.
"""
import math

import numpy as np
import pytest

from tff_idp.accounting.shuffle import ledger as L
from tff_idp.accounting.shuffle import sparsified_density as sd

C = 1.0
POINTS = (-1, -0.5, -0.1, -1e-3, 0, 1e-3, 0.1, 0.5, 1)
POINTS_D6 = (-1, -0.1, -1e-3, 0, 1e-3, 0.1, 1)  # 7^6 release vectors keep d = 6 quick


def _inputs(d):
  alternating = np.array([C, -C] * d)[:d]
  half = np.array([C, 0.0] * d)[:d]
  return [np.zeros(d), np.full(d, C), np.full(d, -C), alternating, half]


def _ledger_local_epsilon(d, eps_coord, b, selection):
  """The largest ε^{ul} the ledger charges a user with per-coordinate budget ε'."""
  led = L.ApesLedger([eps_coord, eps_coord], d, 1e-6, 1e-4, b=b, selection=selection,
                     include_pld=False)
  return led.round_account().epsilon_ul[1]


def _grid_max(d, eps_coord, b, selection):
  releases = sd.release_grid(d, C, POINTS if d < 6 else POINTS_D6)
  return sd.max_log_ratio(_inputs(d), releases, eps_coord, C, b, selection)


CASES = [(d, b, e) for d in range(2, 7) for b in (1, 2) if b < d for e in (1.0, 2.0)
         if e == 1.0 or d in (4, 6)]


@pytest.mark.parametrize("d, b, eps_coord", CASES)
def test_default_random_selection_ledger_covers_the_exact_density(d, b, eps_coord):
  worst = _grid_max(d, eps_coord, b, "random")
  charged = _ledger_local_epsilon(d, eps_coord, b, "random")
  assert charged == pytest.approx(b * eps_coord)
  assert worst <= charged + 1e-9
  assert worst >= 0.99 * charged  # and b·ε' is attained (x = ±C, r = ∓C): not loose


@pytest.mark.parametrize("d, b, eps_coord", CASES)
def test_post_top_b_ledger_covers_the_exact_density(d, b, eps_coord):
  worst = _grid_max(d, eps_coord, b, "top_b")
  charged = _ledger_local_epsilon(d, eps_coord, b, "top_b")
  assert charged == pytest.approx(d * eps_coord)
  assert worst <= charged + 1e-9


@pytest.mark.parametrize("d, eps_coord, published_true", [
    (4, 1.0, 1.084), (5, 1.0, 1.327), (6, 1.0, 1.545), (4, 2.0, 2.401), (6, 2.0, 3.435)])
def test_post_top_b_exceeds_the_published_b_eps(d, eps_coord, published_true):
  """The defect: with b = 1 the paper's ε^{ul} = b·ε' is exceeded (the issue's
  table, measured on a coarser grid, is a lower bound of ours), and the
  ratio approaches d·(ε'/2 + ln S(C)/S(0)) as the reports go to 0."""
  worst = _grid_max(d, eps_coord, 1, "top_b")
  assert worst > eps_coord
  assert worst >= published_true
  limit = sd.top_b_small_report_limit(d, eps_coord, C)
  assert worst == pytest.approx(limit, rel=0.01)
  published = L.ApesLedger([eps_coord, eps_coord], d, 1e-6, 1e-4, b=1, selection="top_b",
                           include_pld=False).round_account().epsilon_ul_published
  assert published[1] == pytest.approx(eps_coord)  # printed only as a claim
  assert published[1] < worst


@pytest.mark.parametrize("d, eps_coord", [(2, 1.0), (3, 2.0), (4, 0.5)])
def test_apes_ledger_covers_the_exact_density(d, eps_coord):
  releases = sd.release_grid(d, C, POINTS)
  worst = sd.max_log_ratio(_inputs(d), releases, eps_coord, C, None, "none")
  led = L.ApesLedger([eps_coord, eps_coord], d, 1e-6, 1e-4, include_pld=False)
  charged = led.round_account().epsilon_ul[1]
  assert worst <= charged + 1e-9
  assert worst == pytest.approx(charged)  # d·ε is attained at x = ±C, r = ∓C


def test_large_d_limit_shows_the_docs_sapes_gap():
  """The docs' S-APES setting (d = 610, b = 122, ε' = 0.0502, C = 0.1): the
  reports-to-0 limit of the post-top-b log ratio for b = 1 already is
  d·(ε'/2 + ln S(C)/S(0)); with b = 122 the issue measured ≥ 7.67 > b·ε'."""
  limit = sd.top_b_small_report_limit(610, 0.0502, 0.1)
  assert limit > 0.0502  # far above one coordinate's budget
  assert limit < 610 * 0.0502  # and below the sound d·ε'


def test_density_integrates_to_one():
  """A check of the formulas themselves: d = 2, midpoint rule on 400² cells."""
  m = 400
  centers = -C + (np.arange(m) + 0.5) * (2 * C / m)
  mesh = np.stack(np.meshgrid(centers, centers, indexing="ij"), -1).reshape(-1, 2)
  cell = (2 * C / m) ** 2
  for selection in ("none", "random", "top_b"):
    for x in ([0.3, -0.7], [C, C]):
      total = np.exp(sd.log_density(mesh, x, 1.5, C, 1, selection)).sum() * cell
      assert total == pytest.approx(1.0, abs=2e-3), selection


def test_errors():
  with pytest.raises(ValueError, match="selection"):
    sd.log_density(np.zeros((1, 2)), [0, 0], 1.0, C, 1, "post")
  with pytest.raises(ValueError, match="keep"):
    sd.log_density(np.zeros((1, 2)), [0, 0], 1.0, C, 3, "random")
  with pytest.raises(ValueError, match="coordinates"):
    sd.log_density(np.zeros((1, 3)), [0, 0], 1.0, C, 1, "random")
  with pytest.raises(ValueError, match="fractions of C"):
    sd.release_grid(2, C, [2.0])
  assert math.isfinite(sd.top_b_small_report_limit(3, 1.0, C))
