"""Privacy preference distributions: who asks for which ε (rPDP-FL §7, IDP-FedAvg §V).

Each distribution draws one budget per record with a NumPy ``Generator``;
:func:`assign_record_budgets` seeds one generator per client from
``(seed, client index)``, so a client's budgets do not change when other
clients are added, and the same seed gives the same budgets bit for bit.

* :class:`ThreeLevels`: ε ∈ {0.1, 1, 5} at 70/20/10% (rPDP-FL §7.2 default).
* :class:`BoundedMixGauss`: mixture of N(0.1, 0.01), N(1, 0.05), N(5, 0.5)
  (mean, std) at 0.7/0.2/0.1, each component truncated to [0.1, 10].
  Truncation redraws values outside the bounds from the same component (it
  does not clip them onto the bounds, which would pile a point mass on 0.1,
  and it keeps the component weights at 0.7/0.2/0.1).
* :class:`BoundedPareto`: Pareto(shape 1, scale 0.1) truncated to [0.1, 10],
  drawn exactly by inverting the truncated CDF.
* :class:`Groups`: fixed groups, e.g. the user-study splits of IDP-FedAvg
  (34-43-23 and 54-37-9 over ε 1-2-3).

The names above follow the paper's text (rPDP-FL §7.2 and its "default
setup" paragraph). The authors' code (github.com/JunxuLiu/rPDP-FL,
``myopacus/accountants/rpdp_utils.py`` with ``experiments/configs/*.yaml``
and the ``BoundedFunc`` of ``experiments/fedavg_rpdp.py``) draws differently;
its variants are offered under their own names (:data:`DISTRIBUTIONS`):

* ``bounded_mix_gauss_code``: :class:`BoundedMixGauss` with stds 0.05 / 0.1 /
  0.5 (the paper: 0.01 / 0.05 / 0.5), same means and weights, and values
  outside [0.1, 10] *clipped* onto the bounds (``out_of_bounds="clip"``):
  half of N(0.1, 0.05) lies below 0.1, so about 35% of all records get
  exactly ε = 0.1, a point mass the paper's redrawing variant does not have.
* ``bounded_pareto_code``: :class:`ClippedLomax`, numpy's ``pareto(4) + 0.1``
  (a Lomax / Pareto II with shape 4 and scale 1, shifted by 0.1) clipped to
  [0.1, 10]: mean ≈ 0.1 + 1/3, median 0.1 + 2^(1/4) - 1 ≈ 0.289, and a point
  mass of 10.9^-4 ≈ 7e-5 at 10. The paper's Pareto(shape 1, scale 0.1),
  truncated, has median 0.198 and a far heavier tail.

Data-dependent budgets (:data:`BY_CLASS`) are no distribution: every record
takes the budget of its class, as when the owners of some classes ask for
stronger protection (the setting of INO-SGD, whose more private groups get
worse accuracy). :func:`parse_class_budgets` reads a spec such as
``0-4:0.1,5-9:1``, :func:`class_record_budgets` assigns each record its
class's ε (same shape as :func:`assign_record_budgets`), and
:func:`class_groups` names each class's group ``eps=<ε>`` for per-group
utility metrics (``tff_idp.engine.group_metrics``).

:func:`expected_budget` and :func:`class_budget_cutoff` give the Dropout
baseline (rPDP-FL §7.2) its cutoff ε_mod from the *specification* alone (the
distribution's mean; the mean of the class budgets), never from the drawn or
data-assigned budgets, whose mean under :data:`BY_CLASS` is a function of the
class counts.

This module imports only NumPy.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Mapping, Optional, Sequence

import numpy as np

from tff_idp.accounting import validation


@dataclasses.dataclass(frozen=True)
class Groups:
  """ε = epsilons[k] with probability ratios[k] (categorical, per record)."""
  epsilons: Sequence[float]
  ratios: Sequence[float]

  def __post_init__(self):
    if len(self.epsilons) != len(self.ratios):
      raise ValueError(f"{len(self.ratios)} ratios for {len(self.epsilons)} budget levels "
                       f"{tuple(self.epsilons)}; give one ratio per level.")
    for e in self.epsilons:
      validation.check_epsilon(e)
    validation.check_ratios(self.ratios)

  def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
    k = rng.choice(len(self.epsilons), size=n, p=np.asarray(self.ratios) / np.sum(self.ratios))
    return np.asarray(self.epsilons, dtype=float)[k]


@dataclasses.dataclass(frozen=True)
class ThreeLevels(Groups):
  """rPDP-FL's ThreeLevels: strong / moderate / weak protection."""
  epsilons: Sequence[float] = (0.1, 1.0, 5.0)
  ratios: Sequence[float] = (0.7, 0.2, 0.1)


OUT_OF_BOUNDS = ("redraw", "clip")


