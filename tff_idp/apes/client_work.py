"""APES client work: local FedProx, then the client's own randomizer, before anything leaves.

One ``tff.learning.templates.ClientWorkProcess`` for the four mechanisms of
the APES paper's experiments (Tables 3-4):

=======================  =====================================================
``"none"``               non-private: the raw model delta (no clipping)
``"clip_laplace"``       APES: clip to [−C, C], Clip-Laplace at ε_i (Def. 4)
``"sparse_clip_laplace"`` S-APES: a secret random b-subset at ε_i/b, pad with
                         CLap(0) (sound: b·(ε_i/b) = ε_i locally)
``"sparse_clip_laplace_top_b"`` S-APES as published: post-top-b at ε_i/b (only
                         d·ε_i/b locally; labelled wherever it is reported)
``"laplace"``            PLDP / UniS baseline: clip, add Laplace(2C/ε_i)
=======================  =====================================================

**Client input** (TFF 0.87 client data may be a structure of sequences):
``OrderedDict(data=<the client's batches>, privacy=<one-element dataset
OrderedDict(epsilon=float32 [], seed=int64 [2])>)``, built by
:func:`make_client_input`. ``epsilon`` is the client's own budget; ``seed``
is its secret randomizer seed (derive it with
:func:`tff_idp.apes.clip_laplace.client_seed` from the run's
``PrivacyRandomness``; never write it to outputs). Client data is placed at
``tff.CLIENTS``: no server computation reads it.

**One client computation.** Local training is FedProx
(:mod:`tff_idp.apes.fedprox`: the client optimizer on the batch loss plus the
proximal gradient μ·(w − w₀) toward the round's global model, which fixes D5
of the notes, where the reference's PGD regularized toward 0; TFF 0.87's own
FedProx update has this term's sign reversed, see that module). In the
*same* TF computation its delta is flattened to d coordinates, randomized
with the client's ε and seed, and unflattened. The only value the client
work returns is that randomized report (``ClientResult.update``, as the one
field ``ldp_report`` that the APES aggregator requires; the weight is a
constant 1). No local training metric (loss, accuracy, example counts) is
computed or sent, because none is randomized: the client work's
measurements are empty, unlike TFF's FedProx, whose ``sum_then_finalize``
would send them to the server.

**Fresh noise every round and every run.** The client work's state is its
seed counter (server-placed): a secret start drawn at every
``initialize()`` plus the round number
(:func:`tff_idp.engine.tff_composition.round_counter`). It is broadcast, and
each client folds it into its seed (``stateless_fold_in``), so even a driver
that reuses a client's seed across rounds draws fresh noise each round (the
reference code repeated the same noise quantiles every round, defect D6),
and two runs with the same client seeds share no noise (issue 48).

Sign: TFF's update is initial − trained weights (the server optimizer
subtracts it). Both randomizers and both de-bias functions are odd
symmetric, so randomizing this negated delta is the same as randomizing the
delta and negating.
"""
from __future__ import annotations

import collections
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.errors import ToolkitValueError
from tff_idp.apes import clip_laplace, debias, fedprox, sparsify
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.engine import tff_composition

ModelFn = Callable[[], tff.learning.models.VariableModel]
MECHANISMS = ("none", "clip_laplace", "sparse_clip_laplace", "sparse_clip_laplace_top_b",
              "laplace")
# The S-APES mechanisms and their sparsification rule (tff_idp.apes.sparsify).
SPARSE_SELECTION = {"sparse_clip_laplace": "random", "sparse_clip_laplace_top_b": "top_b"}
DATA_KEY = "data"
PRIVACY_KEY = "privacy"
# The one field of the client work's update: the randomized report. The APES
# aggregator accepts only values with this field, so it cannot be dropped
# onto plain (unrandomized) model deltas (issue 31).
REPORT_KEY = "ldp_report"


def as_report(update) -> collections.OrderedDict:
  """``OrderedDict(ldp_report=update)``: the structure the client work emits and the aggregator takes."""
  return collections.OrderedDict([(REPORT_KEY, update)])


def check_mechanism(mechanism: str) -> str:
  if mechanism not in MECHANISMS:
    raise ToolkitValueError(f"mechanism={mechanism!r} must be one of {MECHANISMS}.")
  return mechanism


def privacy_element_spec() -> collections.OrderedDict:
  """The element of the one-element ``privacy`` dataset: ε (float32) and the seed (int64[2])."""
  return collections.OrderedDict(epsilon=tf.TensorSpec([], tf.float32),
                                 seed=tf.TensorSpec([2], tf.int64))


