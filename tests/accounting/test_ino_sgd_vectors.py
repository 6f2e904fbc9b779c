"""INO-SGD's accounting is IDP-SGD's (Thm 3.3): the notes' vectors (§1.3) from our calibration.

Each value is recomputed with dp-accounting directly as well, so the test does
not rest on ``tff_idp.accounting`` alone.
"""
import pytest

from tff_idp.accounting.client import sample
from tests.independent_dp import dp_epsilon

T, DELTA = 1000, 1e-5


@pytest.mark.parametrize("epsilon,expected_q", [(0.6, 0.01892), (8.0, 0.19355)])
def test_sample_rates_at_noise_multiplier_4(epsilon, expected_q):
  """SAMPLE, C = 1, z = 4: the paper's (C.1.1) rates 0.019 and 0.19."""
  q = sample.get_sample_rate(epsilon, DELTA, 4.0, T)
  assert q == pytest.approx(expected_q, rel=1e-3)
  assert dp_epsilon(q, 4.0, T, DELTA) <= epsilon
  assert dp_epsilon(q * 1.002, 4.0, T, DELTA) > epsilon


@pytest.mark.parametrize("epsilon,expected_clip", [(0.5, 0.3278), (3.0, 1.5894)])
def test_scale_thresholds_at_q_005_and_noise_std_4(epsilon, expected_clip):
  """SCALE, q = 0.05, σ = 4 (absolute): C = σ / getNoise(ε). The paper's 3.29 is q = 0.02's."""
  z = sample.get_noise(epsilon, DELTA, 0.05, T)
  clip = 4.0 / z
  assert clip == pytest.approx(expected_clip, rel=1e-3)
  assert dp_epsilon(0.05, 4.0 / clip, T, DELTA) <= epsilon
