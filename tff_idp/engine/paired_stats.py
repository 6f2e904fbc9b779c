"""Paired comparisons of two runs over shared seeds (TF-free).

The IDP-FedAvg paper (Sec. VI, Table I) orders the privacy distributions by
accuracy: non-private > 0-0-100 > 34-43-23 > 54-37-9 > 100-0-0, and SAMPLE
above SCALE at the same distribution. Whether a measured table shows that
ordering *beyond seed noise* is a statistical question, answered here by a
paired t-test.

Runs are paired by training seed: the same seed gives the same model
initialisation, client data order and privacy-group assignment. The privacy
randomness (Gaussian noise, Poisson client sampling) is secret and fresh for
every run by design (``tff_idp.engine.privacy_randomness``), so a pair shares only
init and data order, and the paired differences still carry the noise and
sampling variance of both runs. With n seeds, the differences
d_s = acc_A(s) - acc_B(s) give

    mean d̄,  sd s_d,  t = d̄ / (s_d / √n)  with n - 1 degrees of freedom,
    95% CI  d̄ ± t_{0.975, n-1} · s_d / √n,
    one-sided p = P(T_{n-1} >= t)  for H0: E[d] <= 0 against H1: E[d] > 0.

The test assumes the differences are independent across seeds and roughly
normal; with few seeds (n = 3-5) it is a screen, not a proof.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

from scipy import stats

TEST_NAME = "paired t-test over seeds"


@dataclasses.dataclass(frozen=True)
class PairedComparison:
  """A − B over n paired seeds (accuracies as fractions, differences likewise).

  ``ci_low``/``ci_high``, ``sd`` and ``p_value`` are None when n < 2 (no
  variance estimate). ``p_value`` is one-sided, for H1: A > B.
  """
  a: str
  b: str
  n: int
  mean: float
  sd: Optional[float]
  ci_low: Optional[float]
  ci_high: Optional[float]
  p_value: Optional[float]
  confidence: float = 0.95

  @property
  def separated(self) -> bool:
    """True when the CI lies above 0 (equivalently, p < (1 - confidence) / 2)."""
    return self.ci_low is not None and self.ci_low > 0

  def to_dict(self) -> dict:
    return dict(dataclasses.asdict(self), test=TEST_NAME, separated=self.separated)

  @classmethod
  def from_dict(cls, d: dict) -> "PairedComparison":
    """Inverse of ``to_dict`` (extra keys such as ``test`` are ignored)."""
    return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})

  def format(self, scale: float = 100.0) -> str:
    """E.g. ``+5.21 [3.10, 7.32], p=0.002`` (in points for ``scale=100``)."""
    if self.n < 2:
      return f"{scale * self.mean:+.2f} (n=1: no CI)"
    p = self.p_value
    p_text = "p<0.001" if p < 0.001 else f"p={p:.3f}"
    return (f"{scale * self.mean:+.2f} [{scale * self.ci_low:+.2f}, "
            f"{scale * self.ci_high:+.2f}], {p_text}")


def paired_comparison(a_values: Sequence[float], b_values: Sequence[float],
                      a: str = "A", b: str = "B",
                      confidence: float = 0.95) -> PairedComparison:
  """Paired t-test of A − B (see the module docstring).

  Args:
    a_values, b_values: per-seed results of the two runs, in the same seed
      order (value i of both came from seed i).
    a, b: names for the report.
    confidence: two-sided level of the t-interval.

  Raises:
    ValueError: if the lengths differ, are 0, a value is not finite, or
      ``confidence`` is not in (0, 1).
  """
  if len(a_values) != len(b_values):
    raise ValueError(f"paired comparison {a} vs {b}: {len(a_values)} and "
                     f"{len(b_values)} values; pairs need one value per seed in each.")
  if not a_values:
    raise ValueError(f"paired comparison {a} vs {b}: no values (no seeds).")
  if not 0 < confidence < 1:
    raise ValueError(f"confidence={confidence} must lie in (0, 1).")
  diffs = [float(x) - float(y) for x, y in zip(a_values, b_values)]
  if not all(math.isfinite(d) for d in diffs):
    raise ValueError(f"paired comparison {a} vs {b}: non-finite values {diffs}.")
  n = len(diffs)
  mean = sum(diffs) / n
  if n < 2:
    return PairedComparison(a, b, n, mean, None, None, None, None, confidence)
  sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
  se = sd / math.sqrt(n)
  half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * se
  if se > 0:
    p = float(stats.t.sf(mean / se, n - 1))
  else:  # every pair differs by exactly the same amount
    p = 0.0 if mean > 0 else (0.5 if mean == 0 else 1.0)
  return PairedComparison(a, b, n, mean, sd, mean - half, mean + half, p, confidence)
