"""From a run spec to who is sampled how often, with how much noise.

Run specs (the experiment modules' ``--runs`` flag):

* ``nonprivate``  plain FedAvg, uniform sampling at c/N.
* ``A-B-C``       IDP-SAMPLE with the privacy groups in A%/B%/C% proportions
                  (Alg. 1). A distribution with one non-empty group is uniform
                  DP at that group's ε (e.g. ``100-0-0`` strict, ``0-0-100``
                  relaxed): Alg. 1 then reduces to getNoise(ε, c/N).
* ``idp``         IDP-SAMPLE with the ``--ratios`` distribution.
* ``scale:A-B-C`` / ``scale``  the SCALE baseline on that distribution;
  ``scale-A-B-C`` (the name tables and output folders use) is accepted too.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Optional, Sequence

import numpy as np

from tff_idp.accounting.client import sample
from tff_idp.accounting.client import scale
from tff_idp.accounting import validation
from tff_idp.accounting.client.ledger import GroupPrivacyLedger
from tff_idp.engine.sampling import assign_privacy_groups


@dataclasses.dataclass(frozen=True)
class RunSpec:
  name: str
  mode: str                       # "nonprivate" | "idp" | "scale"
  ratios: Optional[tuple[float, ...]] = None


def parse_run_spec(text: str, default_ratios: Sequence[float], num_groups: int) -> RunSpec:
  """Parses one ``--runs`` entry (see module docstring)."""
  text = text.strip()
  if text == "nonprivate":
    return RunSpec("nonprivate", "nonprivate")
  if text.startswith("scale-"):  # the run's own name, as tables and folders print it
    text = "scale:" + text[len("scale-"):]
  mode, _, dist = text.rpartition(":") if ":" in text else ("idp", "", text)
  if mode not in ("idp", "scale"):
    raise ValueError(f"run spec {text!r}: mode must be idp or scale, e.g. scale:34-43-23 "
                     "(or scale-34-43-23).")
  dist_from_ratios = dist in ("idp", "scale", "")
  if dist_from_ratios:
    ratios = tuple(float(r) for r in default_ratios)
    mode = dist or mode
    dist = "-".join(f"{100 * r:g}" for r in ratios)
  else:
    try:
      percentages = [float(p) for p in dist.split("-")]
    except ValueError:
      raise ValueError(f"run spec {text!r}: expected nonprivate, idp, scale, percentages "
                       "like 34-43-23, or scale:34-43-23 / scale-34-43-23.") from None
    if len(percentages) == num_groups and abs(sum(percentages) - 100.0) > 1e-6:
      raise ValueError(f"run spec {text!r}: the percentages {dist} sum to "
                       f"{sum(percentages):g}, not 100; give each group's share of the "
                       "clients in percent, e.g. 34-43-23.")
    ratios = tuple(p / 100.0 for p in percentages)
  if len(ratios) != num_groups:
    if dist_from_ratios:  # issue 50: the fix is in --ratios, not in the run spec
      raise ValueError(f"run spec {text!r} takes its groups from --ratios, which has "
                       f"{len(ratios)} values for {num_groups} --budgets; give "
                       f"{num_groups} --ratios, one per budget.")
    raise ValueError(f"run spec {text!r} has {len(ratios)} percentages for {num_groups} "
                     f"--budgets; give {num_groups}, one per budget (e.g. "
                     f"{_even_percentages(num_groups)}).")
  validation.check_ratios(ratios)
  name = dist if mode == "idp" else f"scale-{dist}"
  return RunSpec(name, mode, ratios)


def _even_percentages(num_groups: int) -> str:
  """An example spec of ``num_groups`` whole percentages summing to 100 (5 -> 20-20-20-20-20)."""
  shares = [100 // num_groups] * num_groups
  shares[0] += 100 - sum(shares)
  return "-".join(str(share) for share in shares)


@dataclasses.dataclass
class PrivacyPlan:
  """Everything the round loop needs to enforce one run's privacy."""
  spec: RunSpec
  client_groups: Optional[np.ndarray]        # group index per client
  client_rates: np.ndarray                   # Poisson rate per client
  noise_multiplier: Optional[float]          # None: non-private
  expected_clients_per_round: float
  client_clip_scales: Optional[np.ndarray]   # SCALE only
  ledger: Optional[GroupPrivacyLedger]
  group_rates: tuple[float, ...] = ()
  group_sizes: tuple[int, ...] = ()
  # E[Σ_i s_i] per round, the aggregator's clip-bit normaliser (SCALE only).
  expected_clip_scale_sum: Optional[float] = None

  def aggregator_kwargs(self) -> dict:
    """What the DP aggregator needs from this plan beyond σ and c."""
    if self.expected_clip_scale_sum is None:
      return {}
    return {"expected_clip_scale_sum": self.expected_clip_scale_sum}

  def summary(self) -> dict:
    return {
        "run": self.spec.name,
        "noise_multiplier": self.noise_multiplier,
        "group_sizes": list(self.group_sizes),
        "group_rates": list(self.group_rates),
        "expected_clients_per_round": self.expected_clients_per_round,
        "clip_scales": (sorted(set(np.round(self.client_clip_scales, 6).tolist()))
                        if self.client_clip_scales is not None else None),
    }