def make_client_input(dataset: tf.data.Dataset, epsilon: float, seed
                      ) -> collections.OrderedDict:
  """One client's input: ``OrderedDict(data=dataset, privacy=<one element {epsilon, seed}>)``.

  Args:
    dataset: the client's batches (the model's input spec), one local epoch
      (the process repeats it ``local_epochs`` times).
    epsilon: the client's budget, finite and > 0 (per coordinate for
      "clip_laplace"/"laplace", split over b coordinates for the two
      S-APES mechanisms; ignored by "none").
    seed: two integers, the client's secret seed
      (:func:`tff_idp.apes.clip_laplace.client_seed`).
  """
  clip_laplace.check_epsilon(epsilon)
  seed = np.asarray(seed, dtype=np.int64)
  if seed.shape != (2,):
    raise ToolkitValueError(f"seed must be two integers (a stateless RNG seed); got {seed!r}.")
  privacy = tf.data.Dataset.from_tensors(collections.OrderedDict(
      epsilon=tf.constant(epsilon, tf.float32), seed=tf.constant(seed, tf.int64)))
  return collections.OrderedDict([(DATA_KEY, dataset), (PRIVACY_KEY, privacy)])


def make_round_inputs(datasets: Sequence[tf.data.Dataset], epsilons: Sequence[float],
                      client_ids: Sequence[str], randomness: PrivacyRandomness,
                      round_num: int) -> list:
  """The inputs of one round: :func:`make_client_input` with each client's secret seed.

  Seeds come from ``randomness`` (:func:`tff_idp.apes.clip_laplace.client_seed`,
  keyed by client id and round): secret unless ``randomness`` is in its
  insecure reproducible debug mode. They live only in the returned
  client-placed datasets; do not log them.
  """
  if not len(datasets) == len(epsilons) == len(client_ids):
    raise ToolkitValueError(
        f"datasets, epsilons and client_ids must have one entry per client (got "
        f"{len(datasets)}, {len(epsilons)}, {len(client_ids)}).")
  return [make_client_input(d, e, clip_laplace.client_seed(randomness, cid, round_num))
          for d, e, cid in zip(datasets, epsilons, client_ids)]


def randomize(update, mechanism: str, epsilon, seed, *, clip: Optional[float] = None,
              keep: Optional[int] = None):
  """The client's report: ``update`` (a structure of float32 tensors) flattened, randomized, unflattened.

  The coordinates are concatenated in ``tf.nest.flatten`` order, each leaf
  row-major, into one vector of length d; "clip_laplace" and "laplace" draw
  ``tf.random.stateless_uniform([d], seed)``; the S-APES mechanisms run
  :func:`tff_idp.apes.sparsify.sparsify_perturb` on it with their selection
  (:data:`SPARSE_SELECTION`).
  """
  check_mechanism(mechanism)
  if mechanism == "none":
    return update
  leaves = tf.nest.flatten(update)
  shapes = [leaf.shape for leaf in leaves]
  sizes = [int(np.prod(s.as_list())) for s in shapes]
  flat = tf.concat([tf.reshape(tf.cast(leaf, tf.float32), [-1]) for leaf in leaves], 0)
  report = randomize_vector(flat, mechanism, epsilon, seed, clip=clip, keep=keep)
  parts = tf.split(report, sizes)
  return tf.nest.pack_sequence_as(
      update, [tf.reshape(p, s) for p, s in zip(parts, shapes)])


def randomize_vector(flat: tf.Tensor, mechanism: str, epsilon, seed, *,
                     clip: Optional[float] = None, keep: Optional[int] = None) -> tf.Tensor:
  """One client's report of its flattened update ``flat`` (float32 [d]) at its ε and seed.

  The randomizer of every execution (:func:`randomize` for the TFF client
  work, :mod:`tff_idp.apes.vectorized` for a whole cohort): "clip_laplace"
  and "laplace" draw ``tf.random.stateless_uniform([d], seed)``; the S-APES
  mechanisms run :func:`tff_idp.apes.sparsify.sparsify_perturb`; "none"
  returns ``flat``.
  """
  if mechanism == "none":
    return flat
  if mechanism == "clip_laplace":
    return clip_laplace.perturb(flat, epsilon, clip, seed)
  if mechanism == "laplace":
    return clip_laplace.laplace_perturb(flat, epsilon, clip, seed)
  return sparsify.sparsify_perturb(flat, epsilon, clip, keep, seed,
                                   selection=SPARSE_SELECTION[mechanism])


def check_settings(mechanism: str, clip: Optional[float], keep: Optional[int],
                   proximal_strength: float, local_epochs: int
                   ) -> tuple[Optional[float], float, int]:
  """(C, μ, local epochs) of a client work, checked; a ``ToolkitValueError`` names what to change."""
  check_mechanism(mechanism)
  if mechanism != "none":
    clip = clip_laplace.check_clip(clip)
  if mechanism in SPARSE_SELECTION:
    if keep is None:
      raise ToolkitValueError(f"mechanism={mechanism!r} (S-APES) needs keep=b.")
  elif keep is not None:
    raise ToolkitValueError(
        f"keep=b is for the S-APES mechanisms {tuple(SPARSE_SELECTION)} only "
        f"(mechanism={mechanism!r}).")
  if not (isinstance(proximal_strength, (int, float)) and proximal_strength >= 0):
    raise ToolkitValueError(f"proximal_strength={proximal_strength!r} must be a number >= 0.")
  if isinstance(local_epochs, bool) or int(local_epochs) != local_epochs or local_epochs < 1:
    raise ToolkitValueError(f"local_epochs={local_epochs!r} must be an integer >= 1.")
  return clip, float(proximal_strength), int(local_epochs)


