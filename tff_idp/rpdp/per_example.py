"""Per-example clipped gradient sums, vectorised over the batch.

Two implementations of Σ_j w_j · clip_{L_j}(∇ℓ_j) with the same result. The
clip threshold L_j is one number for the batch, or one per example (INO-SGD
and SCALE-style owners: record j is clipped to its owner's C_{o(j)}). The
weights w_j ∈ [0, 1] are applied *after* clipping, so record j's contribution
stays within L_j and the sum's add/remove sensitivity is unchanged
(tf-privacy's ``weight_batch`` weights before clipping, which clipping undoes):

* :func:`layerwise_clipped_sum` (fast path): for Keras ``Sequential`` models
  whose trainable layers are ``Dense`` (on flat inputs) and ``Conv2D``, and
  whose other layers have no trainable weights. One forward pass records each
  trainable layer's input a_j and pre-activation z_j; one backward pass of
  Σ_j ℓ_j gives ∂ℓ_j/∂z_j for every example at once (ℓ_j depends on example j
  only). The per-example weight gradients are then outer products
  (Dense: a_j ⊗ ∂z_j, whose squared norm is ‖a_j‖²‖∂z_j‖² without forming
  it) or patch correlations (Conv2D: im2col patches of a_j against ∂z_j),
  as in Goodfellow (2015) and Opacus. Cost: about one extra backward pass.
* :func:`vectorized_clipped_sum` (any model): ``tf.vectorized_map`` of a
  single-example gradient, which TensorFlow's pfor turns into batched ops.

Neither loops over examples in Python nor uses micro-batches of one.

Both paths also take an optional :class:`ExampleReplacement`, applied after
clipping and weighting: the replaced examples' own clipped gradients are
dropped (factor 0) and given vectors are added in their place. This is how
the record-level gradient canaries of the empirical privacy audit (Andrew
et al., "One-shot Empirical Privacy Estimation for Federated Learning",
ICLR 2024) enter the one DP-SGD step: a sampled canary contributes exactly
L_j·u_j, its clip norm times its fixed unit direction
(:mod:`tff_idp.audit.record_canaries`). Without a replacement nothing changes.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Optional, Union

import tensorflow as tf

LossFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
ExampleWeightFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
"""``(per-example losses [B], per-example clip thresholds [B]) -> weights [B] in [0, 1]``."""
ClipNorm = Union[float, tf.Tensor]
"""One clip threshold for the batch, or a [B] tensor of per-example thresholds."""


class ExampleReplacement(NamedTuple):
  """Examples whose clipped gradient is replaced by a given vector, after clipping.

  Attributes:
    replaced: bool [B], the examples whose own (clipped, weighted) gradient is
      dropped from the sum.
    sums: ``{var.ref(): tensor}``, Σ over the replaced examples of their
      replacement vectors, per trainable variable (added to the sum). Each
      replacement vector must have norm <= the example's clip threshold for
      the sum's sensitivity to stay L_j (canaries: exactly L_j·u_j, ‖u_j‖ = 1).
  """
  replaced: tf.Tensor
  sums: Mapping[Any, tf.Tensor]


def _replace(factors: tf.Tensor, replacement: Optional[ExampleReplacement]) -> tf.Tensor:
  if replacement is None:
    return factors
  return tf.where(replacement.replaced, tf.zeros_like(factors), factors)


def _add_replacements(sums: dict, replacement: Optional[ExampleReplacement]) -> dict:
  if replacement is None:
    return sums
  return {ref: g + tf.cast(replacement.sums[ref], g.dtype) for ref, g in sums.items()}


def _clip_factors(sq_norms: tf.Tensor, losses: tf.Tensor, clip_norm: ClipNorm,
                  example_weight_fn: Optional[ExampleWeightFn]) -> tf.Tensor:
  norms = tf.sqrt(sq_norms)
  clip_norms = tf.broadcast_to(tf.cast(clip_norm, norms.dtype), tf.shape(norms))
  factors = tf.minimum(1.0, clip_norms / tf.maximum(norms, 1e-12))
  if example_weight_fn is not None:
    weights = tf.cast(example_weight_fn(tf.stop_gradient(losses), clip_norms),
                      factors.dtype)
    with tf.control_dependencies([
        tf.debugging.assert_greater_equal(
            weights, 0.0, message="example weights must lie in [0, 1]"),
        tf.debugging.assert_less_equal(
            weights, 1.0, message="example weights must lie in [0, 1]"),
    ]):
      factors = factors * weights
  return factors


def _is_trainable_free(layer: tf.keras.layers.Layer) -> bool:
  return not layer.trainable_weights


def supports_layerwise(keras_model: Optional[tf.keras.Model]) -> bool:
  """Whether :func:`layerwise_clipped_sum` handles this model exactly."""
  if not isinstance(keras_model, tf.keras.Sequential):
    return False
  for layer in keras_model.layers:
    if _is_trainable_free(layer):
      continue
    if isinstance(layer, tf.keras.layers.Dense):
      continue
    if (type(layer) is tf.keras.layers.Conv2D and layer.data_format == "channels_last"  # pylint: disable=unidiomatic-typecheck
        and tuple(layer.dilation_rate) == (1, 1) and layer.groups == 1
        and layer.padding in ("valid", "same")):
      continue
    return False
  return True


def layerwise_clipped_sum(keras_model: tf.keras.Sequential, x: tf.Tensor, y: tf.Tensor,
                          clip_norm: ClipNorm, loss_fn: LossFn,
                          example_weight_fn: Optional[ExampleWeightFn] = None,
                          replacement: Optional[ExampleReplacement] = None):
  """Fast path; see module doc. Returns ``({var.ref(): summed grad}, losses, norms)``."""
  recorded = []  # (layer, input, pre-activation)
  with tf.GradientTape() as tape:
    h = x
    for layer in keras_model.layers:
      if _is_trainable_free(layer):
        h = layer(h, training=True)
        continue
      if isinstance(layer, tf.keras.layers.Dense):
        if h.shape.rank != 2:
          raise ValueError(f"layer {layer.name}: Dense on rank-{h.shape.rank} inputs "
                           "is not supported by the layer-wise path.")
        z = tf.matmul(h, layer.kernel)
      else:
        z = tf.nn.conv2d(h, layer.kernel, strides=layer.strides,
                         padding=layer.padding.upper())
      tape.watch(z)
      inp = h
      if layer.use_bias:
        z_out = z + layer.bias
      else:
        z_out = z
      recorded.append((layer, inp, z))
      h = layer.activation(z_out)
    losses = loss_fn(y, h)
    total = tf.reduce_sum(losses)
  dzs = tape.gradient(total, [z for _, _, z in recorded])
  batch = tf.shape(losses)[0]
  per_layer = []
  sq_norms = tf.zeros([batch], dtype=losses.dtype)
  for (layer, inp, _), dz in zip(recorded, dzs):
    if isinstance(layer, tf.keras.layers.Dense):
      sq_k = tf.reduce_sum(tf.square(inp), axis=1) * tf.reduce_sum(tf.square(dz), axis=1)
      per_layer.append(("dense", layer, inp, dz, None))
      sq_norms += sq_k
      if layer.use_bias:
        sq_norms += tf.reduce_sum(tf.square(dz), axis=1)
    else:
      kh, kw = layer.kernel_size
      sh, sw = layer.strides
      patches = tf.image.extract_patches(inp, sizes=[1, kh, kw, 1], strides=[1, sh, sw, 1],
                                         rates=[1, 1, 1, 1], padding=layer.padding.upper())
      patches = tf.reshape(patches, [batch, -1, kh * kw * inp.shape[-1]])
      dz_flat = tf.reshape(dz, [batch, -1, dz.shape[-1]])
      grads = tf.einsum("bpk,bpc->bkc", patches, dz_flat)
      sq_norms += tf.reduce_sum(tf.square(grads), axis=[1, 2])
      bias_grads = tf.reduce_sum(dz_flat, axis=1)
      if layer.use_bias:
        sq_norms += tf.reduce_sum(tf.square(bias_grads), axis=1)
      per_layer.append(("conv", layer, grads, bias_grads, None))
  factors = _replace(_clip_factors(sq_norms, losses, clip_norm, example_weight_fn),
                     replacement)
  sums = {}
  for kind, layer, a, b, _ in per_layer:
    if kind == "dense":
      sums[layer.kernel.ref()] = tf.einsum("b,bi,bo->io", factors, a, b)
      if layer.use_bias:
        sums[layer.bias.ref()] = tf.einsum("b,bo->o", factors, b)
    else:
      sums[layer.kernel.ref()] = tf.reshape(
          tf.einsum("b,bkc->kc", factors, a), tf.shape(layer.kernel))
      if layer.use_bias:
        sums[layer.bias.ref()] = tf.einsum("b,bc->c", factors, b)
  return _add_replacements(sums, replacement), losses, tf.sqrt(sq_norms)


def vectorized_clipped_sum(predict_fn: Callable[[tf.Tensor], tf.Tensor],
                           variables: list, x: tf.Tensor, y: tf.Tensor,
                           clip_norm: ClipNorm, loss_fn: LossFn,
                           example_weight_fn: Optional[ExampleWeightFn] = None,
                           replacement: Optional[ExampleReplacement] = None):
  """Generic path: per-example gradients with ``tf.vectorized_map``.

  Returns ``({var.ref(): summed grad}, losses, norms)``.
  """

  def one_example(args):
    xi, yi = args
    with tf.GradientTape() as tape:
      loss = loss_fn(yi[None], predict_fn(xi[None]))[0]
    grads = tape.gradient(loss, variables,
                          unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return loss, grads

  losses, grads = tf.vectorized_map(one_example, (x, y))
  batch = tf.shape(losses)[0]
  sq_norms = tf.add_n([tf.reduce_sum(tf.reshape(tf.square(g), [batch, -1]), axis=1)
                       for g in grads])
  factors = _replace(_clip_factors(sq_norms, losses, clip_norm, example_weight_fn),
                     replacement)
  sums = {v.ref(): tf.tensordot(factors, g, axes=[[0], [0]])
          for v, g in zip(variables, grads)}
  return _add_replacements(sums, replacement), losses, tf.sqrt(sq_norms)