@dataclasses.dataclass(frozen=True)
class BoundedMixGauss:
  """Mixture of Gaussians (means, stds, weights), bounded to [low, high] (rPDP-FL §7.2).

  The defaults are the paper's BoundedMixGauss. ``out_of_bounds`` says what
  happens to a draw outside [low, high]: ``"redraw"`` (default) truncates
  each component (the draw is redrawn from the record's component, no point
  mass on a bound); ``"clip"`` moves it onto the nearer bound, as the
  authors' code does (``bounded_mix_gauss_code``, module doc).
  """
  means: Sequence[float] = (0.1, 1.0, 5.0)
  stds: Sequence[float] = (0.01, 0.05, 0.5)
  weights: Sequence[float] = (0.7, 0.2, 0.1)
  low: float = 0.1
  high: float = 10.0
  out_of_bounds: str = "redraw"

  def __post_init__(self):
    if self.out_of_bounds not in OUT_OF_BOUNDS:
      raise ValueError(f"out_of_bounds={self.out_of_bounds!r} must be one of "
                       f"{OUT_OF_BOUNDS}.")
    if not len(self.means) == len(self.stds) == len(self.weights):
      raise ValueError("BoundedMixGauss needs as many stds and weights as means.")
    validation.check_ratios(self.weights)
    if not 0 < self.low < self.high:
      raise ValueError(f"bounds [{self.low}, {self.high}] must satisfy 0 < low < high.")
    if any(s <= 0 for s in self.stds):
      raise ValueError("every std must be > 0.")

  def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
    # Each record keeps the component it drew and redraws only its value, so
    # the components keep their weights (redrawing the component as well would
    # shrink the 0.7 of N(0.1, 0.01), half of which lies below 0.1, to 0.54).
    k = rng.choice(len(self.means), size=n, p=np.asarray(self.weights))
    means, stds = np.asarray(self.means)[k], np.asarray(self.stds)[k]
    if self.out_of_bounds == "clip":
      return np.clip(rng.normal(means, stds), self.low, self.high)
    out = np.empty(n)
    todo = np.arange(n)
    for _ in range(1000):
      if todo.size == 0:
        return out
      draw = rng.normal(means[todo], stds[todo])
      ok = (draw >= self.low) & (draw <= self.high)
      out[todo[ok]] = draw[ok]
      todo = todo[~ok]
    raise ValueError("BoundedMixGauss: the bounds exclude almost all of a component's mass.")


@dataclasses.dataclass(frozen=True)
class BoundedPareto:
  """Pareto(shape) with scale ``low``, truncated to [low, high]."""
  shape: float = 1.0
  low: float = 0.1
  high: float = 10.0

  def __post_init__(self):
    if self.shape <= 0 or not 0 < self.low < self.high:
      raise ValueError("BoundedPareto needs shape > 0 and 0 < low < high.")

  def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
    # Inverse CDF of the truncated Pareto: F(x) = (1 - (L/x)^a) / (1 - (L/H)^a).
    u = rng.uniform(size=n)
    tail = 1.0 - (self.low / self.high) ** self.shape
    return self.low * (1.0 - u * tail) ** (-1.0 / self.shape)


@dataclasses.dataclass(frozen=True)
class ClippedLomax:
  """``rng.pareto(shape) + low``, clipped to [low, high]: the authors' code's BoundedPareto.

  numpy's ``pareto`` draws a Lomax (Pareto II) with scale 1, so before
  clipping P(ε > x) = (1 + x - low)^-shape for x >= low; the mean is
  low + 1/(shape - 1) (shape > 1) and the p-quantile low + (1 - p)^(-1/shape)
  - 1. Every draw is >= low already; those above ``high`` are clipped onto
  it (a point mass of (1 + high - low)^-shape). With the code's shape 4 and
  [0.1, 10] (``bounded_pareto_code``) this differs from the paper's
  :class:`BoundedPareto` (module doc).
  """
  shape: float = 4.0
  low: float = 0.1
  high: float = 10.0

  def __post_init__(self):
    if not self.shape > 0 or not 0 < self.low < self.high:
      raise ValueError(f"ClippedLomax needs shape > 0 and 0 < low < high; got shape="
                       f"{self.shape}, bounds [{self.low}, {self.high}].")

  def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.clip(rng.pareto(self.shape, size=n) + self.low, self.low, self.high)


DISTRIBUTIONS = {
    "three_levels": ThreeLevels,
    "bounded_mix_gauss": BoundedMixGauss,
    "bounded_pareto": BoundedPareto,
    # The authors' code's variants (module doc): other stds and clipping; Lomax(4) + 0.1.
    "bounded_mix_gauss_code": lambda: BoundedMixGauss(stds=(0.05, 0.1, 0.5), out_of_bounds="clip"),
    "bounded_pareto_code": ClippedLomax,
    "user_study_34_43_23": lambda: Groups((1.0, 2.0, 3.0), (0.34, 0.43, 0.23)),
    "user_study_54_37_9": lambda: Groups((1.0, 2.0, 3.0), (0.54, 0.37, 0.09)),
}


