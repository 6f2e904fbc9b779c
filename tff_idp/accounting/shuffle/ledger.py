"""Privacy ledger for APES / S-APES rounds (shuffled personalized Clip-Laplace).

One round: every user i sends d Clip-Laplace coordinates at budget ε_i; each
coordinate is shuffled on its own. S-APES (``b`` given) randomizes b of them
with the user's ε_i and pads the rest with CLap(0) noise, by one of two
``selection`` rules (:mod:`tff_idp.apes.sparsify`):

* ``"random"`` (default): a data-independent b-subset. Sound at b·ε_i
  locally; given every user's subset (data-independent, so conditioning on
  it costs nothing: joint convexity of the hockey-stick divergence) only
  the user's b kept coordinates depend on its data, so the user level
  composes the per-coordinate (ε^c, δ^c) over **b** coordinates;
* ``"top_b"`` (the paper's post-top-b): the kept set depends on all d
  perturbed values, so the release is only d·ε_i-LDP (post-processing of d
  draws; the exact density exceeds b·ε_i, see ``sparsified_density``) and
  no shuffle amplification is certified: ε^c is the local ε_max (δ^c = 0)
  and the user level composes d pure coordinates. The paper's b·ε_i, its
  per-coordinate ε^c and Prop. 1 stay available as *claims*
  (``epsilon_ul_published``, ``epsilon_c_claimed``, ``user_level_paper``),
  never as the guarantee.

The ledger reports

* ε^{ul}: the sound local user-level budget, k_local·ε_i with k_local = d
  (APES, S-APES top-b) or b (S-APES random);
* (ε^c, δ^c): the coordinate-level central guarantee of the chosen ``bound``:
  - ``"per_user"`` (default, sound; ``per_user`` module): exact clone
    reduction per budget group, δ^c = δ_s, population ε^c = max over groups;
  - ``"fmt22_max"`` (UniS as published): FMT22 at ε_max with the APES
    repository's numeric (10 halvings, blocks of 100). Sound for Clip-Laplace
    with A = C (every exact clone probability ≥ e^{−ε_max}, see ``per_user``);
    for n ≤ 100 the published loop is empty and the exact reduction is used;
  - ``"eon_paper"`` (EoN as published, unverified — ``per_user`` documents
    configurations where it under-states δ): the tables' numeric procedure.
  Both published bounds use the paper's δ^c = (e^{ε_max}−1)/(e^{ε_max}+1)·δ_s.
* user-level (ε^{uc}, δ_user) after one round and after t rounds: the k-fold
  (k = d for APES and S-APES top-b, b for S-APES random) and k·t-fold
  composition of (ε^c, δ^c) by optimal homogeneous composition
  (``composition.exact``), optionally dp_accounting's PLD, and the paper's
  advanced composition / Prop. 1 (2b compositions) for parity.

When the bound gives no gain over local ε_max (too few users; less than a
relative 1e-6), ``amplified`` is False, ``reason`` says why, and ε^c = ε_max with δ^c = 0 (plain LDP).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from tff_idp.accounting.shuffle import composition
from tff_idp.accounting.shuffle import eon
from tff_idp.accounting.shuffle import fmt22
from tff_idp.accounting.shuffle import per_user

__all__ = ["BOUNDS", "SELECTIONS", "ApesLedger", "RoundAccount", "CumulativeAccount"]

BOUNDS = ("per_user", "fmt22_max", "eon_paper")
LABELS = {
    "per_user": "per-user clone bound (exact Poisson-binomial reduction; sound)",
    "fmt22_max": "UniS as published: FMT22 at max ε (APES repository numeric)",
    "eon_paper": "EoN as published (unverified; see per_user for counterexamples)",
}
SELECTIONS = ("random", "top_b")
TOP_B_REASON = (
    "post-top-b (the paper's S-APES): the kept set depends on all d perturbed "
    "coordinates, so the release is only d·ε-LDP and no shuffle amplification is "
    "certified; ε^c is the local ε_max and the user level composes d coordinates.")
_APPLE_STEP = 100
# Below this relative gain over local ε_max we report "no amplification": any
# (ε, δ>0) bound dips a hair below ε_max just by trading δ, even for n = 1.
_GAIN = 1e-6


@dataclasses.dataclass(frozen=True)
class RoundAccount:
  """One round's coordinate-level and user-level numbers (see module doc)."""
  bound: str
  label: str
  n: int
  d: int
  b: Optional[int]
  k: int
  epsilon_min: float
  epsilon_max: float
  epsilon_ul: Tuple[float, float]
  epsilon_c: float
  delta_c: float
  amplified: bool
  reason: str
  user_level: composition.Composed
  user_level_paper: composition.Composed
  user_level_pld: Optional[composition.Composed]
  levels: Optional[List[Dict]]
  selection: Optional[str] = None
  # S-APES top-b only: what the paper claims (b·ε_i locally, the bound's
  # per-coordinate ε^c); not guarantees of that mechanism.
  epsilon_ul_published: Optional[Tuple[float, float]] = None
  epsilon_c_claimed: Optional[float] = None

  def to_dict(self) -> Dict:
    out = dataclasses.asdict(self)
    out["epsilon_ul"] = list(self.epsilon_ul)
    if self.epsilon_ul_published is not None:
      out["epsilon_ul_published"] = list(self.epsilon_ul_published)
    return out


