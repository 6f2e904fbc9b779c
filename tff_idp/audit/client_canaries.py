"""Canary clients for the client-level audit of IDP-FedAvg (Andrew et al., ICLR 2024, Alg. 2).

A canary client j is not a real client. It owns a random unit direction u_j
(:mod:`tff_idp.audit.directions`), a privacy group p(j) and that group's
sampling rate q_p and clip scale s_p. Its update is always
``CANARY_NORM · u_j``, far above any clip, so the DP aggregator's clipping
makes its contribution exactly s_p·C·u_j, the most a client of its group
can move the sum (IDP-FedAvg Alg. 2; ``tff_idp.idp_fedavg.aggregators``).

* **Sampling.** Canaries are Poisson-sampled like real clients, each with its
  group's q_p, by their own RNG (:class:`CanarySampler`), so the real
  cohorts are exactly those of the same run without canaries. Only a random
  half, the *inserted* canaries, are ever sampled; the *held-out* half never
  takes part and gives the null distribution of the cosine statistic.
* **How canaries enter the sum.** Through the same clip as a client, into
  the value sum only: the aggregator (``accept_canaries=True``) recognises a
  canary by its weight (>= ``CANARY_WEIGHT_OFFSET``) and leaves it out of the
  adaptive clip's count bits and the client count. The normaliser stays the
  expected number of *real* clients, the noise is unchanged, and the ledger
  charges only real clients: the real clients' guarantee is that of the run
  without canaries. What canaries cost is utility (their clipped updates
  add to the model like clients with random data), which the audit
  experiment reports against the same run without canaries.
* **Measurement.** After the run, cos(θ₀ − θ_T, u_j) for every canary
  (:func:`canary_cosines_of_run`), then per group the estimator of
  :mod:`tff_idp.audit.estimator` on (held-out, inserted).

The canary seeds, groups and inserted set come from the *audit seed*, the
auditor's randomness; they say nothing about real clients.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.idp_fedavg.aggregators import CANARY_WEIGHT_OFFSET
from tff_idp.audit import directions
from tff_idp.engine import tff_composition
from tff_idp.engine.sampling import PoissonClientSampler

CANARY_NORM = 1e9
"""Norm of a canary's raw update: above any clip (adaptive clipping grows by
at most e^{η_C/2} per round from 0.1), and its squared coordinates still sum
within float32."""
CANARY_ID_PREFIX = "canary/"

CANARY_ELEMENT_TYPE = tff.StructWithPythonType(
    [("is_canary", np.int32), ("seed", tff.TensorType(np.int64, [2])),
     ("scale", np.float32)], collections.OrderedDict)


@dataclasses.dataclass(frozen=True)
class CanaryPlan:
  """Who the canaries are: one row per canary j."""
  seeds: np.ndarray        # int64 [k, 2]: direction seeds
  groups: np.ndarray       # int [k]: privacy group
  inserted: np.ndarray     # bool [k]: sampled (True) or held out (False)
  rates: np.ndarray        # float [k]: the group's q_p
  clip_scales: np.ndarray  # float [k]: the group's s_p (1 unless SCALE)
  audit_seed: int = 0

  @property
  def num_canaries(self) -> int:
    return int(self.groups.size)

  @property
  def ids(self) -> list[str]:
    return [f"{CANARY_ID_PREFIX}{j:05d}" for j in range(self.num_canaries)]

  def index_of(self, client_id: str) -> Optional[int]:
    """The canary index of ``client_id``, or None for a real client."""
    if not client_id.startswith(CANARY_ID_PREFIX):
      return None
    return int(client_id[len(CANARY_ID_PREFIX):])


def make_canary_plan(num_canaries: int, group_rates: Sequence[float],
                     group_sizes: Sequence[int],
                     group_clip_scales: Optional[Sequence[float]] = None,
                     audit_seed: int = 0) -> CanaryPlan:
  """k canaries in equal numbers over the non-empty groups, half of each inserted.

  Raises ValueError unless k is a positive multiple of 2 × (non-empty groups)
  (each group needs an equal inserted and held-out half).
  """
  rates = np.asarray(group_rates, np.float64)
  sizes = np.asarray(group_sizes)
  groups_used = np.flatnonzero(sizes > 0)
  per_group_unit = 2 * len(groups_used)
  if num_canaries <= 0 or num_canaries % per_group_unit:
    raise ValueError(
        f"--audit_canaries={num_canaries} must be a positive multiple of "
        f"{per_group_unit} (2 × {len(groups_used)} non-empty privacy group(s)): each "
        "group gets equally many canaries, half inserted and half held out; e.g. "
        f"{per_group_unit * max(1, round(num_canaries / per_group_unit))}.")
  scales = (np.ones_like(rates) if group_clip_scales is None
            else np.asarray(group_clip_scales, np.float64))
  per_group = num_canaries // len(groups_used)
  groups = np.repeat(groups_used, per_group)
  rng = np.random.default_rng(np.random.SeedSequence([audit_seed, 0xCA7A]))
  inserted = np.zeros(num_canaries, bool)
  for p in groups_used:
    members = np.flatnonzero(groups == p)
    inserted[rng.choice(members, per_group // 2, replace=False)] = True
  return CanaryPlan(seeds=directions.canary_seeds(audit_seed, num_canaries), groups=groups,
                    inserted=inserted, rates=rates[groups], clip_scales=scales[groups],
                    audit_seed=int(audit_seed))


class CanarySampler:
  """Real clients' Poisson sampler plus the inserted canaries' own one.

  ``sample()`` returns the real cohort (drawn exactly as without canaries)
  followed by the ids of the inserted canaries sampled this round, each with
  its group's rate. Held-out canaries have rate 0. Both RNG states are
  checkpointed (``get_state``/``set_state``) for exact resume.
  ``canary_rate_factors`` multiplies the canaries' rates per group: only for
  the audit's deliberately broken controls, which miscalibrate a group's
  sampling (``tff_idp.audit.controls``).
  """

  def __init__(self, real: PoissonClientSampler, plan: CanaryPlan,
               canary_rate_factors: Optional[Sequence[float]] = None):
    self.real = real
    self.plan = plan
    rates = plan.rates * plan.inserted
    if canary_rate_factors is not None:
      rates = np.minimum(1.0, rates * np.asarray(canary_rate_factors)[plan.groups])
    self._canaries = PoissonClientSampler(
        plan.ids, rates, int(np.random.SeedSequence([plan.audit_seed, 0x5A3]).generate_state(1)[0]))
    self.last_real_count = 0

  @property
  def client_ids(self):
    return self.real.client_ids

  @property
  def rates(self):
    return self.real.rates

  @property
  def expected_clients_per_round(self) -> float:
    return self.real.expected_clients_per_round

  def sample(self) -> list[str]:
    cohort = self.real.sample()
    self.last_real_count = len(cohort)
    return cohort + self._canaries.sample()

  def get_state(self) -> dict:
    return {"real": self.real.get_state(), "canaries": self._canaries.get_state()}

  def set_state(self, state: dict) -> None:
    self.real.set_state(state["real"])
    self._canaries.set_state(state["canaries"])


def _canary_element(is_canary: bool, seed=(0, 0), scale: float = 0.0) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensors(collections.OrderedDict(
      is_canary=tf.constant(int(is_canary), tf.int32),
      seed=tf.constant(np.asarray(seed, np.int64)),
      scale=tf.constant(float(scale), tf.float32)))


def with_canary_inputs(client_input_fn: Callable[[str, int], Any], plan: CanaryPlan,
                       empty_input_fn: Callable[[], Any]) -> Callable[[str, int], Any]:
  """Client inputs for a process built with canaries: ``OrderedDict(data, canary)``.

  A real client's ``data`` is what ``client_input_fn`` gives; a canary's is
  ``empty_input_fn()`` (no records: it trains nothing) and its ``canary``
  element carries its seed and clip scale.
  """

  def make(client_id: str, round_num: int):
    j = plan.index_of(client_id)
    if j is None:
      return collections.OrderedDict(data=client_input_fn(client_id, round_num),
                                     canary=_canary_element(False))
    return collections.OrderedDict(
        data=empty_input_fn(),
        canary=_canary_element(True, plan.seeds[j], plan.clip_scales[j]))

  return make


def with_canary_padding(empty_input_fn: Callable[[], Any]) -> Callable[[], Any]:
  """The padding input (no data, not a canary) of a process built with canaries."""
  return lambda: collections.OrderedDict(data=empty_input_fn(),
                                         canary=_canary_element(False))


def build_canary_client_work(inner: tff.learning.templates.ClientWorkProcess
                             ) -> tff.learning.templates.ClientWorkProcess:
  """Wraps a client work so that canary clients send ``CANARY_NORM · u_j``.

  The client data becomes ``OrderedDict(data=<inner's data>, canary=<one
  CANARY_ELEMENT_TYPE element>)``. A real client's result is the inner
  one's; a canary's update is replaced by its direction times
  ``CANARY_NORM`` and its weight by ``CANARY_WEIGHT_OFFSET + s_p``, which the
  aggregator reads as "canary of clip scale s_p".
  """
  canary_type = tff.SequenceType(CANARY_ELEMENT_TYPE)
  result_type = inner.next.type_signature.result.result.member
  update_specs = tf.nest.flatten(tff.types.type_to_tf_tensor_specs(result_type.update))

  @tff.tensorflow.computation(result_type, canary_type)
  def apply_canary(result, canary):
    info = canary.reduce(
        collections.OrderedDict(is_canary=tf.constant(0, tf.int32),
                                seed=tf.zeros([2], tf.int64), scale=tf.constant(0.0)),
        lambda _, x: x)
    is_canary = info["is_canary"] > 0

    def canary_update():
      direction = directions.canary_direction(info["seed"], update_specs)
      return [tf.cast(u * CANARY_NORM, s.dtype) for u, s in zip(direction, update_specs)]

    leaves = tf.cond(is_canary, canary_update,
                     lambda: [tf.identity(v) for v in tf.nest.flatten(result.update)])
    update = tf.nest.pack_sequence_as(result.update, leaves)
    weight = tf.where(is_canary, CANARY_WEIGHT_OFFSET + info["scale"],
                      tf.cast(result.update_weight, tf.float32))
    return tff.learning.templates.ClientResult(update=update, update_weight=weight)

  return tff_composition.map_client_results(inner, "canary", canary_type, apply_canary)


model_delta = directions.model_delta


def canary_cosines_of_run(process: Any, state: Any, plan: CanaryPlan) -> np.ndarray:
  """cos(θ₀ − θ_T, u_j) for every canary of ``plan`` (float64 [k])."""
  return directions.canary_cosines(model_delta(process, state), plan.seeds)