def make_distribution(name: str):
  """A distribution by name (see :data:`DISTRIBUTIONS`) with its defaults.

  The defaults are the paper's (rPDP-FL §7.2), except for the ``*_code``
  names, which take the authors' code's parameters (module doc).
  """
  if name not in DISTRIBUTIONS:
    raise ValueError(f"distribution={name!r} is unknown; choose one of {sorted(DISTRIBUTIONS)}.")
  return DISTRIBUTIONS[name]()


# Draws and seed of the Monte Carlo mean of a distribution without a closed
# form: fixed, so the cutoff is a function of the specification only.
_MEAN_DRAWS = 1 << 20
_MEAN_SEED = 20_250_601


def expected_budget(distribution) -> float:
  """E[ε] under a preference distribution: the Dropout cutoff ε_mod from the spec alone.

  :class:`Groups` (and :class:`ThreeLevels`): Σ_k ratio_k·ε_k exactly, over
  the finite levels (an ``inf`` level, "no constraint", is left out, as the
  Dropout baseline keeps such records anyway). Other distributions: the mean
  of 2^20 draws from a fixed seed (not the run's), so the value depends on the
  distribution's parameters only; its relative standard error is below 0.5%
  for every distribution here.
  """
  if isinstance(distribution, Groups):
    eps = np.asarray(distribution.epsilons, float)
    ratios = np.asarray(distribution.ratios, float)
    finite = np.isfinite(eps)
    if not finite.any():
      return math.inf
    return float(np.sum(eps[finite] * ratios[finite]) / np.sum(ratios[finite]))
  draws = np.asarray(distribution.sample(_MEAN_DRAWS, np.random.default_rng(_MEAN_SEED)))
  finite = draws[np.isfinite(draws)]
  return float(finite.mean()) if finite.size else math.inf


def class_budget_cutoff(class_budgets: Mapping[int, float]) -> float:
  """The Dropout cutoff ε_mod for budgets by class: the mean of the finite class budgets.

  Each class counts once, whatever its number of records: the spec
  (``--class_budgets``) fixes the value, and no statistic of the data enters
  it (the record-weighted mean would release the class counts).
  """
  eps = np.asarray([float(e) for e in class_budgets.values()], float)
  finite = eps[np.isfinite(eps)]
  return float(finite.mean()) if finite.size else math.inf


def per_seed_budget_seed(budget_seed: int, seed: int) -> int:
  """The budget draw of run seed ``seed`` under ``fresh_budgets_per_seed``.

  ``SeedSequence([budget_seed, seed])``: every (budget seed, run seed) pair
  draws independently, and the same pair draws the same budgets again.
  """
  return int(np.random.SeedSequence([int(budget_seed), int(seed)]).generate_state(1)[0])


def assign_record_budgets(distribution, client_sizes: Mapping[str, int] | Sequence[int],
                          seed: int) -> dict:
  """ε_ij for every record j of every client i, seeded per client.

  Args:
    distribution: anything with ``sample(n, rng)``.
    client_sizes: ``{client_id: N_i}`` or a list of N_i (ids "0", "1", ...).
    seed: the same seed gives the same budgets, bit for bit.
  """
  if not isinstance(client_sizes, Mapping):
    client_sizes = {str(i): n for i, n in enumerate(client_sizes)}
  out = {}
  for index, (cid, n) in enumerate(client_sizes.items()):
    rng = np.random.default_rng([int(seed), index])
    out[cid] = distribution.sample(int(n), rng)
  return out


# Budgets that follow the data (one ε per class): not in DISTRIBUTIONS, since
# they are assigned from the labels rather than sampled.
BY_CLASS = "by_class"

_CLASS_ITEM = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?:\s*(\S+)\s*$")


