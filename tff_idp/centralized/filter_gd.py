"""The *Filter* baseline of rPDP-FL §7.1.1: private GD with an individual Rényi filter.

Feldman & Zrnic, "Individual Privacy Accounting via a Rényi Filter"
(NeurIPS 2021), Alg. 3, as rPDP-FL Table 2 / Fig. 7 use it. Every step of
private **full-batch** gradient descent

1. clips the gradient of every active record i to L₂ norm ≤ L,
2. sums, adds N(0, σ²L²·I) and divides by the fixed dataset size n
   (n is public; dividing by the number of *active* records would make the
   scale data-dependent),
3. takes a gradient step.

Given the current (already released) model θ_t, the step is a Gaussian
mechanism whose sensitivity to record i is ‖clip(g_t(x_i))‖, so its RDP at
order α for that record is (:func:`gaussian_step_rdp`)

    ρ_t^(i) = α · ‖clip(g_t(x_i))‖² / (2σ²L²)  ≤  α / (2σ²)  (the worst case).

ρ_t^(i) is a function of θ_t and x_i only, i.e. it is *predictable*, so
Feldman & Zrnic's Rényi filter (their adaptive-composition theorem, §3)
applies per record: if the sum of the ρ_t^(i) a record is charged never
exceeds a budget B_i fixed in advance, the whole run is (α, B_i)-RDP for that
record. A record that could
go over B_i is left out of the step (filtered), so it is charged 0 then.

**Budgets.** A record asks for (ε_i, δ). We turn it into an RDP budget at
order α with the RDP→DP conversion of Balle et al. 2020 (Prop. 12), the one
:mod:`tff_idp.accounting.record.rdp_two_stage` (and therefore SCF and BinarySearch)
uses, so both sides of the comparison give ε the same meaning:

    ε = B + log(1 − 1/α) − log(δ·α)/(α − 1)
    ⇒  B_i(α) = ε_i − log(1 − 1/α) + log(δ·α)/(α − 1)      (:func:`rdp_budget`).

(Mironov 2017's ε = B + log(1/δ)/(α − 1) is also available; it is looser, so
it gives every record less RDP budget.) B_i(α) ≤ 0 means the record can never
take part at that order.

**Order α.** By default each record gets its own order α_i
(:func:`best_orders`), the one on a fine grid that maximizes the number of
worst-case steps it can afford, B_i(α)/(α/(2σ²)); the argmax depends on ε_i
and δ only (σ² cancels), so α_i is fixed before training and independent of
the data, as the filter requires. Different records may use different orders
because record i's guarantee involves only its own filter: whether another
record j is active depends on θ_t and x_j, which are the same in the two
neighbouring datasets that differ in record i. A shared order (``alpha=<float>``)
is also supported; it is optimal for one budget only and starves the others
(e.g. at δ = 1e-5 the best order is about 10 for ε = 2 but 3 for ε = 11.8).

**When a record is filtered** (``check``):

* ``"worst_case"`` (default): before a step, record i is active iff its spent
  RDP plus the worst-case charge α_i/(2σ²) fits in B_i; after the step it is
  charged its *actual* ρ_t^(i) ≤ α_i/(2σ²). One per-example pass per step
  over the active records only. It is the filter of Alg. 3 made conservative
  by at most one step: a record with less than one worst-case step left is
  dropped even if its actual norm would still fit.
* ``"actual"``: Alg. 3 as written: record i is active iff its spent RDP plus
  its actual ρ_t^(i) at θ_t fits. This needs the per-example norms before the
  sum, so it costs a norm pass over the not-yet-exhausted records and a
  second pass over the admitted ones (up to 2× per step).

Either way spent_i ≤ B_i(α_i) always holds (the sum that is checked is the
one that is stored), so every record ends within (ε_i, δ).

The gradient part is TensorFlow (per-example clipping vectorised by
:mod:`tff_idp.rpdp.per_example`); the bookkeeping is numpy
(:class:`RenyiFilter`). TensorFlow is imported only by the functions that
need it, so the accounting here can be used (and tested) without it.
"""
from __future__ import annotations

import dataclasses
import math
import secrets
import time
from typing import Callable, Optional

import numpy as np

from tff_idp.accounting import validation

CHECKS = ("worst_case", "actual")
CONVERSIONS = ("balle", "mironov")

#: Orders α searched by :func:`best_orders`: α − 1 log-spaced on [1e-3, 1e4].
ORDER_GRID: np.ndarray = 1.0 + np.geomspace(1e-3, 1e4, 4001)