def _read_privacy(privacy: tf.data.Dataset):
  """(ε, seed) from the one-element ``privacy`` dataset; any other length fails in the graph."""
  initial = (tf.constant(0, tf.int64), tf.constant(np.nan, tf.float32), tf.zeros([2], tf.int64))
  count, epsilon, seed = privacy.reduce(
      initial, lambda state, x: (state[0] + 1, x["epsilon"], x["seed"]))
  check = tf.debugging.Assert(
      tf.equal(count, 1),
      ["the client's privacy dataset must hold exactly one {epsilon, seed} element "
       "(use make_client_input); it holds", count])
  with tf.control_dependencies([check]):
    return tf.identity(epsilon), tf.identity(seed)


def build_ldp_client_work(
    model_fn: ModelFn, *, mechanism: str, client_optimizer: tff.learning.optimizers.Optimizer,
    clip: Optional[float] = None, keep: Optional[int] = None,
    proximal_strength: float = 0.01, local_epochs: int = 1,
) -> tff.learning.templates.ClientWorkProcess:
  """FedProx local training + the client's randomizer as a ``ClientWorkProcess``.

  Args:
    model_fn: builds a ``tff.learning.models.VariableModel``.
    mechanism: one of :data:`MECHANISMS`.
    client_optimizer: the client's TFF optimizer (e.g. ``build_sgdm(η)``).
    clip: C > 0 (every mechanism but "none").
    keep: b, 1 ≤ b ≤ d (the S-APES mechanisms only).
    proximal_strength: μ of FedProx (0 gives FedAvg's local update).
    local_epochs: passes over the client's dataset per round.

  State: the seed counter (int64 at the server): a secret start drawn at
  every ``initialize()`` plus the round
  (:func:`tff_idp.engine.tff_composition.round_counter`), folded into each
  report's seed, so neither two rounds nor two runs with the same
  ``make_client_input`` seeds share noise (issue 48). Result: ``ClientResult(update=
  OrderedDict(ldp_report=<randomized report>), update_weight=1.0)`` at the
  clients (the ``ldp_report`` field marks what
  :class:`~tff_idp.apes.aggregator.ShuffledPersonalizedMeanFactory` accepts).
  Measurements: ``()`` (nothing unrandomized leaves a client).
  """
  clip, mu, local_epochs = check_settings(mechanism, clip, keep, proximal_strength,
                                         local_epochs)

  with tf.Graph().as_default():
    model = model_fn()
    weights_type = tff.learning.models.weights_type_from_model(model)
    data_type = tff.SequenceType(tff.types.tensorflow_to_type(model.input_spec))
  dimension = sum(int(np.prod(t.shape)) for t in weights_type.trainable)
  if keep is not None:
    keep = debias.check_keep(keep, dimension)
  client_data_type = tff.StructWithPythonType(
      [(DATA_KEY, data_type),
       (PRIVACY_KEY, tff.SequenceType(tff.types.tensorflow_to_type(privacy_element_spec())))],
      collections.OrderedDict)

  @tff.tensorflow.computation(weights_type, client_data_type, np.int64)
  def client_update(initial_weights, client_data, round_num):
    epsilon, seed = _read_privacy(client_data[PRIVACY_KEY])
    data = client_data[DATA_KEY]
    if local_epochs > 1:
      data = data.repeat(local_epochs)
    update = fedprox.build_fedprox_delta(model_fn, client_optimizer, mu)(initial_weights, data)
    report = randomize(update, mechanism, epsilon,
                       clip_laplace.round_seed(seed, round_num), clip=clip, keep=keep)
    return tff.learning.templates.ClientResult(
        update=as_report(report), update_weight=tf.constant(1.0, tf.float32))

  initial_round, next_round = tff_composition.round_counter()

  @tff.tensorflow.computation
  def no_measurements():
    return ()

  @tff.federated_computation
  def init_fn():
    return tff.federated_eval(initial_round, tff.SERVER)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(client_data_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    round_at_clients = tff.federated_broadcast(state)
    result = tff.federated_map(client_update, (weights, client_data, round_at_clients))
    return tff.templates.MeasuredProcessOutput(
        tff.federated_map(next_round, state), result,
        tff.federated_eval(no_measurements, tff.SERVER))

  return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)
