"""rPDP-FL's client inputs under TFF's program API (issue 31 item 8).

:class:`RecordDpDataSource` is a ``tff.program.FederatedDataSource`` for
``tff.learning.programs.train_model`` and
:func:`~tff_idp.rpdp.client_work.build_rpdp_fedavg_process`: every round it
samples each client at the client rate λ (Alg. 3 line 6) from a secret
sampler, and gives each selected client its records with their rates q_ij
and a fresh secret seed for the round (:func:`tff_idp.rpdp.records.record_dataset`;
the process also folds its round counter into that seed). The record rates
come from a record plan (``make_record_plan(...).rates``) or
``calibrate_record_rates``; a rate of 0 excludes a record.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from tff_idp.engine import program_data_source
from tff_idp.errors import ToolkitValueError
from tff_idp.rpdp.records import record_dataset


class RecordDpIterator(program_data_source.ClientArraysIterator):
  """λ-sampled clients' record datasets with fresh secret seeds (module doc)."""

  def client_input(self, index: int, seed: tuple[int, int]):
    arrays = self.arrays(index)
    return record_dataset(arrays["x"], arrays["y"], arrays["q"], seed,
                          batch_size=self.options["batch_size"])

  def padding_input(self):
    arrays = self.arrays(0)
    return record_dataset(arrays["x"][:0], arrays["y"][:0], arrays["q"][:0], (0, 0),
                          batch_size=self.options["batch_size"])


class RecordDpDataSource(program_data_source.ClientArraysDataSource):
  """rPDP-FL client inputs for ``train_model`` (module doc).

  Args:
    clients: per client, ``(x, y)`` numpy arrays of its records.
    record_rates: per client, one rate q_ij ∈ [0, 1] per record.
    client_rate: λ, every client's sampling rate per round; the expected
      cohort λ·N, rounded, is the ``train_per_round_clients`` to pass.
    batch_size: records per ``tf.data`` batch (the client concatenates them).
    rounds: required: the rounds the calibration covers; a further ``select``
      is refused. ``None`` (explicit, logged): no limit; then you keep count.
    insecure_seed: debug only (NOT PRIVATE), as for IDP-FedAvg's source.
  """

  iterator_cls = RecordDpIterator

  def __init__(self, clients: Sequence, record_rates: Sequence[Sequence[float]], *,
               client_rate: float, batch_size: int = 512,
               rounds: Any = program_data_source.ROUNDS_REQUIRED,
               insecure_seed: Optional[int] = None):
    arrays = program_data_source.check_client_arrays(clients)
    if len(record_rates) != len(arrays):
      raise ToolkitValueError(f"give record rates for every client: got {len(record_rates)} "
                              f"for {len(arrays)} clients.")
    for i, (a, q) in enumerate(zip(arrays, record_rates)):
      a["q"] = program_data_source.check_rates(q, len(a["y"]), f"record rate of client {i}"
                                               ).astype(np.float32)
    rates = program_data_source.check_rates(np.full(len(arrays), client_rate), len(arrays),
                                            "client rate")
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
      raise ToolkitValueError(f"batch_size={batch_size!r} must be an integer >= 1.")
    super().__init__(arrays, rates, dict(batch_size=int(batch_size)),
                     insecure_seed=insecure_seed, rounds=rounds)