def parse_class_budgets(spec: str | Sequence[str],
                        num_classes: Optional[int]) -> dict[int, float]:
  """``{class: ε}`` from a spec such as ``"0-4:0.1,5-9:1"`` (rPDP-FL, budgets by class).

  Each item is ``<class>:<ε>`` or ``<first>-<last>:<ε>`` (an inclusive range
  of classes). Every class 0 .. ``num_classes`` - 1 must get exactly one ε,
  and every ε must be > 0 (``inf``: no privacy constraint).

  Args:
    spec: the comma-separated string, or its items (as absl's list flags give).
    num_classes: the number of classes of the dataset; None checks what needs no data
      (the syntax, every ε, no overlap) before the data is loaded (issue 50).

  Raises:
    ValueError: saying what to change (syntax, class out of range, overlap,
      missing classes, ε not > 0).
  """
  if num_classes is not None and num_classes < 1:
    raise ValueError(f"num_classes={num_classes} must be >= 1.")
  items = spec.split(",") if isinstance(spec, str) else list(spec)
  items = [item for item in (str(i).strip() for i in items) if item]
  def span(first: int, last: int) -> str:
    return f"{first}" if first == last else f"{first}-{last}"

  half = (num_classes or 10) // 2
  example = (f"e.g. {span(0, half - 1)}:0.1,{span(half, (num_classes or 10) - 1)}:1"
             if (num_classes or 10) > 1 else "e.g. 0:1")
  if not items:
    raise ValueError(f"class budgets are empty; give one ε per class, {example}.")
  out: dict[int, float] = {}
  for item in items:
    match = _CLASS_ITEM.match(item)
    if match is None:
      raise ValueError(f"class budget {item!r} is not <class>:<ε> or <first>-<last>:<ε> "
                       f"({example}).")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    if first > last:
      raise ValueError(f"class budget {item!r}: the range {first}-{last} is empty; write "
                       f"it as {last}-{first}.")
    if num_classes is not None and last >= num_classes:
      raise ValueError(f"class budget {item!r}: class {last} does not exist; the dataset's "
                       f"classes are 0-{num_classes - 1}.")
    try:
      epsilon = float(match.group(3))
    except ValueError:
      raise ValueError(f"class budget {item!r}: ε={match.group(3)!r} is not a number.") \
          from None
    if math.isnan(epsilon) or epsilon <= 0:
      raise ValueError(f"class budget {item!r}: ε={epsilon!r} must be > 0 (use inf for "
                       "classes without a privacy constraint).")
    twice = [c for c in range(first, last + 1) if c in out]
    if twice:
      raise ValueError(f"class budget {item!r}: {_classes(twice)} already got a budget; "
                       "give every class exactly one ε (remove the overlap).")
    out.update({c: epsilon for c in range(first, last + 1)})
  missing = [c for c in range(num_classes or 0) if c not in out]
  if missing:
    raise ValueError(f"{_classes(missing)} got no budget; give every class "
                     f"0-{num_classes - 1} an ε ({example}).")
  return dict(sorted(out.items()))


def _classes(classes: Sequence[int]) -> str:
  """``[0, 1, 2, 5]`` -> ``"classes 0-2,5"``; ``[4]`` -> ``"class 4"``."""
  parts, run = [], []
  for c in sorted(classes):
    if run and c != run[-1] + 1:
      parts.append(run)
      run = []
    run.append(c)
  parts.append(run)
  text = ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in parts if r)
  return f"class {text}" if len(classes) == 1 else f"classes {text}"


def class_record_budgets(labels_by_client: Mapping[str, np.ndarray],
                         class_budgets: Mapping[int, float]) -> dict[str, np.ndarray]:
  """ε_ij = the budget of record j's label, for every client i (data-dependent budgets).

  Returns the same shape as :func:`assign_record_budgets`: ``{client_id:
  float64 array with one ε per record}``, in the clients' order.

  Raises:
    ValueError: when a label has no budget (naming the client and labels).
  """
  lookup = {int(c): float(e) for c, e in class_budgets.items()}
  out = {}
  for cid, labels in labels_by_client.items():
    labels = np.asarray(labels).reshape(-1)
    present = np.unique(labels).tolist()
    missing = [c for c in present if int(c) not in lookup]
    if missing:
      raise ValueError(f"client {cid!r} has records of classes {missing} without a "
                       "budget; give every class an ε.")
    table = np.full(max([0] + [int(c) + 1 for c in present]), np.nan)
    for c in present:
      table[int(c)] = lookup[int(c)]
    out[cid] = table[labels.astype(np.int64)] if labels.size else np.zeros(0)
  return out


def budget_group_name(epsilon: float) -> str:
  """The name of the group of records with budget ε: ``eps=<ε:g>``, e.g. ``eps=0.1``."""
  return f"eps={float(epsilon):g}"


def class_groups(class_budgets: Mapping[int, float]) -> dict[int, str]:
  """``{class: "eps=<ε>"}``: classes with equal ε form one group.

  Ordered by (ε, class), so the groups appear from the most private one up
  (``group_metrics.group_report`` keeps the order of first appearance).

  Raises:
    ValueError: when two different ε would get the same name.
  """
  order = sorted(class_budgets.items(), key=lambda t: (float(t[1]), int(t[0])))
  names: dict[str, float] = {}
  for _, epsilon in order:
    name = budget_group_name(epsilon)
    if names.setdefault(name, float(epsilon)) != float(epsilon):
      raise ValueError(f"budgets {names[name]!r} and {float(epsilon)!r} would both be "
                       f"reported as group {name!r}; make them differ in their first six "
                       "significant digits.")
  return {int(c): budget_group_name(e) for c, e in order}
