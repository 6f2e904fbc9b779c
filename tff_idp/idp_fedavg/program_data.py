"""IDP-FedAvg's client inputs under TFF's program API (issue 31 item 8).

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
"""
from __future__ import annotations

import collections
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_idp.engine import program_data_source
from tff_idp.errors import ToolkitValueError
from tff_idp.idp_fedavg.process import scaled_client_data


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


class IdpFedAvgDataSource(program_data_source.ClientArraysDataSource):
  """IDP-FedAvg / SCALE client inputs for ``train_model`` (module doc).

  Args:
    clients: per client, ``(x, y)`` numpy arrays (the model's input spec
      must be ``OrderedDict(x=..., y=...)`` batches).
    sampling_rates: per client, its sampling rate q_i (e.g. SAMPLE's group
      rate of its group, ``get_group_sampling_rates(...).sampling_rates``).
      The expected cohort Σ q_i, rounded, is the ``train_per_round_clients``
      that ``train_model`` must pass.
    batch_size, local_epochs: each client's local data pipeline.
    clip_scales: SCALE only: per client, its clip scale s_i ∈ (0, 1]
      (``get_group_clip_scales``); build the process with
      ``per_client_clip_scale=True``.
    rounds: required: the rounds the calibration covers; a further ``select``
      is refused. ``None`` (explicit, logged): no limit; then you keep count.
    insecure_seed: debug only: derive the sampling and shuffling secrets from
      this seed (NOT PRIVATE: the cohorts become predictable).
  """

  iterator_cls = IdpFedAvgIterator

  def __init__(self, clients: Sequence, sampling_rates: Sequence[float], *,
               batch_size: int = 16, local_epochs: int = 1,
               clip_scales: Optional[Sequence[float]] = None,
               rounds: Any = program_data_source.ROUNDS_REQUIRED,
               insecure_seed: Optional[int] = None):
    arrays = program_data_source.check_client_arrays(clients)
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
    super().__init__(arrays, rates, dict(batch_size=int(batch_size),
                                         local_epochs=int(local_epochs), clip_scales=scales),
                     insecure_seed=insecure_seed, rounds=rounds)
