"""binomial.cdf / pmf equal scipy.stats.binom's bit for bit, support edges included."""
import math

import numpy as np
import pytest
from scipy import stats

from tff_idp.accounting.shuffle import binomial


def _points(count=3000, seed=0):
  rng = np.random.default_rng(seed)
  for _ in range(count):
    n = int(rng.choice([0, 1, 2, 7, 150, 10_000, 99_999]))
    p = float(rng.choice([0.5, rng.uniform(), math.exp(-rng.uniform(0, 5)), 0.0, 1.0]))
    k = float(rng.choice([rng.integers(-3, n + 4), rng.uniform(-2, n + 2), n, 0, n - 1, -0.5]))
    yield k, n, p


@pytest.mark.parametrize("ours,theirs", [(binomial.cdf, stats.binom.cdf),
                                         (binomial.pmf, stats.binom.pmf)])
def test_equals_scipy_bit_for_bit(ours, theirs):
  """3,000 seeded points per function: integers and fractions inside and outside [0, n],
  p at 0, ½, 1 and in between. Catches a support edge off by one (k = n, k < 0, a
  fraction for the pmf), a missing floor, or another function underneath."""
  for k, n, p in _points():
    expected = float(theirs(k, n, p))
    got = ours(k, n, p)
    assert got == expected or (math.isnan(got) and math.isnan(expected)), (k, n, p)


def test_nan_in_nan_out():
  assert math.isnan(binomial.cdf(math.nan, 10, 0.5))
  assert math.isnan(binomial.pmf(math.nan, 10, 0.5))
