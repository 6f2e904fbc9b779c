"""Federated data sources for TFF's program API, with the toolkit's sampling and secret seeds.

``tff.learning.programs.train_model`` (TFF 0.87) takes a
``tff.program.FederatedDataSource``, calls ``iterator()`` once and then
``select(k)`` every round; it deep-copies the iterator every round and saves
it in the program state (``to_bytes``/``from_bytes``) so that a restarted
program resumes where it stopped. The families' client inputs are structured
(SCALE's clip scale; rPDP-FL's records, rates and seeds; APES's ε and seed),
and their privacy needs the family's own client sampling and fresh secret
seeds every round, which TFF's ``DatasetDataSource`` (uniform sampling of
fixed datasets) cannot give. Stock ``DatasetDataSource`` also fails under
``train_model`` in 0.87 ("cannot pickle 'Graph' object") because its
iterator holds ``tf.data.Dataset`` objects that ``copy.deepcopy`` cannot
copy.

:class:`ClientArraysIterator` is the shared part (issue 31 item 8):

* it holds the clients' data as numpy arrays (so ``deepcopy`` and
  ``to_bytes`` work) and builds each selected client's ``tf.data`` input
  only when it is selected;
* ``select(k)`` Poisson-samples every client independently at its own rate
  (IDP-FedAvg Alg. 2; rate 1 = full participation) from an RNG seeded with
  the iterator's secret (``PrivacyRandomness.sampling_seed``), so the
  cohort's size varies round to round around ``k``, the expected cohort,
  which must be what the source was built for (anything else is refused:
  the privacy analysis fixed the rates);
* every selected client gets a fresh secret seed for the round
  (``PrivacyRandomness.client_seed(client, round)``), never derived from a
  user-visible seed unless the source was built with the loudly labelled
  ``insecure_seed`` debug mode;
* an empty cohort gets one padding client with no data (a TFF round needs at
  least one client); it contributes nothing to any sum.

A source must be told the rounds its rates were calibrated for (``rounds=T``;
the family sources take them from the calibration itself, ``from_plan``):
the privacy analysis of the rates covers T rounds, and ``train_model`` runs as
many as its ``train_total_rounds`` says. A source built without ``rounds`` is
refused with what to give; ``rounds=None`` turns the limit off explicitly
(logged: the caller then keeps the count).

**One source spends its T rounds once** (issue 48). Every ``iterator()`` draws a
fresh secret, so a second iterator (a second ``train_model`` call on the same
source, with a fresh program state or the first run's final state as
``initial_train_state``) releases new cohorts and seeds: its rounds add to the
first's. The source's :class:`RoundLedger` counts, for each iterator (an id drawn
with its secret), the rounds it has selected, and refuses the ``select`` that
would take the total past T, naming the ε that round would reach where the
iterator knows its calibration (:meth:`ClientArraysIterator.privacy_at`). A copy
of an iterator (``deepcopy``, which ``train_model`` takes every round, or
``from_bytes``, which it uses to resume) keeps the id: re-selecting a round that
id already selected draws the same cohort and seeds (same secret, same round)
and costs nothing, so restore-and-continue after a crash works. An iterator's
``to_bytes`` carries the ledger as it stood, so a run resumed in a new process
still counts its rounds. What the toolkit cannot see: a source rebuilt in a new
process from the same arrays starts a fresh count (give it ``rounds_spent``
from your own ledger, or resume the saved program state instead).

The iterator's ``to_bytes`` holds the run secret and the sampler's state: the
program state it is saved in is as sensitive as a checkpoint.
Family subclasses say how a client's input is built
(:meth:`ClientArraysIterator.client_input`).
"""
from __future__ import annotations

import collections
import copy
import io
import json
import logging
import secrets
import threading
import weakref
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp.engine import cohort_arrays
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.errors import ToolkitValueError

_HEADER = "__header__"


class _Required:
  """The default of a data source's ``rounds``: not given (refused; see :func:`check_rounds`)."""

  def __repr__(self) -> str:
    return "<required>"