def _check_orders(alpha) -> np.ndarray:
  a = np.asarray(alpha, dtype=float)
  if np.any(~(a > 1.0)) or np.any(~np.isfinite(a)):
    raise ValueError(f"RDP order alpha={alpha!r} must be a finite number > 1.")
  return a


def rdp_budget(epsilon, delta: float, alpha, conversion: str = "balle") -> np.ndarray:
  """The RDP budget B(α) at order α whose (ε, δ) conversion is exactly ε.

  ``conversion="balle"`` inverts Balle et al. 2020, Prop. 12 (as used by
  dp-accounting and :mod:`tff_idp.accounting.record.rdp_two_stage`):
  B = ε − log(1 − 1/α) + log(δα)/(α − 1). ``"mironov"`` inverts Mironov 2017,
  Prop. 3: B = ε − log(1/δ)/(α − 1). ε = inf gives B = inf (no constraint).
  A result ≤ 0 means no step can be afforded at that order. Vectorised
  (ε and α broadcast).
  """
  if conversion not in CONVERSIONS:
    raise ValueError(f"conversion={conversion!r} must be one of {CONVERSIONS}.")
  validation.check_delta(delta)
  a = _check_orders(alpha)
  eps = np.asarray(epsilon, dtype=float)
  # ε = B + cost(α, δ): the additive term of the conversion.
  if conversion == "balle":
    cost = np.log1p(-1.0 / a) - np.log(delta * a) / (a - 1.0)
  else:
    cost = math.log(1.0 / delta) / (a - 1.0)
  with np.errstate(invalid="ignore"):
    return np.where(np.isinf(eps), np.inf, eps - cost)


def rdp_to_epsilon(rdp, delta: float, alpha, conversion: str = "balle") -> np.ndarray:
  """(ε, δ) of an (α, ρ)-RDP guarantee; the inverse of :func:`rdp_budget`.

  ε = 0 where ρ = 0 (a record that never took part); clamped at 0.
  """
  budget_at_zero = rdp_budget(0.0, delta, alpha, conversion)  # = −(conversion cost)
  rho = np.asarray(rdp, dtype=float)
  eps = np.maximum(rho - budget_at_zero, 0.0)
  return np.where(rho > 0, eps, 0.0)


def gaussian_step_rdp(clipped_norm, noise_multiplier: float, clip_norm: float,
                      alpha) -> np.ndarray:
  """ρ = α·‖clip(g)‖²/(2σ²L²): one Gaussian step's RDP for a record (FZ21 §4).

  The step adds N(0, σ²L²) to a sum in which the record's contribution has
  norm ``clipped_norm`` ≤ L (Mironov 2017, Prop. 7, with that sensitivity).
  """
  r = np.minimum(np.asarray(clipped_norm, dtype=float), clip_norm) / clip_norm
  return np.asarray(alpha, dtype=float) * r * r / (2.0 * noise_multiplier ** 2)


def best_orders(epsilons, delta: float, conversion: str = "balle",
                orders: np.ndarray = ORDER_GRID) -> np.ndarray:
  """Per-budget order α maximizing the worst-case step count B(α)/(α/(2σ²)).

  The maximizer of B(α)/α does not depend on σ, so it is a function of the
  (public) ε and δ alone. Budgets for which no order gives B > 0 still get
  the maximizer (their B stays ≤ 0, so they never take part); ε = inf gets
  the smallest grid order (any order works there).
  """
  eps = np.asarray(epsilons, dtype=float)
  flat = eps.reshape(-1)
  uniq, inverse = np.unique(flat, return_inverse=True)
  out = np.full(uniq.shape, float(orders[0]))
  finite = np.flatnonzero(np.isfinite(uniq))
  for start in range(0, finite.size, 512):
    idx = finite[start:start + 512]
    score = rdp_budget(uniq[idx, None], delta, orders[None, :], conversion) / orders[None, :]
    out[idx] = orders[np.argmax(score, axis=1)]
  return out[inverse].reshape(eps.shape)


