"""Per-example importance scores ρ of INO-SGD (paper Alg. 1 lines 4-8, Def. C.2).

INO-SGD is IDP-SGD plus one scalar weight ρ_d ∈ [0, 1] per sampled record:
each record's gradient is clipped to its owner's threshold C_{o(d)} and then
multiplied by ρ_d before the noisy sum (Alg. 1 line 13). This module computes
the weights; it knows nothing about gradients, noise or accounting.

**The paper's form (descending, Def. C.2).** Sort the batch by *descending*
loss, let c_k be the cumulative sum of the sorted thresholds and
Γ = Σ_{d∈B} C_{o(d)}. The batch importance function (BIF) f_t on [0, Γ] is 1
on [0, Γ−γ] and the tail importance function (TIF) f_tail(c − (Γ−γ)) after it
(if Γ < γ, only the last Γ of the tail is used: f_tail(c + γ − Γ)), and
ρ_k = ∫_{c_{k−1}}^{c_k} f_t / (c_k − c_{k−1}) (Alg. 1 line 8). The tail of
length γ therefore always sits at the *low-loss* end of the batch.

**The form implemented here (ascending; notes §1.1 "Equivalent ascending
form").** Sort by *ascending* loss and let x_k = C_(1) + … + C_(k), x_0 = 0.
Measured from the low-loss end, the BIF no longer depends on Γ:

    bif(x) = f_tail(γ − x) for x < γ,   bif(x) = 1 for x ≥ γ,

and with its antiderivative F(x) = ∫_0^x bif,

    ρ_(k) = (F(x_k) − F(x_{k−1})) / C_(k).

This is the same integral as Def. C.2 after the change of variable
x = Γ − c, so the two forms give identical scores; the ascending one needs
neither Γ nor a case split, and with an exact F it needs no quadrature grid
(the reference code's rounded grid can give ρ > 1, notes §1.8 I-5).

A TIF is thus described here by F (:class:`TailImportance`). The privacy
argument (Thm 3.3, proof C.3.1) needs 0 ≤ bif ≤ 1 and bif non-decreasing in x,
i.e. F convex with slope in [0, 1]: adding a record d leaves the slots of the
lower-loss records unchanged, shifts the higher-loss ones right by C_{o(d)}
(which can only raise their ρ), and the telescoping sum of all increases plus
d's own weight is F(Γ + C_{o(d)}) − F(Γ) ≤ C_{o(d)}. So ‖ΔḠ‖ ≤ C_{o(d)}, the
same sensitivity as IDP-SGD, and the IDP-SGD accounting applies unchanged.

Built-in TIFs:

* :func:`beta_antiderivative` — the paper's recommended flipped Beta c.d.f.
  f_tail(c) = I_{1−c/γ}(α, β) (Sec. 3.2), i.e. bif(x) = I_{min(x/γ,1)}(α, β),
  with the exact closed form
  F(x) = γ·[y·I_y(α,β) − α/(α+β)·I_y(α+1,β)] + max(x − γ, 0), y = min(x/γ, 1).
  Beta(1, 1) (a linear ramp) is the default (C.2.5).
* :func:`steps_antiderivative` — the step TIF of App. C.2.5 / Fig. 18: four
  equal steps of length s with scores 1/2, 1/4, 1/8, 0 (from the high-loss end
  of the tail), γ = 4s; s = 0 recovers IDP-SGD.

Any other TIF can be passed by its antiderivative: ``TailImportance(F, gamma)``
or ``importance_scores(..., gamma=gamma, antiderivative=F)``.

γ = 0 gives ρ = 1 for every sampled record, bit for bit: INO-SGD then *is*
IDP-SGD.
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Callable, Optional, Union

import tensorflow as tf

Antiderivative = Callable[[tf.Tensor], tf.Tensor]
"""F(x) = ∫_0^x bif for a float tensor x ≥ 0 of any shape, elementwise."""

OVERSHOOT_TOLERANCE = 1e-6
"""How far an unclipped score may leave [0, 1] (float round-off) before it is an error.