@dataclasses.dataclass(frozen=True)
class CumulativeAccount:
  """User-level guarantee after ``rounds`` rounds (k·rounds compositions)."""
  rounds: int
  user_level: composition.Composed
  user_level_paper: composition.Composed
  user_level_pld: Optional[composition.Composed]

  def to_dict(self) -> Dict:
    return dataclasses.asdict(self)


def _check_settings(epsilons, d, delta_s, user_delta, b, clip, bound, selection):
  e = np.asarray(epsilons, dtype=np.float64).ravel()
  if e.size < 2:
    raise ValueError(f"need n >= 2 users for shuffling; got {e.size} budget(s).")
  if not np.all(np.isfinite(e)) or np.any(e <= 0):
    raise ValueError("every per-coordinate ε must be finite and > 0; drop or fix "
                     "users with ε <= 0, nan or inf (Clip-Laplace needs λ = 2C/ε).")
  if not (isinstance(d, (int, np.integer)) and d >= 1):
    raise ValueError(f"d={d!r} must be a positive integer (model dimension).")
  if b is not None and (int(b) != b or not 1 <= b <= d):
    raise ValueError(f"b={b!r} must be an integer in [1, d={d}] (S-APES keeps b "
                     "coordinates), or None for APES.")
  for name, val in (("delta_s", delta_s), ("user_delta", user_delta)):
    if not 0.0 < float(val) < 1.0:
      raise ValueError(f"{name}={val!r} must lie strictly between 0 and 1.")
  if not (math.isfinite(clip) and clip > 0):
    raise ValueError(f"clip={clip!r} must be finite and > 0 (the Clip-Laplace bound C).")
  if bound not in BOUNDS:
    raise ValueError(f"bound={bound!r}: choose one of {BOUNDS}.")
  if b is None and selection is not None:
    raise ValueError(f"selection={selection!r} is for S-APES (b given); APES has b=None.")
  if b is not None and selection not in SELECTIONS:
    raise ValueError(f"selection={selection!r}: choose one of {SELECTIONS} for S-APES.")
  return e