def worst_case_steps(epsilons, delta: float, noise_multiplier: float, alpha=None,
                     conversion: str = "balle") -> np.ndarray:
  """How many worst-case steps (ρ = α/(2σ²) each) a budget affords: ⌊B(α)·2σ²/α⌋.

  With ``alpha=None`` each budget uses :func:`best_orders`.
  """
  validation.check_noise_multiplier(noise_multiplier)
  alpha = best_orders(epsilons, delta, conversion) if alpha is None else alpha
  b = rdp_budget(epsilons, delta, alpha, conversion)
  steps = b * 2.0 * noise_multiplier ** 2 / np.asarray(alpha, dtype=float)
  # ⌊·⌋ with a hair of slack so an exact multiple is not lost to rounding.
  with np.errstate(invalid="ignore"):
    return np.where(np.isinf(steps), np.inf,
                    np.floor(np.maximum(steps, 0.0) * (1 + 1e-12)))


def noise_for_steps(epsilon: float, steps: int, delta: float, alpha=None,
                    conversion: str = "balle") -> float:
  """The smallest σ with which a record at budget ε affords ``steps`` worst-case steps.

  σ² = steps·α/(2·B(α)) at the best order α for ε (:func:`best_orders`).
  """
  validation.check_epsilon(epsilon)
  if not math.isfinite(epsilon):
    raise ValueError("noise_for_steps needs a finite ε.")
  if int(steps) != steps or steps < 1:
    raise ValueError(f"steps={steps!r} must be a positive integer.")
  alpha = float(best_orders(epsilon, delta, conversion)) if alpha is None else float(alpha)
  b = float(rdp_budget(epsilon, delta, alpha, conversion))
  if not b > 0:
    raise ValueError(f"ε={epsilon} at δ={delta} leaves no RDP budget at order {alpha}.")
  # Tiny upward nudge so ⌊B·2σ²/α⌋ is not rounded down to steps − 1.
  return math.sqrt(steps * alpha / (2.0 * b)) * (1 + 1e-9)


class RenyiFilter:
  """Per-record RDP bookkeeping of the individual Rényi filter (numpy only).

  Attributes:
    epsilons: the requested ε_i (inf = unconstrained).
    alpha: the order of each record's filter.
    budget: B_i(α_i), the RDP budget (may be ≤ 0: the record never takes part).
    spent: RDP charged so far, always ≤ budget.
    worst_step: α_i/(2σ²), the largest charge of one step.
  """

  def __init__(self, epsilons, delta: float, noise_multiplier: float,
               alpha: Optional[float] = None, conversion: str = "balle"):
    """``alpha=None``: per-record orders (:func:`best_orders`); a float: shared."""
    from tff_idp.accounting.record import calibration as record_calibration  # pylint: disable=g-import-not-at-top
    self.epsilons = record_calibration.check_budgets(np.asarray(epsilons, dtype=float)
                                                     ).reshape(-1)
    self.delta = validation.check_delta(delta)
    self.noise_multiplier = validation.check_noise_multiplier(noise_multiplier)
    self.conversion = conversion
    if alpha is None:
      self.alpha = best_orders(self.epsilons, delta, conversion)
    else:
      self.alpha = np.full(self.epsilons.shape, float(_check_orders(alpha)))
    self.budget = rdp_budget(self.epsilons, delta, self.alpha, conversion)
    self.spent = np.zeros_like(self.epsilons)
    self.worst_step = self.alpha / (2.0 * self.noise_multiplier ** 2)
    self.steps_taken = np.zeros(self.epsilons.shape, dtype=np.int64)

  @property
  def size(self) -> int:
    return self.epsilons.size

  def worst_case_active(self) -> np.ndarray:
    """Records that can afford one more worst-case step."""
    return self.spent + self.worst_step <= self.budget

  def candidates(self) -> np.ndarray:
    """Records with any budget left (only these can pass the ``actual`` check)."""
    return self.spent < self.budget

  def admit(self, clipped_norms: np.ndarray, among: Optional[np.ndarray] = None) -> np.ndarray:
    """``actual`` check: records whose charge at these norms still fits.

    ``clipped_norms`` holds ‖g_i‖/L (clipped at 1 here), one per record in ``among`` (a boolean mask
    over all records; all records if None). Returns a mask over all records.
    """
    among = np.ones(self.size, dtype=bool) if among is None else np.asarray(among, bool)
    cost = np.zeros(self.size)
    cost[among] = self._cost(clipped_norms, among)
    return among & (self.spent + cost <= self.budget)

  def _cost(self, norms_over_clip: np.ndarray, among: np.ndarray) -> np.ndarray:
    return gaussian_step_rdp(norms_over_clip, self.noise_multiplier, 1.0, self.alpha[among])

  def charge(self, active: np.ndarray, norms_over_clip: np.ndarray) -> None:
    """Adds the actual ρ_t^(i) of a step to the active records.

    ``norms_over_clip``: ‖g_i‖/L (clipped at 1 here) for the active records,
    in index order. Refuses (AssertionError) a charge that would exceed a
    budget: it cannot happen when ``active`` came from a check above.
    """
    active = np.asarray(active, dtype=bool)
    new = self.spent[active] + self._cost(norms_over_clip, active)
    if np.any(new > self.budget[active]):
      raise AssertionError("a Rényi filter charge would exceed a record's budget; "
                           "the active set did not come from the filter check.")
    self.spent[active] = new
    self.steps_taken[active] += 1

  def epsilon_spent(self) -> np.ndarray:
    """ε_i of every record so far (Balle/Mironov conversion at α_i), ≤ ε_i."""
    return rdp_to_epsilon(self.spent, self.delta, self.alpha, self.conversion)

  def never_active(self) -> int:
    """Records whose budget cannot pay for a step at all (B_i ≤ 0)."""
    return int(np.count_nonzero(~(self.budget > 0)))