:func:`importance_scores` asserts −ε ≤ ρ ≤ 1 + ε and that the sorted scores are
non-decreasing up to ε (which a convex F with slope in [0, 1] guarantees), then
clips to [0, 1]. The clip only absorbs round-off (for the built-in TIFs it is
≈1e-15 unless a threshold is ~1e-10 of γ); anything larger means F is not a
valid antiderivative and fails loudly instead of being silently repaired.
"""

DEFAULT_ALPHA = 1.0
DEFAULT_BETA = 1.0

# Step TIF (App. C.2.5), scores per step in *ascending*-loss order: the lowest-
# loss step of the tail gets 0, the one next to the untouched records 1/2.
_STEP_LEVELS_ASCENDING = (0.0, 0.125, 0.25, 0.5)


def _real(name: str, value, hint: str) -> float:
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise ValueError(f"{name} must be a real Python number, got {value!r} "
                     f"({type(value).__name__}). {hint}")
  value = float(value)
  if not math.isfinite(value):
    raise ValueError(f"{name} must be finite, got {value}. {hint}")
  return value


def validate_gamma(gamma) -> float:
  """γ as a float; ValueError unless γ is a finite number ≥ 0."""
  hint = ("gamma is the tail length in units of summed clipping thresholds: use "
          "gamma=0 for plain IDP-SGD, or e.g. a fraction (paper: ≤ 1/2) of the "
          "expected Σ q_n |D_n| C_n of a batch.")
  gamma = _real("gamma", gamma, hint)
  if gamma < 0:
    raise ValueError(f"gamma must be >= 0, got {gamma}. {hint}")
  return gamma


def validate_beta_parameters(alpha, beta, gamma) -> tuple[float, float, float]:
  """(α, β, γ) as floats; ValueError unless α > 0, β > 0 and γ ≥ 0, all finite."""
  checked = []
  for name, value in (("alpha", alpha), ("beta", beta)):
    hint = (f"{name} is a shape parameter of the Beta(alpha, beta) TIF and must "
            f"be a finite number > 0; use {name}=1 for the default linear ramp.")
    value = _real(name, value, hint)
    if not value > 0:
      raise ValueError(f"{name} must be > 0, got {value}. {hint}")
    checked.append(value)
  return checked[0], checked[1], validate_gamma(gamma)


@dataclasses.dataclass(frozen=True)
class TailImportance:
  """A TIF, given by the antiderivative F of its ascending-form BIF.

  Attributes:
    antiderivative: F(x) = ∫_0^x bif(u) du, where bif(x) = f_tail(γ − x) for
      x < γ and 1 for x ≥ γ (notes §1.1, ascending form of Def. C.2). It must
      map a float64 tensor of any shape elementwise to a tensor of the same
      shape, use only TF ops (it runs inside ``tf.function``), and be convex
      with slope in [0, 1] (f_tail non-increasing with values in [0, 1]);
      otherwise the sensitivity bound of Thm 3.3 does not hold.
      :func:`importance_scores` checks the consequences on every batch.
    gamma: the tail length γ ≥ 0. Slots starting at x ≥ γ get ρ = 1 exactly,
      whatever F does there (bif is 1 there by definition).
    name: a label for logs.

  The object is itself callable as F.
  """
  antiderivative: Antiderivative
  gamma: float
  name: str = "custom"

  def __post_init__(self):
    if not callable(self.antiderivative):
      raise ValueError("antiderivative must be a callable F(x) on tensors "
                       f"(got {self.antiderivative!r}); see beta_antiderivative().")
    object.__setattr__(self, "gamma", validate_gamma(self.gamma))

  def __call__(self, x: tf.Tensor) -> tf.Tensor:
    return self.antiderivative(x)


def _identity_antiderivative(x: tf.Tensor) -> tf.Tensor:
  """F(x) = x: bif ≡ 1, the γ = 0 TIF (IDP-SGD)."""
  return tf.identity(tf.convert_to_tensor(x))


def _regularized_incomplete_beta(a: float, b: float, y: tf.Tensor) -> tf.Tensor:
  """I_y(a, b) for float64 y ∈ [0, 1], with the edges I_0 = 0 and I_1 = 1 set exactly."""
  interior = (y > 0) & (y < 1)
  y_safe = tf.where(interior, y, tf.constant(0.5, tf.float64))
  value = tf.math.betainc(tf.fill(tf.shape(y), tf.constant(a, tf.float64)),
                          tf.fill(tf.shape(y), tf.constant(b, tf.float64)), y_safe)
  return tf.where(interior, value, y)  # y ∈ {0, 1}: I_y = y.


def beta_antiderivative(alpha: float, beta: float, gamma: float) -> TailImportance:
  """Exact F for the paper's Beta TIF f_tail(c) = I_{1−c/γ}(α, β) (Sec. 3.2).

  In ascending coordinates bif(x) = I_y(α, β) with y = min(x/γ, 1), and
  (integrating by parts, ∫_0^y t·Beta-pdf = α/(α+β)·I_y(α+1, β))

      F(x) = γ·[y·I_y(α,β) − α/(α+β)·I_y(α+1,β)] + max(x − γ, 0),

  so F(γ) = γ·β/(α+β). Evaluated in float64 with ``tf.math.betainc`` (the edge
  values y = 0 and y = 1 are set exactly rather than left to betainc) and cast
  back to the input's dtype. γ = 0 gives F(x) = x (no division by γ).

  Args:
    alpha: α > 0; larger α weights the more important pieces of the tail more.
    beta: β > 0; larger β down-weights the less important pieces more.
    gamma: tail length γ ≥ 0.

  Returns:
    A :class:`TailImportance`, callable as F (float tensors in, same dtype out).

  Raises:
    ValueError: if α ≤ 0, β ≤ 0, γ < 0 or any is not a finite number.
  """
  alpha, beta, gamma = validate_beta_parameters(alpha, beta, gamma)
  name = f"beta({alpha:g},{beta:g};gamma={gamma:g})"
  if gamma == 0.0:
    return TailImportance(_identity_antiderivative, 0.0, name)
  mean = alpha / (alpha + beta)

  def antiderivative(x: tf.Tensor) -> tf.Tensor:
    x = tf.convert_to_tensor(x)
    x64 = tf.cast(x, tf.float64)
    y = tf.clip_by_value(x64 / gamma, 0.0, 1.0)
    tail = gamma * (y * _regularized_incomplete_beta(alpha, beta, y)
                    - mean * _regularized_incomplete_beta(alpha + 1.0, beta, y))
    return tf.cast(tail + tf.maximum(x64 - gamma, 0.0), x.dtype)

  return TailImportance(antiderivative, gamma, name)


def steps_antiderivative(step_length: float) -> TailImportance:
  """Exact F for the step TIF of App. C.2.5 (Fig. 18): four steps of length s.

  From the high-loss end of the tail the scores are 1/2, 1/4, 1/8, 0 and
  γ = 4s; in ascending coordinates bif is 0 on [0, s), 1/8 on [s, 2s),
  1/4 on [2s, 3s), 1/2 on [3s, 4s) and 1 from 4s on, so F is the
  piecewise-linear

      F(x) = Σ_j level_j · clip(x − j·s, 0, s) + max(x − 4s, 0).

  Args:
    step_length: s ≥ 0; s = 0 gives γ = 0, i.e. IDP-SGD.

  Returns:
    A :class:`TailImportance` with γ = 4s, callable as F.

  Raises:
    ValueError: if s < 0 or not a finite number.
  """
  hint = ("step_length is the length s of each of the 4 steps (gamma = 4s), in "
          "units of summed clipping thresholds; use 0 for IDP-SGD.")
  s = _real("step_length", step_length, hint)
  if s < 0:
    raise ValueError(f"step_length must be >= 0, got {s}. {hint}")
  gamma = 4.0 * s
  name = f"steps(s={s:g})"
  if s == 0.0:
    return TailImportance(_identity_antiderivative, 0.0, name)

  def antiderivative(x: tf.Tensor) -> tf.Tensor:
    x = tf.convert_to_tensor(x)
    x64 = tf.cast(x, tf.float64)
    total = tf.maximum(x64 - gamma, 0.0)
    for j, level in enumerate(_STEP_LEVELS_ASCENDING):
      if level:
        total += level * tf.clip_by_value(x64 - j * s, 0.0, s)
    return tf.cast(total, x.dtype)

  return TailImportance(antiderivative, gamma, name)


def resolve_tail_importance(
    gamma: Optional[float] = None,
    antiderivative: Optional[Union[TailImportance, Antiderivative]] = None,
) -> TailImportance:
  """The TIF meant by ``importance_scores``' (gamma, antiderivative) arguments.

  * antiderivative None: Beta(1, 1) with tail length ``gamma`` (required).
  * a :class:`TailImportance`: used as is; ``gamma``, if given, must equal its γ.
  * a plain callable F: ``gamma`` (its tail length) is required.
  """
  if antiderivative is None:
    if gamma is None:
      raise ValueError("importance_scores needs the tail length: pass gamma=... "
                       "(gamma=0 is plain IDP-SGD) or antiderivative="
                       "beta_antiderivative(alpha, beta, gamma).")
    return beta_antiderivative(DEFAULT_ALPHA, DEFAULT_BETA, gamma)
  if isinstance(antiderivative, TailImportance):
    if gamma is not None and validate_gamma(gamma) != antiderivative.gamma:
      raise ValueError(f"gamma={gamma} conflicts with the TIF's own gamma="
                       f"{antiderivative.gamma} ({antiderivative.name}); drop the "
                       "gamma argument or build the TIF with the gamma you want.")
    return antiderivative
  if not callable(antiderivative):
    raise ValueError(f"antiderivative must be callable, got {antiderivative!r}.")
  if gamma is None:
    raise ValueError("a plain antiderivative callable needs its tail length: pass "
                     "gamma=... as well (bif is 1 from gamma on), or pass "
                     "TailImportance(F, gamma).")
  return TailImportance(antiderivative, gamma)


def _sorted_unclipped_scores(losses, thresholds, mask, tif: TailImportance):
  """(permutation, float64 unclipped ρ in sorted order, mask in sorted order)."""
  losses = tf.convert_to_tensor(losses)
  if not losses.dtype.is_floating:
    losses = tf.cast(losses, tf.float32)
  tf.debugging.assert_rank(losses, 1, message="losses must be a vector [B]")
  thresholds = tf.cast(tf.convert_to_tensor(thresholds), tf.float64)
  thresholds = tf.broadcast_to(thresholds, tf.shape(losses))
  if mask is None:
    mask = tf.ones(tf.shape(losses), tf.bool)
  else:
    mask = tf.cast(tf.convert_to_tensor(mask), tf.bool)
    tf.debugging.assert_equal(tf.shape(mask), tf.shape(losses),
                              message="mask must have the shape of losses [B]")
  valid = tf.logical_or(tf.logical_not(mask),
                        (thresholds > 0) & tf.math.is_finite(thresholds))
  check = tf.debugging.Assert(
      tf.reduce_all(valid),
      ["importance_scores: every sampled record's clipping threshold must be a "
       "finite number > 0; got thresholds", thresholds, "mask", mask], summarize=20)
  with tf.control_dependencies([check]):
    widths = tf.where(mask, thresholds, tf.zeros_like(thresholds))

  # Ascending loss, ties by original index (stable sort); unsampled rows last.
  # Their losses are replaced first so NaN/garbage padding cannot perturb it.
  keys = tf.where(mask, losses, tf.zeros_like(losses))
  by_loss = tf.argsort(keys, stable=True)
  unsampled_last = tf.argsort(tf.cast(tf.logical_not(tf.gather(mask, by_loss)), tf.int32),
                              stable=True)
  perm = tf.gather(by_loss, unsampled_last)

  sorted_widths = tf.gather(widths, perm)
  sorted_mask = tf.gather(mask, perm)
  # x_0 = 0, x_k = C_(1) + … + C_(k); F(x_{k-1}) and F(x_k) read the same x's, so
  # the differences telescope exactly; unsampled rows have width 0 and ΔF = 0.
  ends = tf.pad(tf.cumsum(sorted_widths), [[1, 0]])
  big_f = tf.cast(tif(ends), tf.float64)
  delta_f = big_f[1:] - big_f[:-1]
  starts = ends[:-1]
  safe_widths = tf.where(sorted_mask, sorted_widths, tf.ones_like(sorted_widths))
  rho = tf.where(starts >= tf.constant(tif.gamma, tf.float64),
                 tf.ones_like(delta_f), delta_f / safe_widths)
  rho = tf.where(sorted_mask, rho, tf.zeros_like(rho))
  return perm, rho, sorted_mask


def _unsort(perm: tf.Tensor, sorted_values: tf.Tensor) -> tf.Tensor:
  return tf.gather(sorted_values, tf.math.invert_permutation(perm))


def unclipped_importance_scores(
    losses: tf.Tensor,
    thresholds: tf.Tensor,
    mask: Optional[tf.Tensor] = None,
    gamma: Optional[float] = None,
    antiderivative: Optional[Union[TailImportance, Antiderivative]] = None,
) -> tf.Tensor:
  """The float64 scores (F(x_k) − F(x_{k−1}))/C_(k) before any check or clip.

  Same arguments as :func:`importance_scores`; exposed for diagnostics and tests.
  """
  tif = resolve_tail_importance(gamma, antiderivative)
  perm, rho, _ = _sorted_unclipped_scores(losses, thresholds, mask, tif)
  return _unsort(perm, rho)


def importance_scores(
    losses: tf.Tensor,
    thresholds: tf.Tensor,
    mask: Optional[tf.Tensor] = None,
    gamma: Optional[float] = None,
    antiderivative: Optional[Union[TailImportance, Antiderivative]] = None,
) -> tf.Tensor:
  """INO-SGD importance scores ρ ∈ [0, 1] of a batch (Alg. 1 lines 5-8, Def. C.2).

  Sampled records are sorted by ascending loss — a *stable* sort, so records
  with equal losses are ordered by their index in ``losses`` (the lower index
  counts as the lower loss, i.e. sits closer to the tail and never gets a
  larger ρ than an equal-loss record after it). With x_k the running sum of the
  sorted thresholds, ρ_(k) = (F(x_k) − F(x_{k−1}))/C_(k), computed in float64
  and scattered back to the input order. Slots starting at x ≥ γ get exactly 1;
  γ = 0 gives exactly 1 for every sampled record (IDP-SGD).

  Records with ``mask`` False (not sampled, or padding) get no slot: they add
  nothing to the running sum, do not change anyone else's ρ, and get ρ = 0.
  Their losses and thresholds are ignored (may be 0, negative or NaN).

  Plain TF ops only (no XLA needed); works inside ``tf.function`` with an
  unknown batch size, including B = 0. The losses should be computed under
  ``tf.stop_gradient`` by the caller if they come from a tape (the scores are
  weights, not part of the objective). NaN losses of sampled records give an
  unspecified order (still a permutation, so ρ stays valid).

  Args:
    losses: [B] per-example losses (any float dtype; used only for ordering).
    thresholds: [B] (or a scalar, broadcast) clipping thresholds C_{o(d)}.
      Every sampled record's must be finite and > 0 (runtime assertion).
    mask: optional [B] bool, True for records in the batch. Default: all.
    gamma: tail length γ ≥ 0. Required unless ``antiderivative`` is a
      :class:`TailImportance` (then optional and must match its γ).
    antiderivative: the TIF. None: Beta(1, 1) with tail length ``gamma``; a
      :class:`TailImportance` (e.g. :func:`beta_antiderivative`,
      :func:`steps_antiderivative`); or any callable F (see
      :class:`TailImportance` for the contract), together with ``gamma``.

  Returns:
    ρ, float32 [B], 0 ≤ ρ ≤ 1.

  Raises:
    ValueError: for invalid (gamma, antiderivative) (checked in Python).
    tf.errors.InvalidArgumentError: (at run time) for a non-positive or
      non-finite threshold of a sampled record, or if an unclipped score leaves
      [−ε, 1 + ε] or the sorted scores decrease by more than ε
      (ε = ``OVERSHOOT_TOLERANCE``), which means F is not convex with slope
      in [0, 1].
  """
  tif = resolve_tail_importance(gamma, antiderivative)
  perm, rho, sorted_mask = _sorted_unclipped_scores(losses, thresholds, mask, tif)
  eps = OVERSHOOT_TOLERANCE
  sampled = tf.boolean_mask(rho, sorted_mask)  # the sampled rows, which come first
  checks = [
      tf.debugging.assert_less_equal(
          rho, tf.constant(1.0 + eps, tf.float64),
          message=f"importance score > 1 + {eps}: the TIF {tif.name}'s antiderivative "
                  "must have slope <= 1 (bif <= 1)"),
      tf.debugging.assert_greater_equal(
          rho, tf.constant(-eps, tf.float64),
          message=f"importance score < -{eps}: the TIF {tif.name}'s antiderivative "
                  "must be non-decreasing (bif >= 0)"),
      tf.debugging.assert_greater_equal(
          sampled[1:], sampled[:-1] - eps,
          message=f"importance scores decrease with loss: the TIF {tif.name}'s "
                  "antiderivative must be convex (f_tail non-increasing)"),
  ]
  with tf.control_dependencies(checks):
    rho = tf.clip_by_value(rho, 0.0, 1.0)
  return tf.cast(_unsort(perm, rho), tf.float32)


def ino_example_weight_fn(
    gamma: Optional[float] = None,
    antiderivative: Optional[Union[TailImportance, Antiderivative]] = None,
) -> Callable[[tf.Tensor, tf.Tensor], tf.Tensor]:
  """INO-SGD as the DP-SGD step's per-example weight hook (Alg. 1 lines 5-13).

  Returns ``(losses, thresholds) -> ρ`` for ``example_weight_fn`` of
  :func:`tff_idp.rpdp.dp_sgd.build_local_dp_sgd` (and the record-level
  client work). The step applies ρ *after* clipping each sampled record to
  its own threshold, then adds the unchanged noise and divides by the
  expected batch size: sampling, noise and accounting stay IDP-SGD's
  (Thm 3.3). The step passes only the sampled records, so no mask is needed.
  γ = 0 is IDP-SGD exactly.
  """
  tif = resolve_tail_importance(gamma, antiderivative)

  def weight_fn(losses: tf.Tensor, thresholds: tf.Tensor) -> tf.Tensor:
    return importance_scores(losses, thresholds, antiderivative=tif)

  return weight_fn


def local_step_weights(local_algorithm: str, gamma: float, alpha: float, beta: float
                       ) -> tuple[Optional[Callable[[tf.Tensor, tf.Tensor], tf.Tensor]], str]:
  """rPDP-FL's local step's weight hook and its label: none for dp_sgd, INO-SGD's for ino_sgd.

  ``ino_sgd`` (``experiments.rpdp --local_algorithm=ino_sgd``) weights the
  clipped gradients of rPDP-FL's local DP-SGD step with the Beta(α, β) tail of
  length γ (:func:`ino_example_weight_fn` of :func:`beta_antiderivative`; Alg. 1,
  C.2.5); its label, ``ino_sgd(γ=<γ>, <TIF>)``, names the local algorithm in
  the printed line and the summary. A bad γ, α or β raises ValueError naming
  ``--ino_gamma``/``--ino_alpha``/``--ino_beta``. ``dp_sgd``: ``(None, "dp_sgd")``.
  """
  if local_algorithm != "ino_sgd":
    return None, local_algorithm
  try:
    tif = beta_antiderivative(alpha, beta, gamma)
  except ValueError as e:
    raise ValueError(f"--ino_gamma/--ino_alpha/--ino_beta: {e}") from None
  return ino_example_weight_fn(antiderivative=tif), f"ino_sgd(γ={gamma:g}, {tif.name})"
