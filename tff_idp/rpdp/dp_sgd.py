"""The local update of rPDP-FL as plain TensorFlow (Alg. 3, lines 9-16).

For each of τ local steps, a client

1. Poisson-samples its records, record j with its own rate q_j
   (:func:`poisson_record_mask`);
2. computes the per-example gradients of the sampled records, vectorised
   over the batch (:mod:`tff_idp.rpdp.per_example`; no Python loop
   over examples and no micro-batches of one);
3. clips each to L₂ norm ≤ L_j (one L, or each record's own threshold, e.g.
   its owner's C_{o(j)} in INO-SGD Alg. 1 line 11) and then (optionally)
   multiplies it by a per-example weight w_j ∈ [0, 1] computed from the
   batch's losses and thresholds (:func:`clipped_gradient_sum`). Weights in
   [0, 1] applied after clipping keep record j's sensitivity at L_j, so the
   privacy analysis is unchanged; this is the hook for INO-SGD's importance
   scores (:mod:`tff_idp.ino_sgd.importance`, INO-SGD Thm 3.3);
4. sums, adds N(0, σ²L²) to every coordinate, and divides by the **expected**
   batch size Σ_j q_j. The realised batch size |S| would depend on whether a
   given record was sampled, so dividing by it changes the sum's sensitivity
   in a data-dependent way and the Gaussian analysis of Lemma 6 would no
   longer apply; Σ_j q_j is fixed before sampling;
5. takes one optimizer step.

**Replaced records** (the hook an empirical privacy audit plugs into, e.g.
:class:`tff_idp.audit.record_canaries.CanaryReplacement`). With a
``record_replacement`` the update also takes a per-record ``canary_index``
(−1 for a real record, else the row of the replacement's table, ``0 ≤ row <
record_replacement.num_rows``). A replaced record is Poisson-sampled at its
own q_j like any record, but in step 3 its clipped gradient is *replaced*
(:class:`tff_idp.rpdp.per_example.ExampleReplacement`) by what the hook
returns (for gradient canaries: L_j·u_j, a contribution of exactly the clip
norm). Replaced records add nothing to the normaliser of step 4, which stays
the real records' Σ q_j, and nothing to the loss / clipped / sampled
statistics. Real records are unaffected: without a replacement the step is
the plain one, and with one the real records' clipped gradients, sampling
and noise are the same.

Randomness is stateless, derived from a per-client seed that travels with the
data, so a round can be replayed bit for bit (and resumed exactly) by whoever
holds that seed: the client. The seed must be secret (see
``tff_idp.engine.privacy_randomness``); a predictable seed makes the noise removable.
"""
from __future__ import annotations

from typing import Callable, Optional, Protocol

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.rpdp import per_example

LossFn = per_example.LossFn
ExampleWeightFn = per_example.ExampleWeightFn

_SAMPLING_STREAM = 0
_NOISE_STREAM = 1


def sparse_categorical_crossentropy(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
  """Per-example cross-entropy of integer labels and logits (shape [B])."""
  return tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)


