"""rPDP-FL's per-client training statistics and the round's training measurements.

Both client executions (TFF client work, :mod:`tff_idp.rpdp.client_work`, and
in-process, :mod:`tff_idp.rpdp.in_process`) return these sums per client;
the round sums them over the cohort and finalizes them once (Alg. 3 lines
9-17 report no per-client values).
"""
from __future__ import annotations

import collections
from typing import Any, Mapping

import tensorflow as tf
import tensorflow_federated as tff

STAT_KEYS = ("loss_sum", "sampled", "clipped", "expected_batch", "steps")
PARTICIPATING_KEY = "participating"


def client_stats(stats: Mapping[str, Any], weight: Any) -> collections.OrderedDict:
  """The sums :func:`tff_idp.rpdp.dp_sgd.build_local_dp_sgd` returns, plus the 0/1 update weight."""
  out = collections.OrderedDict((k, stats[k]) for k in STAT_KEYS)
  out[PARTICIPATING_KEY] = weight
  return out


def finalize(stats: Mapping[str, tf.Tensor]) -> collections.OrderedDict:
  """Summed statistics → ``train/{loss, sampled_records, clipped_fraction,
  mean_expected_batch, participating_clients}``."""
  sampled = stats["sampled"]
  return collections.OrderedDict(
      loss=tf.math.divide_no_nan(stats["loss_sum"], sampled),
      sampled_records=sampled,
      clipped_fraction=tf.math.divide_no_nan(stats["clipped"], sampled),
      mean_expected_batch=tf.math.divide_no_nan(stats["expected_batch"], stats["steps"]),
      participating_clients=stats[PARTICIPATING_KEY])


def build_finalize_at_server(stats_type: tff.types.Type) -> tff.Computation:
  """``summed stats@SERVER -> measurements@SERVER`` (the cohort's sum made in process)."""
  finalize_stats = tff.tensorflow.computation(finalize, stats_type)

  @tff.federated_computation(tff.FederatedType(stats_type, tff.SERVER))
  def finalize_at_server(stats):
    return tff.federated_map(finalize_stats, stats)

  return finalize_at_server


def build_aggregate(stats_type: tff.types.Type) -> tff.Computation:
  """``stats@CLIENTS -> measurements@SERVER``: the cohort's sum, finalized once."""
  finalize_stats = tff.tensorflow.computation(finalize, stats_type)

  @tff.federated_computation(tff.FederatedType(stats_type, tff.CLIENTS))
  def aggregate(stats):
    return tff.federated_map(finalize_stats, tff.federated_sum(stats))

  return aggregate