ROUNDS_REQUIRED: Any = _Required()


def check_rounds(rounds: Any, source: str) -> Optional[int]:
  """``rounds`` as given to a data source: an integer >= 1, or an explicit ``None``.

  Not given at all, it is refused: a source without a round limit lets
  ``train_model`` run past the rounds the rates' privacy analysis covers
  (IDP-FedAvg Alg. 1 calibrates q and σ for T rounds; rPDP-FL's and APES's
  ledgers likewise), and nothing would say so.
  """
  if rounds is ROUNDS_REQUIRED:
    raise ToolkitValueError(
        f"{source}: give rounds=T, the number of rounds its sampling rates (or budgets) were "
        "calibrated for; the source then refuses a round past T. rounds=None turns the "
        "limit off, and then you keep the count of rounds yourself.")
  if rounds is None:
    logging.warning(
        "%s built with rounds=None: it will select any number of rounds, so nothing stops "
        "train_model past the rounds its rates were calibrated for; keep that count "
        "yourself.", source)
    return None
  if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < 1:
    raise ToolkitValueError(f"rounds={rounds!r} must be an integer >= 1 (or None for no "
                            "limit).")
  return int(rounds)


def check_rounds_spent(rounds_spent: Any, rounds: Optional[int]) -> int:
  """``rounds_spent`` as given to a data source: an integer in [0, T] (T: its ``rounds``)."""
  if (isinstance(rounds_spent, bool) or not isinstance(rounds_spent, (int, np.integer))
      or rounds_spent < 0):
    raise ToolkitValueError(f"rounds_spent={rounds_spent!r} must be an integer >= 0 (the "
                            "rounds of this calibration already run).")
  if rounds is not None and rounds_spent > rounds:
    raise ToolkitValueError(f"rounds_spent={rounds_spent} exceeds the {rounds} rounds this "
                            "calibration covers; calibrate for more rounds.")
  return int(rounds_spent)


