"""Who trains this round: privacy-group assignment and individualized Poisson sampling.

IDP-FedAvg Alg. 2 samples every client i independently each round with its
own rate q_i (from Alg. 1), so the cohort size varies round to round with
mean Σ_i q_i. This module is pure numpy (no TensorFlow), seeded, and its RNG
state can be saved and restored for exact resumption.
"""
from __future__ import annotations

import copy
from typing import Optional, Sequence

import numpy as np

from tff_idp.accounting import validation


def assign_privacy_groups(num_clients: int, ratios: Sequence[float],
                          seed: int) -> np.ndarray:
  """Seeded assignment of clients to privacy groups with exact group sizes.

  Group p receives ``group_sizes_from_ratios(ratios, N)[p]`` clients, chosen
  uniformly at random. Returns the group index of every client.
  """
  sizes = validation.group_sizes_from_ratios(ratios, num_clients)
  groups = np.repeat(np.arange(len(sizes)), sizes)
  rng = np.random.default_rng(np.random.SeedSequence([seed, 0x9E3779B9]))
  return rng.permutation(groups)


class PoissonClientSampler:
  """Samples each client independently with its own probability (Alg. 2).

  Args:
    client_ids: the population.
    rates: per-client sampling probability q_i in [0, 1].
    seed: RNG seed; the same seed gives the same sequence of cohorts. The
      cohorts are part of the privacy randomness, so the seed must be secret
      (e.g. ``PrivacyRandomness.sampling_seed()``); None (the default) seeds
      from OS entropy. The RNG state is checkpointed for exact resume.
  """

  def __init__(self, client_ids: Sequence[str], rates: Sequence[float],
               seed: Optional[int] = None):
    self.client_ids = np.asarray(list(client_ids))
    self.rates = np.asarray(rates, dtype=np.float64)
    if self.rates.shape != self.client_ids.shape:
      raise ValueError(
          f"got {self.rates.size} rates for {self.client_ids.size} clients; "
          "give exactly one sampling rate per client.")
    if np.any(~np.isfinite(self.rates)) or np.any(self.rates < 0) or np.any(self.rates > 1):
      raise ValueError("sampling rates must lie in [0, 1].")
    self._rng = np.random.Generator(np.random.PCG64(seed))

  @classmethod
  def from_groups(cls, client_ids: Sequence[str], groups: Sequence[int],
                  group_rates: Sequence[float], seed: Optional[int] = None
                  ) -> "PoissonClientSampler":
    rates = np.asarray(group_rates, dtype=np.float64)[np.asarray(groups)]
    return cls(client_ids, rates, seed)

  @classmethod
  def uniform(cls, client_ids: Sequence[str], clients_per_round: float,
              seed: Optional[int] = None) -> "PoissonClientSampler":
    validation.check_cohort(clients_per_round, len(client_ids))
    return cls(client_ids, np.full(len(client_ids), clients_per_round / len(client_ids)),
               seed)

  @property
  def expected_clients_per_round(self) -> float:
    return float(self.rates.sum())

  def sample_mask(self) -> np.ndarray:
    """One round: a boolean mask of the clients that participate."""
    return self._rng.random(self.rates.size) < self.rates

  def sample(self) -> list[str]:
    """One round: the ids of the participating clients (possibly empty)."""
    return self.client_ids[self.sample_mask()].tolist()

  def get_state(self) -> dict:
    """JSON-serialisable RNG state."""
    return copy.deepcopy(self._rng.bit_generator.state)

  def set_state(self, state: dict) -> None:
    self._rng.bit_generator.state = copy.deepcopy(state)
