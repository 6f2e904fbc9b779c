"""APES's client inputs under TFF's program API (issue 31 item 8).

:class:`ApesDataSource` is a ``tff.program.FederatedDataSource`` for
``tff.learning.programs.train_model`` and
:func:`~tff_idp.apes.process.build_apes_process`: every user takes part in
every round (the paper's full participation; ``train_per_round_clients`` is
the number of users), and each user's input is
:func:`~tff_idp.apes.client_work.make_client_input`: its batches, its own
budget ε_i and a fresh secret seed for the round (the client work also folds
its round counter in).

Every round spends each user's ε_i once more, so the source is told the rounds
T its ledger covers (``rounds=T``) and, like every family's source, all its
iterators together select at most T rounds (issue 48;
:class:`tff_idp.engine.program_data_source.RoundLedger`). The toolkit has no
APES calibration object carrying both the ε_i and T (the shuffle ledger's user
level also needs the model's dimension), so the refusal past T names the
rounds, not the ε.
"""
from __future__ import annotations

import collections
import secrets
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_idp.apes import clip_laplace
from tff_idp.apes.client_work import make_client_input
from tff_idp.engine import program_data_source
from tff_idp.errors import ToolkitValueError


class ApesIterator(program_data_source.ClientArraysIterator):
  """Every user with its ε and a fresh secret seed (module doc)."""

  def _dataset(self, index: int) -> tf.data.Dataset:
    arrays = self.arrays(index)
    return (tf.data.Dataset.from_tensor_slices(
        collections.OrderedDict(x=arrays["x"], y=arrays["y"]))
            .batch(self.options["batch_size"]))

  def client_input(self, index: int, seed: tuple[int, int]):
    return make_client_input(self._dataset(index), self.options["epsilons"][index], seed)

  def padding_input(self):
    # Gives the federated type; never sent in a round (every user is selected). No data,
    # and a fresh OS-entropy seed all the same.
    return make_client_input(self._dataset(0).take(0), self.options["epsilons"][0],
                             (secrets.randbits(63), secrets.randbits(63)))


class ApesDataSource(program_data_source.ClientArraysDataSource):
  """APES / S-APES client inputs for ``train_model`` (module doc).

  Args:
    clients: per user, ``(x, y)`` numpy arrays.
    epsilons: per user, its budget ε_i (the same multiset the process's
      de-bias was built with).
    batch_size: the users' local batch size.
    rounds: required: the rounds the ledger covers; a ``select`` that takes
      the source's iterators together past them is refused. ``None``
      (explicit, logged): no limit; then you keep count.
    rounds_spent: rounds of this ledger already run (by an earlier process;
      from your own ledger).
    insecure_seed: debug only (NOT PRIVATE).
  """

  iterator_cls = ApesIterator

  def __init__(self, clients: Sequence, epsilons: Sequence[float], *, batch_size: int = 16,
               rounds: Any = program_data_source.ROUNDS_REQUIRED, rounds_spent: int = 0,
               insecure_seed: Optional[int] = None):
    arrays = program_data_source.check_client_arrays(clients)
    eps = clip_laplace.check_epsilon(np.asarray(epsilons, np.float64).ravel(), "epsilons")
    if eps.shape != (len(arrays),):
      raise ToolkitValueError(f"give one ε per user: got {eps.size} for {len(arrays)} users.")
    if isinstance(batch_size, bool) or int(batch_size) != batch_size or batch_size < 1:
      raise ToolkitValueError(f"batch_size={batch_size!r} must be an integer >= 1.")
    super().__init__(arrays, np.ones(len(arrays)),
                     dict(batch_size=int(batch_size), epsilons=[float(e) for e in eps]),
                     insecure_seed=insecure_seed, rounds=rounds, rounds_spent=rounds_spent)