def _clipped_sum(keras_model, x, y, clip_norm: float, loss_fn):
  """Σ_i clip_L(∇ℓ_i) and per-example norms, vectorised (per_example's paths)."""
  from tff_idp.rpdp import per_example  # pylint: disable=g-import-not-at-top
  if per_example.supports_layerwise(keras_model):
    sums, losses, norms = per_example.layerwise_clipped_sum(keras_model, x, y, clip_norm,
                                                            loss_fn)
  else:
    sums, losses, norms = per_example.vectorized_clipped_sum(
        lambda xb: keras_model(xb, training=True), list(keras_model.trainable_variables),
        x, y, clip_norm, loss_fn)
  return [sums[v.ref()] for v in keras_model.trainable_variables], losses, norms


def sparse_categorical_crossentropy(labels, logits):
  """Per-example cross-entropy of integer labels and logits."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def build_private_gd_step(keras_model, learning_rate: float,
                          noise_multiplier: float, clip_norm: float, num_records: int,
                          loss_fn: Callable = sparse_categorical_crossentropy):
  """TF functions of one private GD step on the records given to it.

  Returns ``(step, norms)``:

  * ``step(x, y, seed)``: θ ← θ − η·(Σ_i clip_L(∇ℓ(θ; x_i, y_i)) + N(0, σ²L²))/n
    over the given (active) records, with n = ``num_records`` fixed; an empty
    batch takes a noise-only step (skipping it would reveal that no record
    was active). Returns the per-example gradient norms (before clipping).
  * ``norms(x, y)``: the per-example gradient norms at the current θ.

  ``noise_multiplier=0`` gives the non-private step (for tests).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if not clip_norm > 0 or not math.isfinite(clip_norm):
    raise ValueError(f"clip_norm={clip_norm!r} must be a finite number > 0.")
  if noise_multiplier < 0 or not math.isfinite(noise_multiplier):
    raise ValueError(f"noise_multiplier={noise_multiplier!r} must be finite and >= 0.")
  if int(num_records) != num_records or num_records < 1:
    raise ValueError(f"num_records={num_records!r} must be a positive integer.")
  noise_std = float(noise_multiplier) * float(clip_norm)
  variables = list(keras_model.trainable_variables)
  scale = 1.0 / float(num_records)

  @tf.function(reduce_retracing=True)
  def step(x, y, seed):
    if tf.shape(y)[0] > 0:
      sums, _, norms = _clipped_sum(keras_model, x, y, clip_norm, loss_fn)
    else:
      sums = [tf.zeros_like(v) for v in variables]
      norms = tf.zeros([0], tf.float32)
    for k, (v, g) in enumerate(zip(variables, sums)):
      z = tf.random.stateless_normal(
          tf.shape(v), seed=tf.random.experimental.stateless_fold_in(seed, k),
          stddev=noise_std, dtype=v.dtype)
      v.assign_sub(learning_rate * scale * (g + z))
    return norms

  @tf.function(reduce_retracing=True)
  def norms(x, y):
    _, _, n = _clipped_sum(keras_model, x, y, clip_norm, loss_fn)
    return n

  return step, norms


