"""S-APES sparsification (APES paper Sec. 3.3, Alg. 2), in TF: two selections.

One client, one flattened update x ∈ ℝ^d, budget ε_i and sparsity b; every
randomized coordinate uses ε' = ε_i / b (:func:`per_coordinate_epsilon`),
λ' = 2C/ε'. Both selections report all d coordinates (padding keeps the
per-coordinate shuffle at n reports), every one in [−C, C].

``selection="random"`` (the default; sound, ε^{ul} = b·ε' = ε_i):

1. I_b = b coordinates chosen uniformly at random, from the client's
   *secret* seed and nothing else (data-independent);
2. r_k = CLap(clip(x_k), λ', C) for k ∈ I_b and r_k = CLap(0, λ', C) for
   k ∉ I_b (dummy padding).

  Given I_b the release is b independent ε'-LDP draws plus data-independent
  noise, so it is b·ε'-LDP; averaging over the data-independent I_b keeps
  that (joint convexity of the hockey-stick divergence). The shuffled
  per-coordinate releases compose over b coordinates per round (given every
  user's I_b only u's b kept coordinates depend on u's data; see
  docs/apes.md and :mod:`tff_idp.accounting.shuffle.ledger`).

``selection="top_b"`` (the paper's post-top-b Alg. 2; kept for comparison,
labelled in every table):

1. y = CLap(clip(x), λ', C) on *every* coordinate;
2. I_b = the b coordinates with the largest |y_k|;
3. k ∉ I_b is replaced by fresh CLap(0, λ', C) noise.

  The selection is post-processing, but of all d perturbed values, which
  together are d·ε'-LDP, not b·ε'. The released vector leaks every input
  coordinate through which coordinates survive ("every reported value is
  near 0" is likelier when every input is 0): its exact max log density
  ratio exceeds b·ε' (d = 4, b = 1, ε' = 1: 1.08 > 1; d = 6: 1.55) and tends
  to d·(ε'/2 + ln S(C)/S(0)) as the reports go to 0
  (:mod:`tff_idp.accounting.shuffle.sparsified_density`). The ledger charges
  it the sound d·ε' and prints the paper's b·ε' only as "as published".

The reference code used ε_i/topk with topk = int((d + dim_y)/rate), which
counts the label dimension (1572 instead of 1570 for d = 7850), and the
paper's Alg. 2 writes the scale dΔf/ε_i (defect D10 of the notes); here ε'
is ε_i / b with b exactly as given.

Randomness: the client's seed is split (``stateless_split``) into two
streams. ``random``: one draws the b indices (``top_k`` of d uniform keys),
the other the d Clip-Laplace values. ``top_b``: one draws y, the other the
padding, so the padding is independent of y (``tf.math.top_k`` on |y|; ties
have probability 0).
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from tff_idp.errors import ToolkitValueError
from tff_idp.apes import clip_laplace, debias

__all__ = ["SELECTIONS", "check_selection", "per_coordinate_epsilon", "sparsify_perturb"]

# "random": data-independent b-subset (sound at b·ε'); "top_b": the paper's
# post-top-b selection (sound only at d·ε').
SELECTIONS = ("random", "top_b")


def check_selection(selection: str) -> str:
  """Raises ``ToolkitValueError`` unless ``selection`` is one of :data:`SELECTIONS`."""
  if selection not in SELECTIONS:
    raise ToolkitValueError(
        f"selection={selection!r} must be one of {SELECTIONS}: 'random' (data-independent "
        "b-subset, ε^{ul} = b·ε') or 'top_b' (the paper's post-top-b, ε^{ul} = d·ε').")
  return selection


def per_coordinate_epsilon(epsilon, keep: int):
  """ε' = ε_i / b, the budget of each Clip-Laplace draw of S-APES."""
  if isinstance(epsilon, (int, float, np.floating, np.integer)):
    clip_laplace.check_epsilon(epsilon)
    return float(epsilon) / int(keep)
  return tf.cast(epsilon, tf.float32) / tf.constant(float(keep), tf.float32)


def _one_hot_mask(indices: tf.Tensor, d: int) -> tf.Tensor:
  """A bool [d] mask that is True exactly at ``indices``."""
  keep = tf.shape(indices)[0]
  return tf.scatter_nd(indices[:, None], tf.ones([keep], tf.bool), [d])


def sparsify_perturb(values, epsilon, clip: float, keep: int, seed,
                     selection: str = "random") -> tf.Tensor:
  """Alg. 2 for one client: b coordinates at ε/b each, the rest CLap(0) padding.

  Args:
    values: float tensor, rank 1 (the flattened update, d = its length,
      static).
    epsilon: the client's budget ε_i (scalar), split over b coordinates.
    clip: C > 0.
    keep: b, 1 ≤ b ≤ d.
    seed: shape-[2] int seed (secret; see ``clip_laplace.client_seed``).
    selection: "random" (default, data-independent b-subset, b·ε'-LDP) or
      "top_b" (the paper's post-top-b, only d·ε'-LDP); module docstring.

  Returns:
    float32 [d] in [−C, C].
  """
  check_selection(selection)
  values = tf.convert_to_tensor(values)
  if values.shape.rank != 1 or values.shape[0] is None:
    raise ToolkitValueError(
        f"sparsify_perturb takes a flat vector of static length; got shape {values.shape}.")
  d = int(values.shape[0])
  keep = debias.check_keep(keep, d)
  eps = per_coordinate_epsilon(epsilon, keep)
  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 2)
  if selection == "random":
    if keep < d:
      keys = tf.random.stateless_uniform([d], seed=seeds[0], dtype=tf.float32)
      _, chosen = tf.math.top_k(keys, k=keep, sorted=False)
      values = tf.where(_one_hot_mask(chosen, d), tf.cast(values, tf.float32), 0.0)
    return clip_laplace.perturb(values, eps, clip, seeds[1])
  perturbed = clip_laplace.perturb(values, eps, clip, seeds[0])
  if keep == d:
    return perturbed
  padding = clip_laplace.perturb(tf.zeros_like(perturbed), eps, clip, seeds[1])
  _, kept = tf.math.top_k(tf.abs(perturbed), k=keep, sorted=False)
  return tf.where(_one_hot_mask(kept, d), perturbed, padding)
