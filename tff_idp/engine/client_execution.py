"""Where a round's clients train: the one rule every family's ``client_execution="auto"`` uses.

TF-free, so command lines check the setting before TensorFlow loads.

* ``"tff"``: every client as a TFF client computation on the TFF worker(s);
* ``"in_process"``: the clients' local training in the driver's process
  (:mod:`tff_idp.engine.in_process_round`), the aggregation and server update
  in TFF, unchanged;
* ``"vectorized"``: the whole cohort's local training as one computation
  per chunk of clients, in this process (issue 35; models of dense layers
  only: :mod:`tff_idp.idp_fedavg.vectorized`, :mod:`tff_idp.rpdp.vectorized`,
  :mod:`tff_idp.apes.vectorized`), the
  aggregation and server update in TFF, unchanged;
* ``"auto"``: TFF client computations when an audit adds canaries (TFF
  client work); otherwise vectorized where the family and model serve it;
  otherwise in process from ``IN_PROCESS_MIN_PARAMETERS`` trainable
  parameters up and TFF client computations for smaller models.
"""
from __future__ import annotations

import os
from typing import Optional

CLIENT_EXECUTIONS = ("tff", "in_process", "vectorized")
"""Where the clients train: TFF client computations, this process one client
at a time per model copy, or this process a whole cohort at once."""

# ``auto`` trains clients in process from this many trainable parameters up.
# Measured (issue 14, 2 cores): the paper's CNN (28,298 parameters) trains a
# round 1.3-1.6x faster in process; the main job's logistic regression
# (610 parameters, ~30 steps per client) was ~25% slower in process (0.24 vs
# 0.19 s per round), where per-step op dispatch, not arithmetic, dominates and
# TFF's worker runs all the cohort's small client computations at once. Issue
# 23 (client pipelines without tf.data's autotuner) measured the reverse over 3
# passes, in process 1.16x faster (benchmarks/bench_small_model_rounds.py); the
# threshold stays until a longer measurement (see docs/benchmarks.md).
IN_PROCESS_MIN_PARAMETERS = 10_000


def check_client_execution(value: str) -> str:
  """``value`` if it names a client execution; ValueError with the choices otherwise."""
  if value not in CLIENT_EXECUTIONS:
    raise ValueError(f"client_execution must be one of auto, {', '.join(CLIENT_EXECUTIONS)} "
                     f"(got {value!r}).")
  return value


def check_parallel_clients(value: int) -> int:
  """``parallel_clients`` as an int; ValueError unless a whole number >= 1."""
  if int(value) != value or value < 1:
    raise ValueError(f"parallel_clients must be a whole number >= 1 (got {value!r}); "
                     "leave it unset for the default (the core count, at most 4).")
  return int(value)


def resolve_client_execution(requested: str, num_parameters: Optional[int],
                             canaries: bool = False, vectorizable: bool = False) -> str:
  """``requested`` with ``auto`` resolved (module doc); ``num_parameters=None``: in process.

  ``vectorizable``: the family has a vectorized client update for this model.
  Measured (issue 35, 2 cores, ``benchmarks/bench_large_cohorts.py`` and
  ``bench_small_model_rounds.py``): for the logistic regression and the MLP
  the vectorized round was faster than both per-client executions at every
  cohort size measured (1.9-2.5x the TFF client computations at c = 10,
  2.1-3.4x at c = 100, 3.0x at c = 1,000; 1.46x the in-process round (idle) at the
  main job's setting; ``bench_rpdp_cohorts.py``: rPDP-FL's logistic regression
  2.4x the TFF client computations at c = 100 and 3.0x at c = 1,000, given
  array inputs; ``bench_apes_rounds.py``: an APES round of 1,000 users 8.6x),
  so ``auto`` takes it wherever it is served.
  """
  if requested != "auto":
    return check_client_execution(requested)
  if canaries:
    return "tff"
  if vectorizable:
    return "vectorized"
  if num_parameters is not None and num_parameters < IN_PROCESS_MIN_PARAMETERS:
    return "tff"
  return "in_process"


def default_parallel_clients() -> int:
  """Clients trained at once by default: the core count, at most 4.

  Measured on 2 cores (``benchmarks/bench_round_throughput.py``): 2 at once
  trained a 30-client round of the paper's CNN in ~0.75-0.9× the time of 1
  (one client alone keeps ~1.5 cores busy), 3 was no faster than 2. Above 2
  cores the cap is a guess, not a measurement.
  """
  return max(1, min(os.cpu_count() or 1, 4))
