"""IDP-FedAvg's client inputs under TFF's program API (issue 31 item 8; issue 48).

:class:`IdpFedAvgDataSource` is a ``tff.program.FederatedDataSource`` for
``tff.learning.programs.train_model`` and
:func:`~tff_idp.idp_fedavg.process.build_idp_fedavg_process`: every round it
samples each client independently at its own rate q_i (IDP-FedAvg Alg. 2:
SAMPLE's per-group rates, or one uniform rate), with the sampler seeded from
a secret drawn when ``train_model`` asks for the iterator
(:mod:`tff_idp.engine.program_data_source`). Each selected client's data is
its examples as ``OrderedDict(x=..., y=...)`` batches, shuffled with the
client's secret seed of the round and repeated ``local_epochs`` times; with
``clip_scales`` (SCALE) the input is
:func:`~tff_idp.idp_fedavg.process.scaled_client_data` with the client's
clip scale s_i ∈ (0, 1].

A source is built from its calibration (:meth:`IdpFedAvgDataSource.from_plan`):
SAMPLE's :class:`~tff_idp.accounting.client.sample.GroupCalibration` (Alg. 1),
SCALE's :class:`~tff_idp.accounting.client.scale.ScaleCalibration` or the
experiments' :class:`~tff_idp.idp_fedavg.plan.PrivacyPlan`. The plan gives
the rates (and clip scales) and the rounds T they cover, so the two cannot
disagree; a ``rounds`` that differs is refused. Its iterators know the plan's
ε, δ and σ, and a round past T is refused naming the ε per group that round
would reach (:class:`~tff_idp.accounting.client.ledger.GroupPrivacyLedger`,
the accountant the calibration used).
"""
from __future__ import annotations

import collections
import logging
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_idp.accounting.client.ledger import GroupPrivacyLedger
from tff_idp.accounting.client.sample import GroupCalibration
from tff_idp.accounting.client.scale import ScaleCalibration
from tff_idp.engine import program_data_source
from tff_idp.errors import ToolkitValueError
from tff_idp.idp_fedavg.plan import PrivacyPlan
from tff_idp.idp_fedavg.process import scaled_client_data

PLANS = (GroupCalibration, ScaleCalibration, PrivacyPlan)


def _numbers(values: Sequence[float]) -> str:
  return "(" + ", ".join(f"{float(v):.3g}" for v in values) + ")"


class IdpFedAvgIterator(program_data_source.ClientArraysIterator):
  """Poisson-sampled clients' batches (and clip scales for SCALE); see the module doc."""

  def _dataset(self, x: np.ndarray, y: np.ndarray, shuffle_seed: Optional[int]
               ) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(collections.OrderedDict(x=x, y=y))
    if shuffle_seed is not None and len(y) > 1:
      ds = ds.shuffle(len(y), seed=shuffle_seed, reshuffle_each_iteration=True)
    return ds.repeat(self.options["local_epochs"]).batch(self.options["batch_size"])

  def _wrap(self, dataset: tf.data.Dataset, scale: float):
    if self.options["clip_scales"] is None:
      return dataset
    return scaled_client_data(dataset, scale)

  def client_input(self, index: int, seed: tuple[int, int]):
    arrays = self.arrays(index)
    data = self._dataset(arrays["x"], arrays["y"], int(seed[0]))
    scales = self.options["clip_scales"]
    return self._wrap(data, scales[index] if scales is not None else 1.0)

  def padding_input(self):
    arrays = self.arrays(0)
    return self._wrap(self._dataset(arrays["x"][:0], arrays["y"][:0], None), 1.0)

  def privacy_at(self, rounds: int) -> Optional[str]:
    """ε per group after ``rounds`` rounds of Alg. 2 at the plan's q_p and σ_p (if known)."""
    plan = self.options.get("privacy")
    if plan is None:
      return None
    ledger = GroupPrivacyLedger(plan["target_epsilons"], plan["sampling_rates"],
                                plan["noise_multipliers"], plan["delta"], int(rounds),
                                plan["accountant"])
    return (f"ε per group {_numbers(ledger.spent(int(rounds)))} at δ={plan['delta']:g}, "
            f"against budgets {_numbers(plan['target_epsilons'])}")