class RoundLedger:
  """The rounds one data source's iterators have selected together (module doc; issue 48).

  IDP-FedAvg Alg. 1 (and rPDP-FL's, APES's calibrations) fix the rates for T
  rounds of Alg. 2's sampling; every round an iterator selects with a fresh
  secret is one more such round, whichever iterator selects it. ``reached``
  maps an iterator's id to the rounds it has selected (its highest round + 1);
  the total spent is ``spent_before`` plus their sum.

  Args:
    rounds: T, or ``None`` (no limit: counted, never refused).
    spent_before: rounds of this calibration spent before this ledger (the
      source's ``rounds_spent``).
    source_id: the id ``from_bytes`` finds a live ledger by (default: drawn).
  """

  def __init__(self, rounds: Optional[int], spent_before: int = 0,
               source_id: Optional[str] = None):
    self.rounds = rounds
    self.spent_before = int(spent_before)
    self.source_id = source_id or secrets.token_hex(16)
    self.reached: dict[str, int] = {}
    self._lock = threading.Lock()

  @property
  def spent(self) -> int:
    """Rounds selected so far by all iterators together (and before, ``spent_before``)."""
    return self.spent_before + sum(self.reached.values())

  def charge(self, iterator: "ClientArraysIterator", token: str, round_num: int) -> None:
    """Charges round ``round_num`` (0-based) of iterator ``token``, or refuses it.

    Rounds ``0..round_num`` of ``token`` are its own history (selected here or,
    for an iterator restored in a new process, before): a round it already
    selected costs nothing (same secret, same cohort and seeds).
    """
    with self._lock:
      before = self.reached.get(token, 0)
      after = max(before, int(round_num) + 1)
      cost = after - before
      if cost and self.rounds is not None and self.spent + cost > self.rounds:
        raise ToolkitValueError(self._refusal(iterator, before, cost))
      self.reached[token] = after

  def _refusal(self, iterator: "ClientArraysIterator", before: int, cost: int) -> str:
    total = self.spent + cost
    privacy = iterator.privacy_at(total)
    spend = (f"round {total} would spend {privacy}, over the privacy budget" if privacy else
             f"round {total} would exceed the privacy budget")
    if self.spent == before:  # this iterator's own rounds only
      return (f"this data source's rates were calibrated for {self.rounds} rounds and "
              f"{self.spent} have been selected; {spend}. "
              "Calibrate for more rounds and build the source from that calibration.")
    return (f"this data source's rates were calibrated for {self.rounds} rounds and its "
            f"iterators have already selected {self.spent} of them (a second train_model "
            f"run or iterator() on one source gets no fresh budget); {spend}. Resume the saved "
            "program state to continue a run, or calibrate for more rounds and build a new "
            "source from that calibration.")

  def __deepcopy__(self, memo: dict) -> "RoundLedger":
    """The same ledger: a copy of a source (or of an iterator) spends the same rounds."""
    memo[id(self)] = self
    return self

  def __getstate__(self) -> dict:
    return self.snapshot()

  def __setstate__(self, state: dict) -> None:
    self.rounds, self.spent_before = state["rounds"], int(state["spent_before"])
    self.source_id = state["source_id"]
    self.reached = {str(k): int(v) for k, v in state["reached"].items()}
    self._lock = threading.Lock()

  def snapshot(self) -> dict:
    with self._lock:
      return {"source_id": self.source_id, "rounds": self.rounds,
              "spent_before": self.spent_before, "reached": dict(self.reached)}

  @classmethod
  def attach(cls, snapshot: dict) -> "RoundLedger":
    """The live ledger of ``snapshot``'s source in this process, or one rebuilt from it.

    Either way the result has counted at least what the snapshot had: a resumed
    run, even in a new process, keeps the rounds it had spent.
    """
    with _LEDGERS_LOCK:
      ledger = _LEDGERS.get(snapshot["source_id"])
      if ledger is None:
        ledger = cls(snapshot["rounds"], snapshot["spent_before"], snapshot["source_id"])
        _LEDGERS[ledger.source_id] = ledger
    with ledger._lock:  # pylint: disable=protected-access
      ledger.spent_before = max(ledger.spent_before, int(snapshot["spent_before"]))
      for token, reached in snapshot["reached"].items():
        ledger.reached[token] = max(ledger.reached.get(token, 0), int(reached))
    return ledger

  def register(self) -> "RoundLedger":
    with _LEDGERS_LOCK:
      _LEDGERS[self.source_id] = self
    return self


# The live ledgers of this process's sources, by id (weak: a ledger lives while its
# source or one of its iterators does), so that ``from_bytes`` rejoins the source's count.
_LEDGERS: "weakref.WeakValueDictionary[str, RoundLedger]" = weakref.WeakValueDictionary()
_LEDGERS_LOCK = threading.Lock()


