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

This module imports only NumPy.
"""
from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from tff_idp.accounting import validation


@dataclasses.dataclass(frozen=True)
class Groups:
  """ε = epsilons[k] with probability ratios[k] (categorical, per record)."""
  epsilons: Sequence[float]
  ratios: Sequence[float]

  def __post_init__(self):
    if len(self.epsilons) != len(self.ratios):
      raise ValueError("Groups needs one ratio per ε.")
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


@dataclasses.dataclass(frozen=True)
class BoundedMixGauss:
  """Mixture of Gaussians (means, stds, weights), truncated to [low, high]."""
  means: Sequence[float] = (0.1, 1.0, 5.0)
  stds: Sequence[float] = (0.01, 0.05, 0.5)
  weights: Sequence[float] = (0.7, 0.2, 0.1)
  low: float = 0.1
  high: float = 10.0

  def __post_init__(self):
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


DISTRIBUTIONS = {
    "three_levels": ThreeLevels,
    "bounded_mix_gauss": BoundedMixGauss,
    "bounded_pareto": BoundedPareto,
    "user_study_34_43_23": lambda: Groups((1.0, 2.0, 3.0), (0.34, 0.43, 0.23)),
    "user_study_54_37_9": lambda: Groups((1.0, 2.0, 3.0), (0.54, 0.37, 0.09)),
}


def make_distribution(name: str):
  """A distribution by name (see :data:`DISTRIBUTIONS`), with its paper defaults."""
  if name not in DISTRIBUTIONS:
    raise ValueError(f"distribution={name!r} is unknown; choose one of {sorted(DISTRIBUTIONS)}.")
  return DISTRIBUTIONS[name]()


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
