"""A cohort's local training on stacked per-client weights: the families' shared vectorized loop (issue 35).

:func:`local_steps` runs the local SGD of every client of a chunk at once,
inside a family's ``tf.function``: step s is taken by the clients that have a
step s (:mod:`tff_idp.engine.cohort_stack` lays the steps out as a padded,
masked gather index), the others hold their weights and optimizer state.
Each client's result is what its own client computation gives, within float
tolerance:

* its loss is the mean over its real examples of the model head's Keras loss
  (padding is masked out of the loss, the gradient and every statistic);
* its gradient is its own (the clients' loss terms share no weight, so the
  gradient of their sum is every client's gradient at once);
* an optional FedProx proximal term μ·(w − w₀) is added to the gradient, as
  FedProx's local solver does (Li et al. 2020; :mod:`tff_idp.apes.fedprox`);
* the client optimizer is any element-wise ``tff.learning.optimizers``
  optimizer, run on stacked weights: its per-weight state is stacked and held
  where a client takes no step; its scalar step count is shared, which is
  exact because every client's steps are a prefix of the chunk's;
* its update is Δ = initial − final, zeroed if any entry is not finite (as
  TFF's model-delta client works do), with a ``finite`` flag.

There is no randomness and no privacy step here: the families add theirs
(IDP-FedAvg: none at the client; APES: the client's local randomizer on Δ).

Models served: :class:`~tff_idp.engine.stacked_dense.StackedDenseModel` of a
``model_fn`` built by :func:`tff_idp.models.tff_model_fn`, which records its
Keras builder and head on the ``model_fn`` (:func:`stacked_model_of`).
"""
from __future__ import annotations

import collections
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.engine.stacked_dense import StackedDenseModel

ACCURACY_METRIC = {"softmax": "sparse_categorical_accuracy", "sigmoid": "binary_accuracy"}
"""The accuracy metric the toolkit's models report, by head."""


def stacked_model_of(model_fn: Any) -> Optional[tuple[StackedDenseModel, str]]:
  """(stacked model, head) of a ``tff_idp.models.tff_model_fn`` model of dense layers; else None."""
  builder = getattr(model_fn, "keras_builder", None)
  head = getattr(model_fn, "head", None)
  if builder is None or head not in ACCURACY_METRIC:
    return None
  with tf.Graph().as_default():  # Keras models made in a graph leave eager ones valid
    stacked = StackedDenseModel.from_keras(builder())
  return None if stacked is None else (stacked, head)


def vectorizable(model_fn: Any) -> bool:
  """Whether :func:`local_steps` serves the model ``model_fn`` builds (module docstring)."""
  return stacked_model_of(model_fn) is not None


def model_shapes(model_fn: Any) -> tuple[Any, list[tf.TensorSpec], int]:
  """(input spec, trainable weight specs, widest layer's output width) of ``model_fn``'s model.

  Built in a throw-away graph; the width sizes a chunk's activations
  (:func:`bytes_per_client`).
  """
  with tf.Graph().as_default():
    model = model_fn()
    specs = [tf.TensorSpec(v.shape, v.dtype) for v in model.trainable_variables]
    widest = max([int(np.prod(v.shape[1:])) for v in model.trainable_variables] + [1])
    return model.input_spec, specs, widest


def per_example_loss_and_correct(head: str, labels: tf.Tensor, logits: tf.Tensor
                                 ) -> tuple[tf.Tensor, tf.Tensor]:
  """``[clients, batch]`` losses and 0/1 correctness, as the head's Keras loss and accuracy."""
  if head == "sigmoid":
    z = logits[..., 0]
    y = tf.cast(tf.reshape(labels, tf.shape(z)), z.dtype)
    loss = tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z)
    correct = tf.cast(tf.equal(tf.cast(z > 0, y.dtype), y), tf.float32)
    return loss, correct
  loss = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
  predicted = tf.argmax(logits, axis=-1, output_type=tf.int64)
  correct = tf.cast(tf.equal(predicted, tf.cast(labels, tf.int64)), tf.float32)
  return loss, correct


def hold(active: tf.Tensor, new: tf.Tensor, old: tf.Tensor) -> tf.Tensor:
  """``new`` for the clients taking this step, ``old`` for the others (leading client axis)."""
  if new.shape.rank == 0:
    return new  # a shared scalar (a step count or a hyperparameter)
  shape = tf.concat([tf.shape(active), tf.ones([new.shape.rank - 1], tf.int32)], 0)
  return tf.where(tf.reshape(active, shape), new, old)


class _StackedSpec:
  """A weight spec whose shape is a tensor (the stacked weights' dynamic client axis).

  A plain class, not a namedtuple: ``tf.nest`` must treat it as one leaf.
  """

  def __init__(self, shape: tf.Tensor, dtype: tf.DType):
    self.shape, self.dtype = shape, dtype


def stacked_copies(weights: Sequence[tf.Tensor], num_clients: tf.Tensor) -> list[tf.Tensor]:
  """Every weight repeated along a new leading client axis of length ``num_clients``."""
  return [tf.broadcast_to(w[tf.newaxis], tf.concat([[num_clients], tf.shape(w)], 0))
          for w in weights]


def stacked_optimizer_state(optimizer: tff.learning.optimizers.Optimizer,
                            stacked_weights: Sequence[tf.Tensor], hparams: Any = None) -> Any:
  """The optimizer's initial state for stacked weights: per-weight state stacked like them.

  ``hparams`` (``get_hparams`` structure) replaces the built-in ones when given.
  """
  specs = tuple(_StackedSpec(tf.shape(w), w.dtype) for w in stacked_weights)
  state = optimizer.initialize(specs)
  if hparams is not None:
    state = optimizer.set_hparams(state, hparams)
  return state