@dataclasses.dataclass
class FilterRun:
  """What one run of private GD with the filter did.

  Attributes:
    active: records that took part in each step (Fig. 7), length = steps.
    history: [(step, metrics dict)] from the evaluation callback.
    step_seconds: wall time of each step, filter bookkeeping included (the
      first step includes tracing).
    tf_seconds: the part of each step spent in the TensorFlow calls.
    filter: the final :class:`RenyiFilter` (spent RDP, orders, budgets).
    first_filtered: per distinct budget (when there are ≤ 64), the first step
      (from 1) at which a record with it was left out, None if never: the red
      points of Fig. 7.
  """
  active: np.ndarray
  history: list
  step_seconds: np.ndarray
  tf_seconds: np.ndarray
  filter: RenyiFilter
  first_filtered: dict

  def seconds_per_step(self, tf_only: bool = False) -> float:
    """Mean step time, leaving out the first two steps (tracing)."""
    s = self.tf_seconds if tf_only else self.step_seconds
    s = s[2:] if s.size > 2 else s
    return float(np.mean(s)) if s.size else float("nan")


def run_private_gd_with_filter(keras_model, x: np.ndarray, y: np.ndarray,
                               epsilons: np.ndarray, delta: float, noise_multiplier: float,
                               clip_norm: float, learning_rate: float, steps: int,
                               seed: Optional[int] = None, alpha: Optional[float] = None,
                               check: str = "worst_case", conversion: str = "balle",
                               evaluate: Optional[Callable[[], dict]] = None,
                               eval_every: int = 0,
                               loss_fn: Callable = sparse_categorical_crossentropy
                               ) -> FilterRun:
  """Private full-batch GD with an individual Rényi filter (FZ21 Alg. 3).

  Trains ``keras_model`` in place for ``steps`` steps on all of (x, y); each
  record i is held to (ε_i, δ) by its own filter (see module doc for
  ``alpha``, ``check`` and ``conversion``). ``evaluate()`` is called every
  ``eval_every`` steps and after the last one.

  ``seed`` seeds the Gaussian noise, so it must be secret: the default (None)
  draws it from OS entropy. A fixed seed makes the noise removable by whoever
  knows it (tests and debugging only; see ``tff_idp.engine.privacy_randomness``).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if check not in CHECKS:
    raise ValueError(f"check={check!r} must be one of {CHECKS}.")
  if int(steps) != steps or steps < 1:
    raise ValueError(f"steps={steps!r} must be a positive integer.")
  n = len(y)
  if np.shape(epsilons) != (n,):
    raise ValueError(f"need one budget per record: {np.shape(epsilons)} budgets, {n} records.")
  filt = RenyiFilter(epsilons, delta, noise_multiplier, alpha, conversion)
  step_fn, norms_fn = build_private_gd_step(keras_model, learning_rate, noise_multiplier,
                                            clip_norm, n, loss_fn)
  x = np.asarray(x, np.float32)
  y = np.asarray(y, np.int32)
  if seed is None:
    seed = secrets.randbits(63)
  base_seed = tf.constant([seed, 0x5EED], tf.int64)
  active_counts = np.zeros(int(steps), dtype=np.int64)
  first_filtered = {float(e): None for e in np.unique(filt.epsilons)} \
      if np.unique(filt.epsilons).size <= 64 else {}
  seconds = np.zeros(int(steps))
  tf_seconds = np.zeros(int(steps))
  history = []
  for t in range(int(steps)):
    start = time.perf_counter()
    tf_time = 0.0
    if check == "worst_case":
      active = filt.worst_case_active()
    else:
      cand = filt.candidates()
      cand_norms = np.zeros(0)
      if cand.any():
        xc, yc = x[cand], y[cand]
        tic = time.perf_counter()
        cand_norms = norms_fn(xc, yc).numpy() / clip_norm
        tf_time += time.perf_counter() - tic
      active = filt.admit(cand_norms, cand)
    xa, ya = x[active], y[active]
    tic = time.perf_counter()
    norms = step_fn(xa, ya, tf.random.experimental.stateless_fold_in(base_seed, t)).numpy()
    tf_time += time.perf_counter() - tic
    filt.charge(active, norms / clip_norm)
    seconds[t] = time.perf_counter() - start
    tf_seconds[t] = tf_time
    active_counts[t] = int(active.sum())
    if first_filtered:
      for e in first_filtered:
        if first_filtered[e] is None and np.any(~active & (filt.epsilons == e)):
          first_filtered[e] = t + 1
    if evaluate is not None and ((eval_every and (t + 1) % eval_every == 0)
                                 or t + 1 == steps):
      history.append((t + 1, evaluate()))
  return FilterRun(active_counts, history, seconds, tf_seconds, filt, first_filtered)