def _dataset_arrays(i: int, dataset: tf.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
  """A client's ``tf.data.Dataset`` of ``OrderedDict(x=..., y=...)`` (batched or not), read once."""
  spec = dataset.element_spec
  if not isinstance(spec, Mapping) or not {"x", "y"} <= set(spec):
    raise ToolkitValueError(
        f"client {i}: a dataset's elements must be dicts with 'x' and 'y' (as TFF's "
        f"ClientData gives), got {spec}; map them, e.g. ds.map(lambda x, y: "
        "collections.OrderedDict(x=x, y=y)).")
  examples = cohort_arrays.examples_of_dataset(
      dataset.map(lambda e: collections.OrderedDict(x=e["x"], y=e["y"])))
  return examples["x"], examples["y"]


def check_client_arrays(clients: Sequence[Any]) -> list[dict]:
  """``[(x, y), ...]``, dicts with ``x``, ``y``, or clients' ``tf.data.Dataset``s (issue 51)
  as a list of ``{"x", "y"}`` numpy arrays; non-finite features are refused."""
  out = []
  for i, client in enumerate(clients):
    if isinstance(client, tf.data.Dataset):
      x, y = _dataset_arrays(i, client)
    else:
      x, y = (client["x"], client["y"]) if isinstance(client, Mapping) else client
    x, y = np.asarray(x), np.asarray(y)
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
      raise ToolkitValueError(f"client {i}: x must be numeric (got dtype {x.dtype}); encode "
                              "categorical columns as numbers first.")
    if len(x) != len(y):
      raise ToolkitValueError(f"client {i}: x has {len(x)} rows but y has {len(y)}; give one "
                              "label per example.")
    if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
      raise ToolkitValueError(f"client {i}: x holds NaN or infinite values; clean or drop "
                              "those examples first (training would spread them to the model).")
    out.append({"x": x, "y": y})
  if not out:
    raise ToolkitValueError("a data source needs at least one client.")
  shapes = {(c["x"].shape[1:], c["x"].dtype, c["y"].shape[1:], c["y"].dtype) for c in out}
  if len(shapes) > 1:
    raise ToolkitValueError("every client's x and y must have the same trailing shape and "
                            f"dtype; got {sorted(map(str, shapes))}.")
  return out


def check_rates(rates: Sequence[float], num_clients: int, what: str) -> np.ndarray:
  """``rates`` as a new float64 array (one per client, each in [0, 1]), or a one-line refusal.

  A copy, never a view of the caller's array: rates changed after the source
  was built must not change who a calibrated source samples (issue 48).
  """
  rates = np.array(rates, np.float64).ravel()
  if rates.shape != (num_clients,):
    raise ToolkitValueError(f"give one {what} per client: got {rates.size} for {num_clients}.")
  if np.any(~np.isfinite(rates)) or np.any(rates < 0) or np.any(rates > 1):
    raise ToolkitValueError(f"every {what} must lie in [0, 1].")
  return rates


class ClientArraysIterator(tff.program.FederatedDataSourceIterator):
  """Poisson client sampling with fresh secret seeds over clients held as arrays (module doc).

  Args:
    clients: per client, a dict of numpy arrays (``x``, ``y`` and any
      per-record field the family needs).
    rates: each client's sampling probability per round.
    options: the family's JSON-serialisable settings (batch size, clip
      scales, budgets, ...).
    randomness: the iterator's secret (:class:`PrivacyRandomness`).
    clients_per_round: the ``k`` that ``select`` accepts (default: the
      expected cohort Σ rates, rounded).
    rounds: the rounds the rates were calibrated for; ``select`` refuses a
      round that takes the source's iterators together past them (the
      privacy analysis covers no more). ``None``: no limit (you keep the
      ledger).
    ledger: the source's :class:`RoundLedger`, shared by all its iterators
      and their copies (default: a ledger of this iterator alone).
    token: this iterator's id in the ledger, drawn with its secret and kept
      by its copies (default: drawn).
  """

  def __init__(self, clients: Sequence[dict], rates: np.ndarray, options: dict,
               randomness: PrivacyRandomness, clients_per_round: Optional[int] = None,
               round_num: int = 0, sampler_state: Optional[dict] = None,
               rounds: Optional[int] = None, ledger: Optional[RoundLedger] = None,
               token: Optional[str] = None):
    self._clients = [dict(c) for c in clients]
    self._rates = np.asarray(rates, np.float64)
    self._options = dict(options)
    self._randomness = randomness
    expected = float(self._rates.sum())
    self.clients_per_round = (int(round(expected)) if clients_per_round is None
                              else int(clients_per_round))
    self.round_num = int(round_num)
    self.rounds = None if rounds is None else int(rounds)
    self._ledger = (RoundLedger(self.rounds).register() if ledger is None else ledger)
    self._token = secrets.token_hex(16) if token is None else str(token)
    self._rng = np.random.Generator(np.random.PCG64(randomness.sampling_seed()))
    if sampler_state is not None:
      self._rng.bit_generator.state = sampler_state
    self._federated_type = tff.FederatedType(_type_of(self.padding_input()), tff.CLIENTS)

  # -- the family's part ---------------------------------------------------------
  def client_input(self, index: int, seed: tuple[int, int]) -> Any:
    """Client ``index``'s input for one round, drawing with ``seed`` (its secret for the round)."""
    raise NotImplementedError

  def padding_input(self) -> Any:
    """An input with no data (for an empty cohort): contributes nothing."""
    raise NotImplementedError

  def privacy_at(self, rounds: int) -> Optional[str]:
    """What ``rounds`` rounds of these rates spend (e.g. "ε per group (…) against budgets
    (…)"), for the refusal past the calibrated rounds; ``None`` when the iterator does not
    know its calibration (the refusal then names the rounds only)."""
    del rounds
    return None

  # -- FederatedDataSourceIterator -------------------------------------------------
  @property
  def federated_type(self) -> tff.FederatedType:
    return self._federated_type

  @property
  def expected_clients_per_round(self) -> float:
    return float(self._rates.sum())

  @property
  def rounds_spent(self) -> int:
    """Rounds the source's iterators have selected together (:class:`RoundLedger`)."""
    return self._ledger.spent

  def select(self, k: Optional[int] = None) -> list:
    """One round's client inputs: a Poisson cohort, each client with a fresh secret seed.

    IDP-FedAvg Alg. 2's sampling: client i joins with probability q_i, independently.
    The round is charged to the source's ledger first, and refused if it would take the
    source's iterators together past the calibrated rounds (module doc).
    """
    if k is not None and int(k) != self.clients_per_round:
      raise ToolkitValueError(
          f"this data source samples every client independently at its calibrated rate "
          f"(expected cohort {self.expected_clients_per_round:.4g} clients, so the realised "
          f"cohort varies); select it with k={self.clients_per_round} "
          f"(train_per_round_clients={self.clients_per_round}), not k={k}.")
    self._ledger.charge(self, self._token, self.round_num)
    chosen = np.flatnonzero(self._rng.random(self._rates.size) < self._rates)
    inputs = [self.client_input(int(i), self._randomness.client_seed(str(int(i)),
                                                                     self.round_num))
              for i in chosen]
    self.round_num += 1
    return inputs if inputs else [self.padding_input()]

  # -- helpers for subclasses --------------------------------------------------------
  @property
  def options(self) -> dict:
    return self._options

  def arrays(self, index: int) -> dict:
    return self._clients[index]

  @property
  def num_clients(self) -> int:
    return len(self._clients)

  # -- Serializable ----------------------------------------------------------------
  def to_bytes(self) -> bytes:
    """The clients' arrays, rates, settings, round, sampler state and secret (sensitive)."""
    header = {"options": self._options, "round_num": self.round_num, "rounds": self.rounds,
              "clients_per_round": self.clients_per_round, "token": self._token,
              "ledger": self._ledger.snapshot(),
              "sampler_state": self._rng.bit_generator.state,
              "randomness": self._randomness.get_state(),
              "fields": [sorted(c) for c in self._clients]}
    arrays = {f"c{i}/{key}": value for i, c in enumerate(self._clients)
              for key, value in c.items()}
    buffer = io.BytesIO()
    np.savez(buffer, rates=self._rates, **arrays,
             **{_HEADER: np.frombuffer(json.dumps(header).encode(), np.uint8)})
    return buffer.getvalue()

  @classmethod
  def from_bytes(cls, buffer: bytes) -> "ClientArraysIterator":
    with np.load(io.BytesIO(buffer), allow_pickle=False) as data:
      header = json.loads(bytes(data[_HEADER]).decode())
      clients = [{key: data[f"c{i}/{key}"] for key in fields}
                 for i, fields in enumerate(header["fields"])]
      rates = data["rates"]
    randomness = PrivacyRandomness(b"\0" * 32, header["randomness"]["reproducible"])
    randomness.set_state(header["randomness"])
    ledger = RoundLedger.attach(header["ledger"]) if "ledger" in header else None
    return cls(clients, rates, header["options"], randomness,
               clients_per_round=header["clients_per_round"], round_num=header["round_num"],
               sampler_state=header["sampler_state"], rounds=header.get("rounds"),
               ledger=ledger, token=header.get("token"))

  def __deepcopy__(self, memo: dict) -> "ClientArraysIterator":
    """A copy with its own sampler and round (``train_model`` copies the iterator every round).

    The clients' arrays and the federated type are immutable here and shared; so are the
    source's round ledger and this iterator's id in it (a copy re-selecting a round costs
    nothing; module doc).
    """
    clone = copy.copy(self)
    clone._rng = copy.deepcopy(self._rng, memo)  # pylint: disable=protected-access
    return clone  # copy.deepcopy records it in memo

  def __eq__(self, other: object) -> bool:
    if not isinstance(other, ClientArraysIterator):
      return NotImplemented
    if type(self) is not type(other) or len(self._clients) != len(other._clients):
      return False
    same_arrays = all(
        sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a)
        for a, b in zip(self._clients, other._clients))  # pylint: disable=protected-access
    return (same_arrays and np.array_equal(self._rates, other._rates)
            and self._options == other._options and self.round_num == other.round_num
            and self.clients_per_round == other.clients_per_round
            and self.rounds == other.rounds and self._token == other._token
            and self._rng.bit_generator.state == other._rng.bit_generator.state
            and self._randomness.get_state() == other._randomness.get_state())