def _group_indices(groups: Any, sizes: Sequence[int], num_clients: int) -> np.ndarray:
  """Each client's privacy group, checked against the group sizes the plan was solved for."""
  if groups is None:
    if len(sizes) != 1:
      raise ToolkitValueError(f"this calibration has {len(sizes)} privacy groups: give "
                              "groups=[the group index of each client].")
    groups = np.zeros(num_clients, np.int64)
  groups = np.asarray(groups)
  if (groups.shape != (num_clients,) or not np.issubdtype(groups.dtype, np.integer)
      or np.any(groups < 0) or np.any(groups >= len(sizes))):
    raise ToolkitValueError(f"groups must give each of the {num_clients} clients an integer "
                            f"group index in [0, {len(sizes)}).")
  counts = np.bincount(groups, minlength=len(sizes))
  if tuple(int(c) for c in counts) != tuple(int(n) for n in sizes):
    raise ToolkitValueError(f"groups put {counts.tolist()} clients in the privacy groups, but "
                            f"the calibration was solved for group sizes {list(sizes)}; give "
                            "groups with those sizes or recalibrate for these.")
  return groups


def _from_plan(plan: Any, num_clients: int, groups: Any
               ) -> tuple[np.ndarray, Optional[np.ndarray], Optional[int], Optional[dict]]:
  """(per-client rates, clip scales, rounds T, the ledger's ε/δ/q/σ) of a calibration."""
  if isinstance(plan, PrivacyPlan):
    if groups is not None:
      raise ToolkitValueError("a PrivacyPlan carries its clients' groups: drop groups=.")
    if len(plan.client_rates) != num_clients:
      raise ToolkitValueError(f"the plan has rates for {len(plan.client_rates)} clients but "
                              f"{num_clients} clients were given; give the clients it was "
                              "made for.")
    ledger = plan.ledger
    privacy = None if ledger is None else dict(
        target_epsilons=[float(e) for e in ledger.target_epsilons],
        sampling_rates=[float(q) for q in ledger.sampling_rates],
        noise_multipliers=[float(s) for s in ledger.noise_multipliers],
        delta=float(ledger.delta), accountant=ledger.accountant)
    return (np.asarray(plan.client_rates, np.float64), plan.client_clip_scales,
            None if ledger is None else int(ledger.calibrated_rounds), privacy)
  groups = _group_indices(groups, plan.group_sizes, num_clients)
  if isinstance(plan, GroupCalibration):  # SAMPLE, Alg. 1
    group_rates = [float(q) for q in plan.sampling_rates]
    sigmas = [float(plan.noise_multiplier)] * len(group_rates)
    scales = None
  else:  # SCALE
    group_rates = [float(plan.sampling_rate)] * len(plan.group_sizes)
    sigmas = [float(s) for s in plan.effective_noise_multipliers]
    scales = np.asarray(plan.clip_scales, np.float64)[groups]
  privacy = dict(target_epsilons=[float(e) for e in plan.target_epsilons],
                 sampling_rates=group_rates, noise_multipliers=sigmas,
                 delta=float(plan.delta), accountant=plan.accountant)
  return np.asarray(group_rates)[groups], scales, int(plan.rounds), privacy