def local_steps(stacked: StackedDenseModel, head: str,
                optimizer: tff.learning.optimizers.Optimizer, initial_weights: Sequence[tf.Tensor],
                examples: Any, index: tf.Tensor, mask: tf.Tensor, *, hparams: Any = None,
                proximal_strength: float = 0.0
                ) -> tuple[list[tf.Tensor], collections.OrderedDict]:
  """Every client's local steps of one chunk (module docstring); call inside a ``tf.function``.

  Args:
    stacked: the model's stacked form.
    head: "softmax" or "sigmoid" (the model's loss and accuracy).
    optimizer: the client optimizer, initialized here on the stacked weights.
    initial_weights: the round's trainable weights (no client axis).
    examples: ``OrderedDict(x=[rows, ...], y=[rows])``, the chunk's examples
      and one padding row (:func:`tff_idp.engine.cohort_stack.stack_steps`).
    index: int32 ``[clients, steps, batch]`` gather index into ``examples``.
    mask: float32 ``[clients, steps, batch]``, 1 on real examples.
    hparams: the optimizer's hyperparameters (``get_hparams`` structure);
      None keeps those it was built with.
    proximal_strength: FedProx μ ≥ 0 (0: plain local SGD).

  Returns:
    ``(Δ, statistics)``: Δ per trainable weight ``[clients, ...]`` (zero
    where not finite); statistics ``loss_total``, ``correct_total``,
    ``count`` (float32 ``[clients]``), ``num_batches`` (int64) and
    ``finite`` (bool).
  """
  num_clients = tf.shape(index)[0]
  weights = stacked_copies(initial_weights, num_clients)
  state = stacked_optimizer_state(optimizer, weights, hparams)
  mu = float(proximal_strength)
  zeros = tf.zeros([num_clients], tf.float32)
  loss_total, correct_total, count = zeros, zeros, zeros
  batches = tf.zeros([num_clients], tf.int64)
  for s in tf.range(tf.shape(index)[1]):
    rows, real = index[:, s], mask[:, s]
    n = tf.reduce_sum(real, axis=1)
    active = n > 0
    x = tf.gather(examples["x"], rows)
    y = tf.gather(examples["y"], rows)
    with tf.GradientTape() as tape:
      tape.watch(weights)
      logits = stacked.forward(weights, x)
      per_example, correct = per_example_loss_and_correct(head, y, logits)
      batch_loss = tf.reduce_sum(per_example * real, axis=1) / tf.maximum(n, 1.0)
      total = tf.reduce_sum(batch_loss)
    gradients = tape.gradient(total, weights)
    if mu > 0.0:  # FedProx: the gradient of (μ/2)·‖w − w₀‖², as TFF's proximal client work
      gradients = [g + mu * (w - w0[tf.newaxis])
                   for g, w, w0 in zip(gradients, weights, initial_weights)]
    new_state, updated = optimizer.next(state, tuple(weights), tuple(gradients))
    weights = [hold(active, u, w) for u, w in zip(updated, weights)]
    state = tf.nest.map_structure(lambda a, b: hold(active, a, b), new_state, state)
    loss_total += batch_loss * n
    correct_total += tf.reduce_sum(correct * real, axis=1)
    count += n
    batches += tf.cast(active, tf.int64)
  delta = [w0[tf.newaxis] - w for w0, w in zip(initial_weights, weights)]
  finite = tf.ones([num_clients], tf.bool)
  for d in delta:
    finite &= tf.reduce_all(tf.reshape(tf.math.is_finite(d), [num_clients, -1]), axis=1)
  delta = [hold(finite, d, tf.zeros_like(d)) for d in delta]
  stats = collections.OrderedDict(
      loss_total=loss_total, correct_total=correct_total, count=count,
      num_batches=batches, finite=finite)
  return delta, stats


def examples_spec(input_spec: Any) -> dict:
  """The ``examples`` argument's ``tf.TensorSpec`` s: rows of ``x`` and ``y`` of any count."""
  if not isinstance(input_spec, Mapping) or set(input_spec) != {"x", "y"}:
    raise ValueError("the vectorized client execution takes batches OrderedDict(x=..., y=...) "
                     f"(tff_idp.models.input_spec_for); this model's input spec is {input_spec}.")
  return {k: tf.TensorSpec([None] + s.shape[1:].as_list(), s.dtype)
          for k, s in input_spec.items()}


STEPS_SPEC = tf.TensorSpec([None, None, None], tf.int32)
MASK_SPEC = tf.TensorSpec([None, None, None], tf.float32)


def bytes_per_client(weight_specs: Sequence[tf.TensorSpec], batches: Sequence[list],
                     widest_layer: int) -> int:
  """Stacked weights and optimizer state (≤ 4 copies) and one step's activations, per client."""
  params = sum(int(np.prod(s.shape)) for s in weight_specs)
  width = max([len(b) for client in batches for b in client] + [1])
  return 4 * (4 * params + 4 * width * widest_layer)


def dataset_batches(dataset: tf.data.Dataset) -> tuple[collections.OrderedDict, list]:
  """A batched client dataset's examples and its batches, in its iteration order."""
  rows = list(dataset.as_numpy_iterator())
  spec = dataset.element_spec
  examples = collections.OrderedDict()
  for key, s in spec.items():
    if rows:
      examples[key] = np.concatenate([r[key] for r in rows])
    else:
      examples[key] = np.zeros([0] + [int(d or 0) for d in s.shape[1:]],
                               s.dtype.as_numpy_dtype)
  sizes = [len(next(iter(r.values()))) for r in rows]
  starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
  return examples, [np.arange(starts[k], starts[k + 1]) for k in range(len(sizes))]
