"""Server-side de-bias of the shuffled Clip-Laplace mean (APES Alg. 1 "Calibrate"; S-APES).

The analyzer sees the per-coordinate average m = (1/n) Σ_i z_i of the
shuffled reports and the shuffled budget multiset {ε_i}, but not which
budget belongs to which report. Following the paper (Sec. 3.2, Eq. (1)) it
treats every report as if its input were the average ū and solves

    G(û) = m,    G(u) = (1/n) Σ_i g_i(u),

for û ∈ [−C, C], where g_i is the expected report of a client with budget
ε_i and input u. G is increasing and odd, so it is inverted on a grid
(:func:`build_grid`, default 1001 points on [−C, C], computed in float64
and stored as float32) by ``tf.searchsorted`` and linear interpolation
(:func:`invert`). Means outside [G(−C), G(C)] (noise can put them there) are
clamped to ±C. That fixes two defects of the reference code (notes §2.8):
D7, whose binary search wrapped a mean below G(−C) to +C (a sign flip) and
snapped to grid points without interpolation, and D8, its float16 sums.

The expected report g_i depends on the mechanism:

* **APES** (``keep=None``): g_i(u) = E[CLap(u, 2C/ε_i, C)], Eq. (1)
  (:func:`tff_idp.apes.clip_laplace.expected_value`). Calibration vector:
  Ē(0.05) = 0.0056392044 for ε = {0.05, 0.5, 1.0}, C = 0.1 (notes §2.1).

* **S-APES** (``keep=b`` of ``dimension=d`` coordinates; Alg. 2 with the
  per-coordinate budget ε'_i = ε_i/b, see :mod:`tff_idp.apes.sparsify`). A
  client reports y_k ~ CLap(x_k, 2C/ε'_i) on its b kept coordinates and
  fresh CLap(0, 2C/ε'_i) noise (mean 0) on the others, so its expected
  report is E[y_k · 1{k kept}]. Two modes:

  - ``sparse_debias="rescale"``: g_i(u) = (b/d)·E[CLap(u, 2C/ε'_i, C)].
    **Exact** for the default random b-subset selection, whose keep event
    (probability b/d) is independent of the data. It is also what dividing
    the sum by n·b/d before the APES inversion does (the reference code's
    ``aggregate_p``, notes §2.4). For the paper's post-top-b selection it
    underestimates the kept values, which are larger in magnitude than
    average, and over-corrects by about 2-3×.
  - ``sparse_debias="threshold"`` (for post-top-b): coordinate k is kept iff
    |y_k| ≥ τ_i, with τ_i the (1 − b/d)-quantile of |CLap(0, 2C/ε'_i, C)|,
    the client's b-th largest |y| if its update carried no signal:
    τ = −λ·log1p((1 − b/d)·expm1(−C/λ)). Then
    g_i(u) = E[y·1{|y| ≥ τ_i}] = ∫_{τ_i ≤ |z| ≤ C} z p(z | u) dz, in closed
    form (:func:`thresholded_expected_value`). The top-b keep event depends
    on all d coordinates and has no closed form; this is exact at u = 0
    (odd symmetry) and as ε' → 0, where |y| is uniform whatever the input;
    for larger ε' a spread-out update moves the real threshold. Monte Carlo
    with spread-out updates (d = 800-1000, b/d = 0.2): G is within ~10% of
    the true expected report for ε' ≤ 2 and the de-biased values within
    ~15% at ε' = 1 (``tests/apes/test_debias.py`` checks it).

All functions are TensorFlow and run eagerly or inside a TFF computation
(the aggregator builds the grid in its ``initialize``).
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_idp.errors import ToolkitValueError
from tff_idp.apes import clip_laplace

__all__ = [
    "SPARSE_DEBIAS_MODES", "DebiasGrid", "check_keep", "sparse_threshold",
    "thresholded_expected_value", "averaged_expected_value", "build_grid", "invert",
]

SPARSE_DEBIAS_MODES = ("threshold", "rescale")
DEFAULT_GRID_POINTS = 1001
_CHUNK = 256  # budgets per step when averaging over a large multiset


def _f64(value) -> tf.Tensor:
  """float64 tensor; Python and NumPy numbers are converted without a float32 detour."""
  if isinstance(value, (tf.Tensor, tf.Variable)):
    return tf.cast(value, tf.float64)
  return tf.constant(np.asarray(value, np.float64))


class DebiasGrid(NamedTuple):
  """G sampled on ``u`` = linspace(−C, C, points): ``values[j]`` = G(u[j]), increasing."""
  u: tf.Tensor
  values: tf.Tensor


def check_keep(keep, dimension: int) -> int:
  """b must be an integer with 1 ≤ b ≤ d (S-APES keeps b of d coordinates)."""
  if isinstance(keep, bool) or int(keep) != keep:
    raise ToolkitValueError(f"keep={keep!r} must be an integer number of coordinates.")
  if not 1 <= int(keep) <= int(dimension):
    raise ToolkitValueError(
        f"keep={keep!r} must lie in [1, d={dimension}]: S-APES keeps the top b of the "
        "model's d coordinates.")
  return int(keep)


def sparse_threshold(epsilon, clip: float, keep_fraction) -> tf.Tensor:
  """τ: the (1 − b/d)-quantile of |CLap(0, 2C/ε, C)|, float64 (see module docstring).

  |CLap(0)| has CDF (1 − e^{−t/λ})/(1 − e^{−C/λ}) on [0, C].
  """
  c = clip_laplace.check_clip(clip)
  lam = 2.0 * c / _f64(epsilon)
  q = 1.0 - _f64(keep_fraction)
  return tf.clip_by_value(-lam * tf.math.log1p(q * tf.math.expm1(-c / lam)), 0.0, c)


def thresholded_expected_value(x, epsilon, clip: float, threshold) -> tf.Tensor:
  """E[z · 1{|z| ≥ τ}] for z ~ CLap(clip(x), 2C/ε, C), float64; broadcasts.

  With t = z − x, the integrals ∫ e^{−|t|/λ} dt and ∫ t e^{−|t|/λ} dt from 0
  to s are sign(s)·λ·P₁(|s|/λ) and λ²·P₂(|s|/λ) (P_k regularized incomplete
  gamma), so over {τ ≤ |z| ≤ C} = [τ, C] ∪ [−C, −τ] the mean of z·1{·} is
  (x·ΔK₀ + ΔK₁) / (λP₁((C−x)/λ) + λP₁((C+x)/λ)).
  """
  c = clip_laplace.check_clip(clip)
  x = tf.clip_by_value(_f64(x), -c, c)
  lam = 2.0 * c / _f64(epsilon)
  tau = _f64(threshold)
  two = tf.constant(2.0, tf.float64)

  def k0(s):   # ∫_0^s e^{−|t|/λ} dt / λ
    return tf.sign(s) * -tf.math.expm1(-tf.abs(s) / lam)

  def k1(s):   # ∫_0^s t e^{−|t|/λ} dt / λ²
    return tf.math.igamma(two, tf.abs(s) / lam)

  def window(lo, hi):   # ∫_lo^hi z e^{−|z−x|/λ} dz / λ, lo <= hi in z-space
    return x * (k0(hi - x) - k0(lo - x)) + lam * (k1(hi - x) - k1(lo - x))

  norm = -tf.math.expm1(-(c - x) / lam) - tf.math.expm1(-(c + x) / lam)
  return (window(tau, c + 0.0 * x) + window(-c + 0.0 * x, -tau)) / norm


def _budget_weights(epsilons) -> tuple[np.ndarray, np.ndarray]:
  """Distinct budgets and their multiplicities / n (the multiset as weights)."""
  eps = clip_laplace.check_epsilon(np.asarray(epsilons, np.float64).ravel(), "epsilons")
  values, counts = np.unique(eps, return_counts=True)
  return values, counts / eps.size


def averaged_expected_value(u, epsilons: Sequence[float], clip: float, *,
                            keep: Optional[int] = None, dimension: Optional[int] = None,
                            sparse_debias: str = "rescale") -> tf.Tensor:
  """G(u) = (1/n) Σ_i g_i(u) over the budget multiset (float64, any shape of ``u``).

  ``keep=None``: APES, g_i = Eq. (1) at ε_i. ``keep=b`` with
  ``dimension=d``: S-APES at ε_i/b with ``sparse_debias`` (module docstring).
  Equal budgets are grouped; the rest is summed in chunks of 256 budgets.
  """
  c = clip_laplace.check_clip(clip)
  values, weights = _budget_weights(epsilons)
  if keep is not None:
    if dimension is None:
      raise ToolkitValueError("S-APES de-bias needs the model dimension d with keep=b.")
    keep = check_keep(keep, dimension)
    if sparse_debias not in SPARSE_DEBIAS_MODES:
      raise ToolkitValueError(
          f"sparse_debias={sparse_debias!r} must be one of {SPARSE_DEBIAS_MODES}.")
    values = values / keep
  u = _f64(u)
  pad = (-len(values)) % _CHUNK
  eps = np.concatenate([values, np.ones(pad)]).reshape(-1, _CHUNK)
  wts = np.concatenate([weights, np.zeros(pad)]).reshape(-1, _CHUNK)
  flat_u = tf.reshape(u, [-1, 1])

  def one_chunk(total, chunk):
    e, w = chunk[0][None, :], chunk[1]
    if keep is None:
      g = clip_laplace.expected_value(flat_u, e, c)
    elif sparse_debias == "threshold":
      g = thresholded_expected_value(flat_u, e, c, sparse_threshold(e, c, keep / dimension))
    else:
      g = (keep / dimension) * clip_laplace.expected_value(flat_u, e, c)
    return total + tf.linalg.matvec(g, w)

  total = tf.foldl(one_chunk, (tf.constant(eps, tf.float64), tf.constant(wts, tf.float64)),
                   initializer=tf.zeros_like(flat_u[:, 0]))
  return tf.reshape(total, tf.shape(u))


def build_grid(epsilons: Sequence[float], clip: float, points: int = DEFAULT_GRID_POINTS, *,
               keep: Optional[int] = None, dimension: Optional[int] = None,
               sparse_debias: str = "rescale") -> DebiasGrid:
  """G on linspace(−C, C, points), float32 (see :func:`averaged_expected_value`)."""
  c = clip_laplace.check_clip(clip)
  if isinstance(points, bool) or int(points) != points or points < 2:
    raise ToolkitValueError(f"points={points!r} must be an integer >= 2.")
  u = tf.linspace(tf.constant(-c, tf.float64), tf.constant(c, tf.float64), int(points))
  g = averaged_expected_value(u, epsilons, c, keep=keep, dimension=dimension,
                              sparse_debias=sparse_debias)
  return DebiasGrid(tf.cast(u, tf.float32), tf.cast(g, tf.float32))


def invert(values, grid_u, grid_values) -> tf.Tensor:
  """û = G⁻¹(m) by linear interpolation on the grid, clamped to [u₀, u_last] = [−C, C].

  Args:
    values: the observed means m (any shape, float32).
    grid_u, grid_values: a :class:`DebiasGrid`'s fields (1-D, increasing).

  Means below G(−C) give −C and above G(C) give +C: never a sign flip.
  """
  m = tf.cast(values, tf.float32)
  shape = tf.shape(m)
  m = tf.reshape(m, [-1])
  gu = tf.cast(grid_u, tf.float32)
  gv = tf.cast(grid_values, tf.float32)
  last = tf.shape(gv)[0] - 1
  m = tf.clip_by_value(m, gv[0], gv[last])
  hi = tf.clip_by_value(tf.searchsorted(gv, m, side="right"), 1, last)
  lo = hi - 1
  v_lo, v_hi = tf.gather(gv, lo), tf.gather(gv, hi)
  u_lo, u_hi = tf.gather(gu, lo), tf.gather(gu, hi)
  w = tf.clip_by_value(tf.math.divide_no_nan(m - v_lo, v_hi - v_lo), 0.0, 1.0)
  return tf.reshape(u_lo + w * (u_hi - u_lo), shape)
