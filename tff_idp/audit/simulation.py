"""The canary audit against a NumPy model of DP-FedAvg's released sum (no TensorFlow).

A fast stand-in for a training run, used to test the estimator's validity
and power over many seeds and to plan an audit (how many canaries, rounds,
clients per round make the estimate informative) before spending a TFF run.

Model of the final model delta, in TFF's update convention, with C = 1 and a
server learning rate of 1 (IDP-FedAvg Alg. 2 with the DP mean of
``tff_idp.idp_fedavg.aggregators``):

    U = Σ_t (  n_t · g                      real clients: n_t ~ Σ_i Bernoulli(q_i),
                                            each clipped to norm 1 along a common
                                            unit drift g (their signal adds up)
             + Σ_{j inserted, sampled at t} s_j u_j     canaries, clipped to s_j
             + N(0, z_Δ² I_d) ) / c

Held-out canaries never enter. This is the Gaussian mechanism with Poisson
sampling that the ledger accounts (per round, a client moves the sum by at
most s_j in L2 against noise z_Δ); real training only adds a drift that is
not isotropic, which the cosine test sees as extra variance along u_j of
about ‖Σ_t n_t g / c‖² / d. The adaptive clip's count bit is not modelled: it
does not enter the model, so the final-model attack cannot see it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class SimulatedCosines:
  """Cosines of one simulated run: the held-out ones and the inserted ones per group."""
  held_out: np.ndarray                   # [k_held_out]
  inserted: tuple[np.ndarray, ...]       # one array per group
  held_out_groups: np.ndarray            # group of each held-out canary


def simulate_canary_cosines(group_rates: Sequence[float], group_sizes: Sequence[int],
                            value_noise_multiplier: float, rounds: int,
                            canaries_per_group: int, dim: int, *,
                            expected_clients_per_round: Optional[float] = None,
                            clip_scales: Optional[Sequence[float]] = None,
                            canary_rates: Optional[Sequence[float]] = None,
                            seed: int = 0) -> SimulatedCosines:
  """One simulated run of the client-level canary audit.

  Args:
    group_rates: q_p of the real clients of each group (the calibration's).
    group_sizes: real clients per group.
    value_noise_multiplier: z_Δ, the noise std on the clipped sum (C = 1).
    rounds: T.
    canaries_per_group: k_p; half are inserted, half held out.
    dim: model dimension d.
    expected_clients_per_round: the normaliser c (default Σ_p |G_p| q_p).
    clip_scales: s_p per group (SCALE; default 1).
    canary_rates: the rate each group's inserted canaries are *actually*
      sampled with (default ``group_rates``): a broken control multiplies one.
    seed: of everything random here.
  """
  rng = np.random.default_rng(seed)
  rates = np.asarray(group_rates, np.float64)
  sizes = np.asarray(group_sizes, np.int64)
  scales = np.ones_like(rates) if clip_scales is None else np.asarray(clip_scales, np.float64)
  actual = rates if canary_rates is None else np.asarray(canary_rates, np.float64)
  c = float(np.dot(rates, sizes)) if expected_clients_per_round is None else float(
      expected_clients_per_round)
  if canaries_per_group < 2 or canaries_per_group % 2:
    raise ValueError(f"canaries_per_group={canaries_per_group} must be even and >= 2.")
  half = canaries_per_group // 2
  groups = len(rates)
  inserted_dirs = rng.standard_normal((groups, half, dim))
  inserted_dirs /= np.linalg.norm(inserted_dirs, axis=-1, keepdims=True)
  held_dirs = rng.standard_normal((groups * half, dim))
  held_dirs /= np.linalg.norm(held_dirs, axis=-1, keepdims=True)
  drift = rng.standard_normal(dim)
  drift /= np.linalg.norm(drift)
  total = np.zeros(dim)
  for _ in range(rounds):
    real = float(np.dot(scales, rng.binomial(sizes, rates)))
    total += real * drift
    for p in range(groups):
      sampled = rng.random(half) < actual[p]
      if sampled.any():
        total += scales[p] * inserted_dirs[p][sampled].sum(axis=0)
    total += value_noise_multiplier * rng.standard_normal(dim)
  total /= c
  norm = np.linalg.norm(total)
  inserted = tuple(inserted_dirs[p] @ total / norm for p in range(groups))
  return SimulatedCosines(held_out=held_dirs @ total / norm, inserted=inserted,
                          held_out_groups=np.repeat(np.arange(groups), half))
