"""Input checks shared by every calibration entry point.

Each check raises :class:`ValueError` with a message that names the offending
argument and says what to change, so users never get a silent clip or a hang.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

# Ratios and group sizes may carry rounding error from CLI strings like 0.34.
RATIO_SUM_TOLERANCE = 1e-6


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
  """ε must be > 0; ``math.inf`` is allowed and means "no privacy constraint"."""
  epsilon = float(epsilon)
  if math.isnan(epsilon) or epsilon <= 0:
    raise ValueError(
        f"{name}={epsilon!r} is not a valid privacy budget: it must be > 0 "
        "(use inf for a non-private opt-out group).")
  return epsilon


def check_delta(delta: float) -> float:
  delta = float(delta)
  if not 0.0 < delta < 1.0 or math.isnan(delta):
    raise ValueError(
        f"delta={delta!r} must lie strictly between 0 and 1; a common choice "
        "is below 1/N (e.g. 1e-5 for N around 10^4).")
  return delta


def check_rounds(rounds: int) -> int:
  if int(rounds) != rounds or rounds < 1:
    raise ValueError(f"rounds={rounds!r} must be a positive integer.")
  return int(rounds)


def check_sampling_rate(q: float, name: str = "q") -> float:
  q = float(q)
  if not 0.0 < q <= 1.0 or math.isnan(q):
    raise ValueError(f"{name}={q!r} must lie in (0, 1].")
  return q


def check_noise_multiplier(sigma: float) -> float:
  sigma = float(sigma)
  if not sigma > 0 or math.isinf(sigma):
    raise ValueError(
        f"noise_multiplier={sigma!r} must be a finite number > 0.")
  return sigma


def check_ratios(ratios: Sequence[float]) -> np.ndarray:
  """Group ratios must be non-negative and sum to 1."""
  r = np.asarray(ratios, dtype=float)
  if r.ndim != 1 or r.size == 0:
    raise ValueError("ratios must be a non-empty list, e.g. 0.34,0.43,0.23.")
  if np.any(r < 0) or np.any(~np.isfinite(r)):
    raise ValueError(f"ratios={list(r)} must all be finite and >= 0.")
  if abs(r.sum() - 1.0) > RATIO_SUM_TOLERANCE:
    raise ValueError(
        f"ratios={list(r)} sum to {r.sum():.6g}, not 1; rescale them so they "
        "sum to 1 (e.g. 0.34,0.43,0.23).")
  return r


def check_cohort(clients_per_round: float, num_clients: int) -> None:
  if int(num_clients) != num_clients or num_clients < 1:
    raise ValueError(f"num_clients={num_clients!r} must be a positive integer.")
  if not clients_per_round > 0:
    raise ValueError(
        f"clients_per_round={clients_per_round!r} must be > 0.")
  if clients_per_round > num_clients:
    raise ValueError(
        f"clients_per_round={clients_per_round} exceeds num_clients="
        f"{num_clients}; lower clients_per_round to at most {num_clients}.")


def group_sizes_from_ratios(ratios: Sequence[float], num_clients: int) -> np.ndarray:
  """Splits ``num_clients`` into integer group sizes by largest remainder.

  The sizes sum to exactly ``num_clients`` and differ from ``ratio * N`` by
  less than one client each.
  """
  r = check_ratios(ratios)
  exact = r * num_clients
  sizes = np.floor(exact).astype(np.int64)
  remainder = int(num_clients - sizes.sum())
  order = np.argsort(-(exact - sizes), kind="stable")
  sizes[order[:remainder]] += 1
  return sizes
