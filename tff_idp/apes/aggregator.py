"""The APES analyzer as a TFF aggregator: mean of already-randomized reports, then de-bias.

``ShuffledPersonalizedMeanFactory`` is a ``tff.aggregators.UnweightedAggregationFactory``.
Every client value reaching it must already be randomized at the client
(Clip-Laplace for APES / S-APES, Laplace for PLDP / UniS; see
:mod:`tff_idp.apes.client_work`); the aggregator adds no noise. Per round it
computes, per coordinate,

    m = (1/n) Σ_i z_i                       (float32 sums: fixes D8's float16)
    û = G⁻¹(m) on the grid, clamped to [−C, C]     (``debias=True``)
    û = m                                  (``debias=False``)

where G is the average expected report over the budget multiset
(:mod:`tff_idp.apes.debias`; APES Alg. 1 "Calibrate", Eq. (1)), and n is the
static number of reports ``num_reports`` (full participation, as in the
paper) or, by default, the number of reports actually received. For S-APES
(``keep=b``) G already accounts for the sparsification: with the default
``sparse_debias="rescale"`` it is (b/d)·Ē_{ε/b}, exact for the default
random b-subset selection (a coordinate is kept with probability b/d,
whatever the data; padding has mean 0); ``"threshold"`` approximates the
expected value of a coordinate kept by the paper's post-top-b selection.
See :mod:`tff_idp.apes.debias`.

**Shuffling is implicit.** APES's shuffler permutes the reports
independently per coordinate and permutes the budget list (Alg. 1). The
per-coordinate sum is invariant under those permutations, and the budgets
enter only as the multiset fixed at construction, so this aggregator
computes exactly what the analyzer computes after a shuffle; the shuffle
matters only for the privacy analysis (notes §2.2). In this simulation the
TFF runtime of course sees every client's report: a deployment that wants
the shuffle-model guarantee needs a real (trusted or cryptographic) shuffler
between clients and server, or secure aggregation so that the server sees
only the sum.

**The budget multiset** is public in the shuffle model (Alg. 1 sends the
shuffled ε list to the analyzer). It is given at construction: the paper's
setting is a fixed population with full participation. With partial
participation the population multiset stands in for the round's.

**Only randomized reports.** The factory takes the value structure the APES
client work emits, ``OrderedDict(ldp_report=<report>)``
(:func:`tff_idp.apes.client_work.as_report`), and returns the de-biased mean
of the reports with the report's own structure. Anything else (a stock
FedAvg's plain model deltas, which carry no local randomizer at all and
whose "de-bias" would inflate the step about 3×) is refused by ``create``
with a line naming ``build_ldp_client_work`` / ``build_apes_process``
(issue 31).

State: ``()`` without de-bias, otherwise ``OrderedDict(grid_u, grid_values)``
(float32 [points]) computed by ``initialize`` and never changed.
Measurements: ``reports`` (int32, the number of reports received),
``normalizer`` (float32 n) and ``clamped_fraction`` (float32, the fraction
of coordinates whose mean fell outside [G(−C), G(C)] and was clamped; always
0 without de-bias). All are functions of the randomized reports.
"""
from __future__ import annotations

import collections
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
# TFF 0.87 has no public accessor for a struct type's field names.
from tensorflow_federated.python.common_libs import structure

from tff_idp.errors import ToolkitValueError
from tff_idp.apes import clip_laplace, debias as debias_lib
from tff_idp.apes.client_work import REPORT_KEY, as_report  # noqa: F401 (re-export)


class ShuffledPersonalizedMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """Shuffled personalized mean (APES / S-APES analyzer; plain mean for the baselines).

  Args:
    clip: C, the clip bound of the reports (needed with ``debias=True``).
    epsilons: the population's budget multiset, one per client (APES: the
      per-coordinate ε_i; S-APES: ε_i, used at ε_i/b). Needed with
      ``debias=True``.
    debias: invert G (APES / S-APES). ``False``: plain mean (Laplace
      baselines, non-private).
    keep: b for S-APES (reports sparsified by Alg. 2), else ``None``.
    sparse_debias: "rescale" (default; exact for S-APES's random b-subset)
      or "threshold" (for the paper's post-top-b reports); see
      :mod:`tff_idp.apes.debias`.
    num_reports: static n (full participation). ``None``: the number of
      reports received in the round.
    grid_points: size of the de-bias grid on [−C, C].
  """

  def __init__(self, clip: Optional[float] = None,
               epsilons: Optional[Sequence[float]] = None, *,
               debias: bool = True, keep: Optional[int] = None,
               sparse_debias: str = "rescale", num_reports: Optional[int] = None,
               grid_points: int = debias_lib.DEFAULT_GRID_POINTS):
    self.debias = bool(debias)
    self.clip = None if clip is None else clip_laplace.check_clip(clip)
    self.epsilons = None
    if epsilons is not None:
      self.epsilons = clip_laplace.check_epsilon(
          np.asarray(epsilons, np.float64).ravel(), "epsilons")
    if self.debias and (self.clip is None or self.epsilons is None):
      raise ToolkitValueError(
          "the de-biased (APES / S-APES) mean needs clip=C and the population's budget "
          "multiset epsilons=[ε_1, ..., ε_n]; use debias=False for a plain mean.")
    if keep is not None and not self.debias:
      raise ToolkitValueError("keep=b (S-APES) needs debias=True: the sparsified reports "
                              "are biased and must be de-biased.")
    if keep is not None and (isinstance(keep, bool) or int(keep) != keep or keep < 1):
      raise ToolkitValueError(f"keep={keep!r} must be an integer >= 1.")
    if sparse_debias not in debias_lib.SPARSE_DEBIAS_MODES:
      raise ToolkitValueError(
          f"sparse_debias={sparse_debias!r} must be one of {debias_lib.SPARSE_DEBIAS_MODES}.")
    if num_reports is not None and (isinstance(num_reports, bool)
                                    or int(num_reports) != num_reports or num_reports < 1):
      raise ToolkitValueError(f"num_reports={num_reports!r} must be an integer >= 1 or None.")
    if isinstance(grid_points, bool) or int(grid_points) != grid_points or grid_points < 2:
      raise ToolkitValueError(f"grid_points={grid_points!r} must be an integer >= 2.")
    self.keep = None if keep is None else int(keep)
    self.sparse_debias = sparse_debias
    self.num_reports = None if num_reports is None else int(num_reports)
    self.grid_points = int(grid_points)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    report_type = report_type_of(value_type)
    specs = tf.nest.flatten(tff.types.type_to_tf_tensor_specs(report_type))
    for spec in specs:
      if spec.dtype != tf.float32 or not spec.shape.is_fully_defined():
        raise ToolkitValueError(
            f"ShuffledPersonalizedMeanFactory takes float32 tensors of static shape; got "
            f"{value_type}.")
    dimension = sum(int(np.prod(s.shape.as_list())) for s in specs)
    if self.keep is not None:
      debias_lib.check_keep(self.keep, dimension)
    do_debias = self.debias
    clip, epsilons, keep = self.clip, self.epsilons, self.keep
    sparse_debias, points, static_n = self.sparse_debias, self.grid_points, self.num_reports

    @tff.tensorflow.computation
    def init_fn():
      if not do_debias:
        return ()
      grid = debias_lib.build_grid(epsilons, clip, points, keep=keep,
                                   dimension=dimension, sparse_debias=sparse_debias)
      return collections.OrderedDict(grid_u=grid.u, grid_values=grid.values)

    state_type = init_fn.type_signature.result

    @tff.tensorflow.computation(value_type)
    def one_report(value):
      del value
      return tf.constant(1, tf.int32)

    @tff.tensorflow.computation(state_type, value_type, np.int32)
    def analyze(state, value_sum, reports):
      if static_n is None:
        n = tf.cast(reports, tf.float32)
      else:
        n = tf.constant(float(static_n), tf.float32)
      report_sum = value_sum[REPORT_KEY]
      leaves = tf.nest.flatten(report_sum)
      means = [tf.math.divide_no_nan(v, n) for v in leaves]
      clamped = tf.constant(0.0, tf.float32)
      if do_debias:
        lo, hi = state["grid_values"][0], state["grid_values"][-1]
        outside = tf.add_n([tf.reduce_sum(tf.cast(tf.logical_or(m < lo, m > hi), tf.float32))
                            for m in means])
        clamped = outside / float(dimension)
        means = [debias_lib.invert(m, state["grid_u"], state["grid_values"]) for m in means]
      # No reports: no information, no update (the inverse of 0 is only ~0).
      means = [tf.where(reports > 0, m, tf.zeros_like(m)) for m in means]
      measurements = collections.OrderedDict(
          reports=reports, normalizer=n, clamped_fraction=clamped)
      return tf.nest.pack_sequence_as(report_sum, means), measurements

    @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      value_sum = tff.federated_sum(value)
      reports = tff.federated_sum(tff.federated_map(one_report, value))
      result, measurements = tff.federated_map(analyze, (state, value_sum, reports))
      return tff.templates.MeasuredProcessOutput(
          state=state, result=result, measurements=measurements)

    return tff.templates.AggregationProcess(
        tff.federated_computation(lambda: tff.federated_eval(init_fn, tff.SERVER)),
        next_fn)


def report_type_of(value_type) -> tff.types.Type:
  """The report type inside ``value_type``, which must be ``<ldp_report=...>`` (module doc)."""
  names = (structure.name_list(value_type) if isinstance(value_type, tff.StructType)
           else None)
  if names != [REPORT_KEY]:
    raise ToolkitValueError(
        "ShuffledPersonalizedMeanFactory takes only the randomized reports of the APES "
        "client work (value <ldp_report=...>), not plain model deltas, which carry no local "
        "randomizer: build the process with tff_idp.build_apes_process, or pair the factory "
        "with tff_idp.build_ldp_client_work in compose_learning_process; got value type "
        f"{value_type}.")
  return value_type[REPORT_KEY]


def plain_mean_factory(num_reports: Optional[int] = None) -> ShuffledPersonalizedMeanFactory:
  """The same aggregator without de-bias (Laplace baselines, non-private)."""
  return ShuffledPersonalizedMeanFactory(debias=False, num_reports=num_reports)