class IdpFedAvgDataSource(program_data_source.ClientArraysDataSource):
  """IDP-FedAvg / SCALE client inputs for ``train_model`` (module doc).

  Build it from its calibration with :meth:`from_plan` (or pass the plan as
  ``sampling_rates``): the rates and the rounds then come from one object.

  Args:
    clients: per client, ``(x, y)`` numpy arrays (the model's input spec
      must be ``OrderedDict(x=..., y=...)`` batches).
    sampling_rates: the calibration (a ``GroupCalibration``,
      ``ScaleCalibration`` or ``PrivacyPlan``), or bare per-client rates q_i
      (then ``rounds`` is required, and nothing ties it to how the rates
      were calibrated: logged). The expected cohort Σ q_i, rounded, is the
      ``train_per_round_clients`` that ``train_model`` must pass.
    groups: with a ``GroupCalibration`` or ``ScaleCalibration`` of several
      groups: each client's group index (the group sizes must be the plan's).
    batch_size, local_epochs: each client's local data pipeline.
    clip_scales: SCALE with bare rates only: per client, its clip scale s_i ∈
      (0, 1] (``get_group_clip_scales``); build the process with
      ``per_client_clip_scale=True``.
    rounds: with a plan, leave it out (it is the plan's T; a different value
      is refused). With bare rates, required: the rounds the calibration
      covers. ``None`` (explicit, logged): no limit; then you keep count.
    rounds_spent: rounds of this calibration already run (by an earlier
      process; from your own ledger): the source allows T - rounds_spent more.
    insecure_seed: debug only: derive the sampling and shuffling secrets from
      this seed (NOT PRIVATE: the cohorts become predictable).
  """

  iterator_cls = IdpFedAvgIterator

  def __init__(self, clients: Sequence, sampling_rates: Any, *,
               groups: Optional[Sequence[int]] = None, batch_size: int = 16,
               local_epochs: int = 1, clip_scales: Optional[Sequence[float]] = None,
               rounds: Any = program_data_source.ROUNDS_REQUIRED, rounds_spent: int = 0,
               insecure_seed: Optional[int] = None):
    arrays = program_data_source.check_client_arrays(clients)
    privacy = None
    if isinstance(sampling_rates, PLANS):
      plan = sampling_rates
      if clip_scales is not None:
        raise ToolkitValueError("the plan carries the clip scales (SCALE) or has none "
                                "(SAMPLE): drop clip_scales=.")
      sampling_rates, clip_scales, plan_rounds, privacy = _from_plan(plan, len(arrays), groups)
      if plan_rounds is not None:
        if rounds is not program_data_source.ROUNDS_REQUIRED and rounds != plan_rounds:
          # A plan with a T always has its ε and δ (a PrivacyPlan has both or neither).
          budget = f" (ε {_numbers(privacy['target_epsilons'])} at δ={privacy['delta']:g})"
          fix = ("calibrate the plan for the rounds you will run" if rounds is None
                 else f"calibrate the plan for {rounds!r} rounds")
          raise ToolkitValueError(
              f"rounds={rounds!r} disagrees with the plan, calibrated for {plan_rounds} "
              f"rounds{budget}: drop rounds= or {fix}.")
        rounds = plan_rounds
    elif groups is not None:
      raise ToolkitValueError("groups= goes with a GroupCalibration or ScaleCalibration; "
                              "bare rates are already per client.")
    else:
      logging.warning("IdpFedAvgDataSource built from bare rates: it cannot check that "
                      "rounds=%r is what they were calibrated for; build it with "
                      "IdpFedAvgDataSource.from_plan(clients, calibration).", rounds)
    rates = program_data_source.check_rates(sampling_rates, len(arrays), "sampling rate")
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
      raise ToolkitValueError(f"batch_size={batch_size!r} must be an integer >= 1.")
    if isinstance(local_epochs, bool) or int(local_epochs) != local_epochs or local_epochs < 1:
      raise ToolkitValueError(f"local_epochs={local_epochs!r} must be an integer >= 1.")
    scales = None
    if clip_scales is not None:
      scales = np.asarray(clip_scales, np.float64).ravel()
      if scales.shape != (len(arrays),) or not np.all((scales > 0) & (scales <= 1)):
        raise ToolkitValueError("clip_scales must give every client a clip scale in (0, 1].")
      scales = [float(s) for s in scales]
    options = dict(batch_size=int(batch_size), local_epochs=int(local_epochs),
                   clip_scales=scales)
    if privacy is not None:
      options["privacy"] = privacy
    super().__init__(arrays, rates, options, insecure_seed=insecure_seed, rounds=rounds,
                     rounds_spent=rounds_spent)

  @classmethod
  def from_plan(cls, clients: Sequence, plan: Any, *, groups: Optional[Sequence[int]] = None,
                batch_size: int = 16, local_epochs: int = 1, rounds_spent: int = 0,
                insecure_seed: Optional[int] = None,
                rounds: Any = program_data_source.ROUNDS_REQUIRED) -> "IdpFedAvgDataSource":
    """The source of one calibration (IDP-FedAvg Alg. 1's rates for Alg. 2; class doc).

    ``plan``: a ``GroupCalibration`` (``get_group_sampling_rates``; give
    ``groups``), a ``ScaleCalibration`` (``get_group_clip_scales``; give
    ``groups``) or a ``PrivacyPlan`` (``make_privacy_plan``). Its rates, clip
    scales and rounds T are the source's; ``rounds`` only for a non-private
    ``PrivacyPlan`` (which has no T), or equal to T.
    """
    if not isinstance(plan, PLANS):
      raise ToolkitValueError(f"plan must be a GroupCalibration, ScaleCalibration or "
                              f"PrivacyPlan, not {type(plan).__name__}; for bare rates use "
                              "IdpFedAvgDataSource(clients, rates, rounds=T).")
    return cls(clients, plan, groups=groups, batch_size=batch_size, local_epochs=local_epochs,
               rounds=rounds, rounds_spent=rounds_spent, insecure_seed=insecure_seed)