@functools.lru_cache(maxsize=32)
def _group_calibration(budgets: tuple, sizes: tuple, delta: float, rounds: int,
                       clients_per_round: float, accountant: str, max_rate: float
                       ) -> sample.GroupCalibration:
  """Alg. 1 once per run specification: every seed of a run shares it.

  The calibration depends on the budgets and group sizes only, not on which
  clients a seed puts in which group; the result is immutable.
  """
  return sample.get_group_sampling_rates(list(budgets), list(sizes), delta, rounds,
                                         clients_per_round, accountant, max_rate)


@functools.lru_cache(maxsize=32)
def _scale_calibration(budgets: tuple, sizes: tuple, delta: float, rounds: int,
                       clients_per_round: float, accountant: str
                       ) -> scale.ScaleCalibration:
  """SCALE's calibration once per run specification (see ``_group_calibration``)."""
  return scale.get_group_clip_scales(list(budgets), list(sizes), delta, rounds,
                                     clients_per_round, accountant)


def make_privacy_plan(spec: RunSpec, budgets: Sequence[float], num_clients: int,
                      clients_per_round: float, rounds: int, delta: float,
                      accountant: str, seed: int, allow_overrun: bool = False,
                      max_rate: float = 1.0) -> PrivacyPlan:
  """Calibrates one run (Alg. 1 for IDP, SCALE calibration, or nothing)."""
  validation.check_cohort(clients_per_round, num_clients)
  if spec.mode == "nonprivate":
    rate = clients_per_round / num_clients
    return PrivacyPlan(spec, None, np.full(num_clients, rate), None,
                       float(clients_per_round), None, None, (rate,), (num_clients,))
  sizes = validation.group_sizes_from_ratios(spec.ratios, num_clients)
  groups = assign_privacy_groups(num_clients, spec.ratios, seed)
  if spec.mode == "idp":
    cal = _group_calibration(tuple(float(b) for b in budgets), tuple(int(n) for n in sizes),
                             delta, rounds, clients_per_round, accountant, max_rate)
    ledger = GroupPrivacyLedger(cal.target_epsilons, cal.sampling_rates,
                           [cal.noise_multiplier] * len(sizes), delta, rounds,
                           accountant, allow_overrun)
    return PrivacyPlan(spec, groups, np.asarray(cal.sampling_rates)[groups],
                       cal.noise_multiplier, cal.expected_clients_per_round, None,
                       ledger, cal.sampling_rates, cal.group_sizes)
  cal = _scale_calibration(tuple(float(b) for b in budgets), tuple(int(n) for n in sizes),
                           delta, rounds, clients_per_round, accountant)
  ledger = GroupPrivacyLedger(cal.target_epsilons, [cal.sampling_rate] * len(sizes),
                         list(cal.effective_noise_multipliers), delta, rounds,
                         accountant, allow_overrun)
  return PrivacyPlan(spec, groups, np.full(num_clients, cal.sampling_rate),
                     cal.noise_multiplier, float(clients_per_round),
                     np.asarray(cal.clip_scales)[groups], ledger,
                     (cal.sampling_rate,) * len(sizes), cal.group_sizes,
                     min(cal.expected_clip_scale_sum, float(clients_per_round)))