def poisson_record_mask(rates: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
  """Independent Bernoulli(q_j) inclusion of every record (non-uniform Poisson sampling)."""
  u = tf.random.stateless_uniform(tf.shape(rates), seed=seed, dtype=rates.dtype)
  return u < rates


def keras_model_of(model: tff.learning.models.VariableModel) -> Optional[tf.keras.Model]:
  """The Keras model inside a ``tff.learning.models.from_keras_model`` model, if any."""
  return getattr(model, "_keras_model", None)


def clipped_gradient_sum(model: tff.learning.models.VariableModel, x: tf.Tensor,
                         y: tf.Tensor, clip_norm: per_example.ClipNorm, loss_fn: LossFn,
                         example_weight_fn: Optional[ExampleWeightFn] = None,
                         force_generic: bool = False,
                         replacement: Optional[Callable[[list], per_example.ExampleReplacement]]
                         = None):
  """Σ_j w_j · clip_{L_j}(∇ℓ(x_j, y_j)) over a batch, vectorised over examples.

  ``clip_norm`` is one L or a [B] tensor of per-example thresholds L_j;
  ``example_weight_fn(losses, thresholds)`` gives w_j ∈ [0, 1].
  ``replacement(variables)``, if given, returns the
  :class:`~tff_idp.rpdp.per_example.ExampleReplacement` (keyed by the
  variables' refs) applied after clipping, in both paths.

  Uses the layer-wise fast path of :mod:`tff_idp.rpdp.per_example`
  when the model is a supported Keras ``Sequential``, else ``vectorized_map``.

  Returns:
    (list of summed clipped gradients in ``model.trainable_variables`` order;
     per-example losses [B]; per-example gradient norms [B]).
  """
  variables = list(model.trainable_variables)
  keras_model = keras_model_of(model)
  replaced = replacement(variables) if replacement is not None else None
  if not force_generic and per_example.supports_layerwise(keras_model):
    sums, losses, norms = per_example.layerwise_clipped_sum(
        keras_model, x, y, clip_norm, loss_fn, example_weight_fn, replaced)
  else:
    sums, losses, norms = per_example.vectorized_clipped_sum(
        lambda xb: model.predict_on_batch(xb, training=True), variables, x, y,
        clip_norm, loss_fn, example_weight_fn, replaced)
  return [sums[v.ref()] for v in variables], losses, norms


def _record_thresholds(q: tf.Tensor, clip_norms: Optional[tf.Tensor],
                       clip_norm: float) -> tf.Tensor:
  """Each record's clip threshold: ``clip_norms`` (checked) or ``clip_norm`` for all."""
  if clip_norms is None:
    return tf.fill(tf.shape(q), tf.constant(float(clip_norm), tf.float32))
  thresholds = tf.cast(clip_norms, tf.float32)
  checks = [
      tf.debugging.assert_equal(tf.shape(thresholds), tf.shape(q),
                                message="give one clip threshold per record"),
      tf.debugging.assert_greater(thresholds, 0.0, message="clip thresholds must be > 0"),
      tf.debugging.assert_less_equal(
          thresholds, tf.constant(float(clip_norm), tf.float32),
          message="a record's clip threshold must not exceed clip_norm: the noise is "
                  "σ·clip_norm, so a larger threshold would be under-noised"),
  ]
  with tf.control_dependencies(checks):
    return tf.identity(thresholds)


class RecordReplacement(Protocol):
  """The replaced-record hook of :func:`build_local_dp_sgd` (see module doc).

  ``num_rows`` is the size of its table (valid ``canary_index`` values are
  −1 and 0 … num_rows − 1). Called with a batch's int32 [B] ``canary_index``
  (−1 = real record) and float32 [B] clip thresholds L_j, it returns a
  function of the trainable variables giving the batch's
  :class:`~tff_idp.rpdp.per_example.ExampleReplacement`.
  """
  num_rows: int

  def __call__(self, canary_index: tf.Tensor, thresholds: tf.Tensor
               ) -> Callable[[list], per_example.ExampleReplacement]: ...


def noise_std_of(local_steps: int, noise_multiplier: float, clip_norm: float) -> float:
  """σ·L, the noise std of every local step, after checking the three settings (0: no noise)."""
  if local_steps < 1:
    raise ValueError(f"local_steps={local_steps!r} must be >= 1.")
  if noise_multiplier < 0:
    raise ValueError(f"noise_multiplier={noise_multiplier!r} must be >= 0 (0 = no noise).")
  if not clip_norm > 0:
    raise ValueError(f"clip_norm={clip_norm!r} must be > 0 (inf = no clipping).")
  if noise_multiplier > 0 and not np.isfinite(clip_norm):
    raise ValueError("noise needs a finite clip_norm: σ·L is the noise std.")
  return float(noise_multiplier) * float(clip_norm) if noise_multiplier > 0 else 0.0


def build_local_dp_sgd(model: tff.learning.models.VariableModel,
                       optimizer: tff.learning.optimizers.Optimizer,
                       local_steps: int, noise_multiplier: float, clip_norm: float,
                       loss_fn: LossFn = sparse_categorical_crossentropy,
                       example_weight_fn: Optional[ExampleWeightFn] = None,
                       record_replacement: Optional[RecordReplacement] = None):
  """Returns a ``tf.function`` running τ steps of record-level Poisson DP-SGD.

  The returned function takes ``(initial_weights, x, y, q, seed,
  clip_norms=None)``: the model weights
  (``tff.learning.models.ModelWeights``), all of the client's records
  (features ``x``, labels ``y``), their current rates ``q`` (0 = excluded),
  an int64[2] seed, and optionally each record's own clip threshold C_j
  (float32 [N], each in (0, ``clip_norm``]; default: ``clip_norm`` for every
  record). The noise std is always σ·``clip_norm``, the base threshold: a
  record clipped to C_j ≤ L then has effective multiplier σ·L/C_j, which is
  how SCALE-style owners are accounted. It returns ``(delta, stats)`` where ``delta`` is
  ``initial − final`` trainable weights (TFF's model-delta convention) and
  ``stats`` holds sums for metrics: loss over sampled examples, sampled
  examples, clipped examples, Σ_j q_j and steps taken.

  With a ``record_replacement`` (module doc) the function also takes
  ``canary_index`` (int32 [N], −1 for real records; required then): the
  other records are sampled at their q_j and contribute what the hook
  returns. They are left out of Σ_j q_j (the normaliser and
  ``stats["expected_batch"]``) and of the loss, sampled and clipped counts.
  """
  noise_std = noise_std_of(local_steps, noise_multiplier, clip_norm)

  @tf.function
  def local_update(initial_weights, x, y, q, seed, clip_norms=None, canary_index=None):
    model_weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda v, t: v.assign(t), model_weights, initial_weights)
    trainable = tuple(model_weights.trainable)
    q = tf.cast(q, tf.float32)
    thresholds = _record_thresholds(q, clip_norms, clip_norm)
    if record_replacement is None:
      if canary_index is not None:
        raise ValueError("canary_index needs a local update built with a record_replacement.")
      real_q = q
    else:
      if canary_index is None:
        raise ValueError("a local update built with a record_replacement needs canary_index "
                         "(−1 for every real record).")
      canary_index = tf.cast(canary_index, tf.int32)
      with tf.control_dependencies([
          tf.debugging.assert_equal(tf.shape(canary_index), tf.shape(q),
                                    message="give one canary index per record"),
          tf.debugging.assert_less(canary_index, record_replacement.num_rows,
                                   message="canary index beyond the replacement's rows"),
          tf.debugging.assert_greater_equal(canary_index, -1,
                                            message="canary index must be >= -1")]):
        canary_index = tf.identity(canary_index)
      # Canaries are extra records on top of the real ones: the normaliser stays
      # the real records' expected batch.
      real_q = tf.where(canary_index >= 0, tf.zeros_like(q), q)
    expected_batch = tf.reduce_sum(real_q)
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)
    opt_state = optimizer.initialize(specs)
    loss_sum = tf.constant(0.0)
    sampled = tf.constant(0.0)
    clipped = tf.constant(0.0)
    steps = tf.constant(0.0)
    if expected_batch > 0.0:
      for step in tf.range(local_steps):
        step_seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64))
        mask = poisson_record_mask(
            q, tf.random.experimental.stateless_fold_in(step_seed, _SAMPLING_STREAM))
        xb = tf.boolean_mask(x, mask)
        yb = tf.boolean_mask(y, mask)
        cb = tf.boolean_mask(thresholds, mask)
        n = tf.shape(yb)[0]
        if record_replacement is None:
          replacement = None
          real_b = tf.ones([n], tf.float32)
        else:
          index_b = tf.boolean_mask(canary_index, mask)
          replacement = record_replacement(index_b, cb)
          real_b = tf.cast(index_b < 0, tf.float32)
        if n > 0:
          grad_sums, losses, norms = clipped_gradient_sum(
              model, xb, yb, cb, loss_fn, example_weight_fn, replacement=replacement)
          if record_replacement is None:
            loss_sum += tf.reduce_sum(losses)
            clipped += tf.reduce_sum(tf.cast(norms > cb, tf.float32))
          else:
            loss_sum += tf.reduce_sum(losses * real_b)
            clipped += tf.reduce_sum(tf.cast(norms > cb, tf.float32) * real_b)
        else:
          grad_sums = [tf.zeros_like(v) for v in trainable]
        if record_replacement is None:
          sampled += tf.cast(n, tf.float32)
        else:
          sampled += tf.reduce_sum(real_b)
        noise_seed = tf.random.experimental.stateless_fold_in(step_seed, _NOISE_STREAM)
        noisy = []
        for k, g in enumerate(grad_sums):
          z = tf.random.stateless_normal(
              tf.shape(g), seed=tf.random.experimental.stateless_fold_in(noise_seed, k),
              stddev=noise_std, dtype=g.dtype)
          noisy.append((g + z) / expected_batch)
        opt_state, new_weights = optimizer.next(
            opt_state, tuple(v.read_value() for v in trainable), tuple(noisy))
        for v, w in zip(trainable, new_weights):
          v.assign(w)
        steps += 1.0
    delta = tf.nest.map_structure(tf.subtract, initial_weights.trainable,
                                  [v.read_value() for v in trainable])
    stats = dict(loss_sum=loss_sum, sampled=sampled, clipped=clipped,
                 expected_batch=expected_batch * steps, steps=steps)
    return delta, stats

  return local_update