class ClientArraysDataSource(tff.program.FederatedDataSource):
  """A ``tff.program.FederatedDataSource`` whose iterators are ``iterator_cls`` (module doc).

  Each ``iterator()`` call draws its own secret from OS entropy, unless
  ``insecure_seed`` is given: then every secret derives from it (for tests
  and debugging only; logged as NOT PRIVATE). All its iterators share one
  :class:`RoundLedger`: together they select at most ``rounds`` rounds,
  ``rounds_spent`` of which were spent before the source was built (by an
  earlier process, from your own ledger).
  """

  iterator_cls: type = ClientArraysIterator

  def __init__(self, clients: Sequence[dict], rates: np.ndarray, options: dict,
               clients_per_round: Optional[int] = None, insecure_seed: Optional[int] = None,
               rounds: Any = ROUNDS_REQUIRED, rounds_spent: int = 0):
    rounds = check_rounds(rounds, type(self).__name__)
    # A copy of the rates: the caller's array changed later must not change the sampling.
    self._args = (list(clients), np.array(rates, np.float64), dict(options))
    self._clients_per_round = clients_per_round
    self._rounds = rounds
    self._insecure_seed = insecure_seed
    self._ledger = RoundLedger(rounds, check_rounds_spent(rounds_spent, rounds)).register()
    prototype = self.iterator()
    self._type = prototype.federated_type
    # The k (train_per_round_clients) this source's iterators accept.
    self.clients_per_round = prototype.clients_per_round

  @property
  def federated_type(self) -> tff.FederatedType:
    return self._type

  @property
  def rounds(self) -> Optional[int]:
    """T, the rounds the source's calibration covers (``None``: no limit)."""
    return self._rounds

  @property
  def rounds_spent(self) -> int:
    """Rounds its iterators have selected together, plus ``rounds_spent`` given at build."""
    return self._ledger.spent

  def iterator(self) -> ClientArraysIterator:
    """An iterator with a fresh secret; its rounds add to the source's count (class doc)."""
    randomness = (PrivacyRandomness.secret() if self._insecure_seed is None else
                  PrivacyRandomness.from_seed(self._insecure_seed, type(self).__name__))
    return self.iterator_cls(*self._args, randomness,
                             clients_per_round=self._clients_per_round, rounds=self._rounds,
                             ledger=self._ledger)


def _type_of(value: Any) -> tff.types.Type:
  """The TFF type of one client input (a dataset, or a dict of datasets)."""
  if isinstance(value, tf.data.Dataset):
    return tff.SequenceType(tff.types.tensorflow_to_type(value.element_spec))
  if isinstance(value, dict):
    return tff.StructWithPythonType([(k, _type_of(v)) for k, v in value.items()], type(value))
  raise TypeError(f"a client input must be a dataset or a dict of datasets; got {type(value)}")