class ApesLedger:
  """Per-round and cumulative APES / S-APES accounting (module doc).

  ``clip`` (C) is validated but does not enter the accounting: Clip-Laplace's
  guarantees depend on ε only. ``selection`` (S-APES only; default
  ``"random"``) is the sparsification rule the reports were made with.
  ``paper_delta_prime`` fixes the paper's δ′ in the advanced composition (the
  Uniform2 column of Table 3 uses 1e-8); by default δ′ = user_delta − k·δ^c.
  """

  def __init__(self, epsilons, d: int, delta_s: float, user_delta: float,
               b: Optional[int] = None, bound: str = "per_user", clip: float = 0.1,
               max_levels: int = 32, paper_delta_prime: Optional[float] = None,
               include_pld: bool = True, selection: Optional[str] = None):
    if b is not None and selection is None:
      selection = "random"
    self.epsilons = _check_settings(epsilons, d, delta_s, user_delta, b, clip, bound,
                                    selection)
    self.d, self.b = int(d), None if b is None else int(b)
    self.selection = selection
    self.delta_s, self.user_delta = float(delta_s), float(user_delta)
    self.bound, self.clip, self.max_levels = bound, float(clip), int(max_levels)
    self.paper_delta_prime = paper_delta_prime
    self.include_pld = include_pld
    self._round: Optional[RoundAccount] = None
    self._claimed: Optional[Tuple[float, float]] = None
    self._population: Optional[per_user.PopulationBound] = None

  @property
  def n(self) -> int:
    return int(self.epsilons.size)

  @property
  def k(self) -> int:
    """Sound compositions per round: b (S-APES random), else d (APES, S-APES top-b)."""
    return self.b if self.selection == "random" else self.d

  def _central(self) -> Tuple[float, float, bool, str]:
    """(ε^c, δ^c, amplified, reason) of one shuffled coordinate, as the bound says."""
    e, n, ds = self.epsilons, self.n, self.delta_s
    em = float(e.max())
    if self.bound == "per_user":
      self._population = per_user.population_bound(e, ds, self.max_levels)
      eps_c = self._population.epsilon
      if eps_c >= em * (1 - _GAIN):
        return em, 0.0, False, (
            f"no amplification: with n={n} users the clone bound at δ_s={ds:g} does "
            f"not beat the local ε_max={em:g}; ε^c is the local ε.")
      return eps_c, ds, True, ""
    tanh = math.tanh(em / 2)
    if self.bound == "eon_paper":
      r = eon.bound(e, ds)
      if not r.amplified:
        return em, 0.0, False, (
            f"no amplification: EoN needs S >= 16 ln(4/δ_s) = {eon.threshold(ds):.1f} "
            f"but S = {r.s:.1f} (n={n}); ε^c is the local ε.")
      return r.epsilon_numeric, r.delta_c, True, ""
    note = ""
    if n <= _APPLE_STEP:
      eps_c = fmt22.numeric(n, em, ds)
      note = (f"n={n} <= {_APPLE_STEP}: the published blocked loop is empty (returns ~0); "
              "the exact FMT22 reduction is used instead.")
    else:
      eps_c = fmt22.numeric_apple(n, em, ds, num_iterations=10, step=_APPLE_STEP,
                                  fix_typo=False)
    if eps_c >= em * (1 - _GAIN):
      return em, 0.0, False, (f"no amplification: FMT22 at ε_max={em:g} with n={n} "
                              f"gives no gain at δ_s={ds:g}; ε^c is the local ε. " + note).strip()
    return eps_c, tanh * ds, True, note

  def _compose(self, eps_c: float, delta_c: float, rounds: int, pld: bool,
               claimed: Optional[Tuple[float, float]] = None):
    """(exact, paper's, PLD) user level after ``rounds``; ``claimed`` feeds the paper's column."""
    k = self.k * rounds
    exact = composition.exact(eps_c, delta_c, k, self.user_delta)
    paper_eps, paper_delta = claimed if claimed is not None else (eps_c, delta_c)
    if self.paper_delta_prime is not None:
      kw = dict(delta_prime=self.paper_delta_prime)
    else:
      kw = dict(delta_total=self.user_delta)
    if self.b is None:
      paper = composition.advanced(paper_eps, paper_delta, k, **kw)
    else:
      paper = composition.sapes_prop1(paper_eps, paper_delta, self.b * rounds, **kw)
    pld_r = None
    if pld:
      pld_r = composition.pld(eps_c, delta_c, self.k, self.user_delta, rounds=rounds)
    return exact, paper, pld_r

  def _sound_and_claimed(self):
    """((ε^c, δ^c, amplified, reason), claimed (ε^c, δ^c) or None)."""
    central = self._central()
    if self.selection != "top_b":
      return central, None
    em = float(self.epsilons.max())
    return (em, 0.0, False, TOP_B_REASON), central[:2]

  def round_account(self) -> RoundAccount:
    """The one-round account (cached)."""
    if self._round is None:
      e = self.epsilons
      (eps_c, delta_c, amplified, reason), claimed = self._sound_and_claimed()
      self._claimed = claimed
      exact, paper, pld_r = self._compose(eps_c, delta_c, 1, self.include_pld, claimed)
      k_local = self.b if self.selection == "random" else self.d
      levels = None
      if self._population is not None and claimed is None:
        levels = []
        for lv in self._population.to_dict()["levels"]:
          eps_g = lv["epsilon_c"]
          d_g = self.delta_s if eps_g < lv["epsilon_hi"] else 0.0
          lv = dict(lv, user_level_epsilon=composition.exact(
              eps_g, d_g, self.k, self.user_delta).epsilon)
          levels.append(lv)
      self._round = RoundAccount(
          bound=self.bound, label=LABELS[self.bound], n=self.n, d=self.d, b=self.b,
          k=self.k, epsilon_min=float(e.min()), epsilon_max=float(e.max()),
          epsilon_ul=(composition.local_composed(e.min(), k_local),
                      composition.local_composed(e.max(), k_local)),
          epsilon_c=float(eps_c), delta_c=float(delta_c), amplified=amplified,
          reason=reason, user_level=exact, user_level_paper=paper,
          user_level_pld=pld_r, levels=levels, selection=self.selection,
          epsilon_ul_published=(
              None if claimed is None else
              (composition.local_composed(e.min(), self.b),
               composition.local_composed(e.max(), self.b))),
          epsilon_c_claimed=None if claimed is None else float(claimed[0]))
    return self._round

  def cumulative(self, rounds: int, include_pld: bool = False) -> CumulativeAccount:
    """User-level guarantee after ``rounds`` identical rounds."""
    if int(rounds) != rounds or rounds < 1:
      raise ValueError(f"rounds={rounds!r} must be a positive integer.")
    r = self.round_account()
    exact, paper, pld_r = self._compose(r.epsilon_c, r.delta_c, int(rounds), include_pld,
                                        self._claimed)
    return CumulativeAccount(int(rounds), exact, paper, pld_r)

  def history(self, rounds: int) -> List[float]:
    """Cumulative user-level ε (exact composition) after 1..rounds rounds."""
    return [self.cumulative(t).user_level.epsilon for t in range(1, int(rounds) + 1)]

  def to_dict(self, rounds: Optional[int] = None) -> Dict:
    """JSON-ready settings, the round account and, with ``rounds``, the cumulative one."""
    out = {
        "settings": {"n": self.n, "d": self.d, "b": self.b, "selection": self.selection,
                     "delta_s": self.delta_s,
                     "user_delta": self.user_delta, "bound": self.bound,
                     "clip": self.clip, "paper_delta_prime": self.paper_delta_prime},
        "round": self.round_account().to_dict(),
    }
    if rounds is not None:
      out["cumulative"] = self.cumulative(rounds).to_dict()
    return out
