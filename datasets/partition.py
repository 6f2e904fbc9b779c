"""Partitioners: who holds which example (pure numpy, seeded, bit-for-bit).

IDP-FedAvg paper, Sec. V-B ("Federated Datasets"): FMNIST keeps its natural
per-writer split or is dealt i.i.d.; CIFAR-10 (500 clients) is split with the
Pachinko Allocation Method, as TFF's CIFAR-100 federation; SVHN (725 clients)
is dealt i.i.d. Every partitioner here takes labels (or sizes) and a
`np.random.Generator`, and returns an `Assignment`: for each client, the
indices of its examples in the source order. The same generator state gives
the same assignment, bit for bit (numpy's PCG64 stream; the manifest records
the numpy version). No TensorFlow is imported.

Partitioners
------------
* `iid_equal`: a uniform random permutation dealt into K consecutive chunks
  whose sizes differ by at most one (the first n mod K clients get one more).
* `iid_keep_sizes`: a uniform random permutation cut at given client sizes
  (e.g. each EMNIST writer keeps its number of examples, only the labels
  become i.i.d.).
* `pachinko`: the two-level Pachinko allocation of Reddi et al., "Adaptive
  Federated Optimization" (ICLR 2021, App. C.4), used by TFF's CIFAR-100.
  Clients are filled one after another. Client k draws a coarse-label
  multinomial ~ Dirichlet(alpha) over the coarse labels that still have
  examples, and for every coarse label a fine-label multinomial ~
  Dirichlet(beta) over its fine labels that still have examples. Each of its
  `examples_per_client` examples is drawn by sampling a coarse label, then a
  fine label, then an example of that fine label uniformly without
  replacement. When a fine label runs out it is removed and the client's
  fine multinomial is renormalised; when a coarse label runs out, likewise for
  the coarse multinomial; later clients never see exhausted labels.
* `dirichlet_turns`: one-level Dirichlet, clients drawing labels in turns
  (the procedure behind the published CIFAR-10 split of the paper's code,
  `src/notebooks/prepare_cifar10.ipynb` of luckyos-code/flidp). Every client
  draws a label multinomial ~ Dirichlet(alpha * C * p), where p are the
  remaining label proportions and C the number of classes (alpha = 0.1 per
  class for balanced CIFAR-10, as in the notebook, whose concentration is the
  label-proportion vector). Clients then take turns (0, 1, ..., K-1, 0, ...),
  each drawing one label from its multinomial, until some label runs out;
  that label is removed and *all* clients redraw their multinomials over the
  remaining labels, and the turns continue where they stopped. Client sizes
  therefore differ by at most one (100 each for 50,000 / 500). The examples
  of each label are finally dealt, in random order, to the clients that drew
  it (the notebook picks a random eligible client per example, which gives
  the same distribution).

  Difference to Pachinko: one level instead of two; every label remains
  reachable for every client after each redraw, and sizes come from the turns
  rather than a fixed per-client quota.

Degenerate Dirichlet draws (all mass on exhausted labels, so a renormalised
multinomial would be 0/0) fall back to uniform over the remaining labels.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Assignment:
  """For each client, the source indices of its examples (in client order).

  Attributes:
    indices: One int64 array per client.
  """

  indices: tuple[np.ndarray, ...]

  @property
  def num_clients(self) -> int:
    return len(self.indices)

  @property
  def sizes(self) -> np.ndarray:
    return np.asarray([len(i) for i in self.indices], dtype=np.int64)

  @property
  def num_examples(self) -> int:
    return int(self.sizes.sum())

  def client_of_example(self, num_source_examples: int) -> np.ndarray:
    """Client index of every source example (-1: not assigned)."""
    owner = np.full(num_source_examples, -1, dtype=np.int64)
    for k, idx in enumerate(self.indices):
      owner[idx] = k
    return owner

  def checksum(self) -> str:
    """SHA-256 of the assignment: per client, its size and its indices.

    Both are hashed as little-endian int64, clients in order, so the checksum
    changes with any moved, reordered or dropped example.
    """
    h = hashlib.sha256()
    for idx in self.indices:
      h.update(np.int64(len(idx)).astype("<i8").tobytes())
      h.update(np.ascontiguousarray(idx, dtype="<i8").tobytes())
    return h.hexdigest()

  def label_counts(self, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """[K, C] int64: how many examples of each label every client holds."""
    labels = np.asarray(labels)
    return np.stack([np.bincount(labels[idx], minlength=num_classes)
                     for idx in self.indices]).astype(np.int64)


def _check_rng(rng) -> np.random.Generator:
  if not isinstance(rng, np.random.Generator):
    raise TypeError("rng must be a np.random.Generator, e.g. "
                    f"np.random.default_rng(seed); got {type(rng).__name__}.")
  return rng


def _check_count(name: str, value, minimum: int = 1) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
  return int(value)


def iid_equal(num_examples: int, num_clients: int, rng: np.random.Generator) -> Assignment:
  """Uniformly random, sizes ⌈n/K⌉ for the first n mod K clients, ⌊n/K⌋ after."""
  _check_rng(rng)
  n = _check_count("num_examples", num_examples)
  k = _check_count("num_clients", num_clients)
  if k > n:
    raise ValueError(f"num_clients={k} exceeds the {n} examples; every client "
                     "needs at least one example.")
  perm = rng.permutation(n).astype(np.int64)
  base, extra = divmod(n, k)
  sizes = np.full(k, base, dtype=np.int64)
  sizes[:extra] += 1
  return Assignment(tuple(np.split(perm, np.cumsum(sizes)[:-1])))


def iid_keep_sizes(sizes: Sequence[int], rng: np.random.Generator) -> Assignment:
  """Uniformly random, client k gets exactly sizes[k] examples (n = Σ sizes)."""
  _check_rng(rng)
  sizes = np.asarray(sizes, dtype=np.int64)
  if sizes.ndim != 1 or sizes.size == 0 or np.any(sizes < 0) or sizes.sum() < 1:
    raise ValueError("sizes must be a non-empty 1-D sequence of integers >= 0 "
                     "with a positive sum.")
  perm = rng.permutation(int(sizes.sum())).astype(np.int64)
  return Assignment(tuple(np.split(perm, np.cumsum(sizes)[:-1])))


def from_groups(groups: np.ndarray, num_groups: Optional[int] = None) -> Assignment:
  """The natural partition: client k holds every example with groups == k.

  Source order is kept within each client (no randomness).
  """
  groups = np.asarray(groups, dtype=np.int64)
  k = int(groups.max()) + 1 if num_groups is None else num_groups
  order = np.argsort(groups, kind="stable")
  counts = np.bincount(groups, minlength=k)
  return Assignment(tuple(np.split(order.astype(np.int64), np.cumsum(counts)[:-1])))


def _draw(cdf: np.ndarray, u: float) -> int:
  """Index i with probability w_i, from cdf = cumsum(w) (zero weights never)."""
  i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
  return min(i, len(cdf) - 1)


def _dirichlet(rng: np.random.Generator, concentration: np.ndarray,
               size: Optional[int] = None) -> np.ndarray:
  w = rng.dirichlet(concentration, size=size)
  w = np.atleast_2d(w)
  bad = ~np.isfinite(w).all(axis=1) | (w.sum(axis=1) <= 0)
  if bad.any():
    w[bad] = 1.0 / w.shape[1]
  return w if size is not None else w[0]


def _renormalised(w: np.ndarray, keep: np.ndarray) -> np.ndarray:
  w = w[keep]
  s = w.sum()
  if not np.isfinite(s) or s <= 0:
    return np.full(len(w), 1.0 / len(w)) if len(w) else w
  return w / s


def pachinko(labels: np.ndarray, coarse_of_label: Sequence[int], num_clients: int,
             examples_per_client: int, alpha: float, beta: float,
             rng: np.random.Generator, progress=None) -> Assignment:
  """Two-level Pachinko allocation (Reddi et al. 2021, App. C.4); see module doc.

  Args:
    labels: Fine label of every source example, ints in [0, F).
    coarse_of_label: Coarse label of every fine label, length F.
    num_clients: K.
    examples_per_client: Examples per client; K * examples_per_client must not
      exceed the number of examples (unused ones are left out).
    alpha: Dirichlet concentration over coarse labels (TFF CIFAR-100: 0.1).
    beta: Dirichlet concentration over fine labels (TFF CIFAR-100: 10).
    rng: The generator.
    progress: Optional callable(n) called after each client with its size.

  Returns:
    An `Assignment` with exactly `examples_per_client` examples per client.
  """
  _check_rng(rng)
  labels = np.asarray(labels, dtype=np.int64)
  coarse_of_label = np.asarray(coarse_of_label, dtype=np.int64)
  k = _check_count("num_clients", num_clients)
  m = _check_count("examples_per_client", examples_per_client)
  if not (alpha > 0 and beta > 0 and np.isfinite(alpha) and np.isfinite(beta)):
    raise ValueError(f"alpha and beta must be finite and > 0, got {alpha!r}, {beta!r}.")
  if labels.size and (labels.min() < 0 or labels.max() >= len(coarse_of_label)):
    raise ValueError("every label needs a coarse label: labels must lie in "
                     f"[0, {len(coarse_of_label)}).")
  if k * m > labels.size:
    raise ValueError(f"{k} clients x {m} examples = {k * m} exceeds the "
                     f"{labels.size} examples.")
  num_fine = len(coarse_of_label)
  num_coarse = int(coarse_of_label.max()) + 1
  # Examples of each fine label in random order; drawing "uniformly without
  # replacement" is popping from the front.
  pools = [rng.permutation(np.flatnonzero(labels == f)).astype(np.int64)
           for f in range(num_fine)]
  taken = np.zeros(num_fine, dtype=np.int64)
  remaining = np.array([len(p) for p in pools], dtype=np.int64)
  fine_of_coarse = [np.flatnonzero(coarse_of_label == c) for c in range(num_coarse)]

  out = []
  for _ in range(k):
    coarse_avail = np.array([c for c in range(num_coarse)
                             if remaining[fine_of_coarse[c]].sum() > 0])
    w_coarse = _dirichlet(rng, np.full(len(coarse_avail), float(alpha)))
    fine_avail, w_fine = {}, {}
    for c in coarse_avail:
      f_av = fine_of_coarse[c][remaining[fine_of_coarse[c]] > 0]
      fine_avail[c] = f_av
      w_fine[c] = _dirichlet(rng, np.full(len(f_av), float(beta)))
    cdf_coarse = np.cumsum(w_coarse)
    cdf_fine = {c: np.cumsum(w) for c, w in w_fine.items()}
    mine = np.empty(m, dtype=np.int64)
    for j in range(m):
      ci = _draw(cdf_coarse, rng.random())
      c = int(coarse_avail[ci])
      fi = _draw(cdf_fine[c], rng.random())
      f = int(fine_avail[c][fi])
      mine[j] = pools[f][taken[f]]
      taken[f] += 1
      remaining[f] -= 1
      if remaining[f] == 0:
        keep = np.arange(len(fine_avail[c])) != fi
        fine_avail[c] = fine_avail[c][keep]
        w_fine[c] = _renormalised(w_fine[c], keep)
        cdf_fine[c] = np.cumsum(w_fine[c])
        if len(fine_avail[c]) == 0:
          keep_c = np.arange(len(coarse_avail)) != ci
          coarse_avail = coarse_avail[keep_c]
          w_coarse = _renormalised(w_coarse, keep_c)
          cdf_coarse = np.cumsum(w_coarse)
    out.append(mine)
    if progress is not None:
      progress(m)
  return Assignment(tuple(out))


def dirichlet_turns(labels: np.ndarray, num_clients: int, alpha: float,
                    rng: np.random.Generator, num_classes: Optional[int] = None,
                    progress=None) -> Assignment:
  """One-level Dirichlet with clients drawing labels in turns (see module doc).

  Args:
    labels: Label of every source example, ints in [0, C).
    num_clients: K; every example is used, sizes are ⌊n/K⌋ or ⌈n/K⌉.
    alpha: Concentration per class for balanced labels (paper's split: 0.1).
      The concentration vector is alpha * C * (remaining label proportions).
    rng: The generator.
    num_classes: C (default: max label + 1).
    progress: Optional callable(n) called with the number of drawn labels.

  Returns:
    An `Assignment` that uses every example exactly once.
  """
  _check_rng(rng)
  labels = np.asarray(labels, dtype=np.int64)
  k = _check_count("num_clients", num_clients)
  if not (alpha > 0 and np.isfinite(alpha)):
    raise ValueError(f"alpha must be finite and > 0, got {alpha!r}.")
  if k > labels.size:
    raise ValueError(f"num_clients={k} exceeds the {labels.size} examples.")
  c_total = int(labels.max()) + 1 if num_classes is None else int(num_classes)
  counts = np.bincount(labels, minlength=c_total).astype(np.int64)
  client_counts = np.zeros((k, c_total), dtype=np.int64)
  avail = np.flatnonzero(counts > 0)
  current = 0
  while avail.size:
    conc = alpha * c_total * counts[avail] / counts[avail].sum()
    cdf = np.cumsum(_dirichlet(rng, conc, size=k), axis=1)
    left = counts[avail].copy()
    drawn = 0
    while left.min() > 0:
      i = _draw(cdf[current], rng.random())
      left[i] -= 1
      client_counts[current, avail[i]] += 1
      current = (current + 1) % k
      drawn += 1
    counts[avail] = left
    avail = avail[left > 0]
    if progress is not None:
      progress(drawn)
  # Deal each label's examples, in random order, to the clients that drew it.
  per_client: list[list[np.ndarray]] = [[] for _ in range(k)]
  for label in range(c_total):
    pool = rng.permutation(np.flatnonzero(labels == label)).astype(np.int64)
    bounds = np.cumsum(client_counts[:, label])[:-1]
    for client, part in enumerate(np.split(pool, bounds)):
      if part.size:
        per_client[client].append(part)
  out = []
  for parts in per_client:
    idx = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    out.append(rng.permutation(idx))
  return Assignment(tuple(out))


def label_entropy(label_counts: np.ndarray) -> np.ndarray:
  """Shannon entropy (nats) of every client's label distribution, [K]."""
  counts = np.asarray(label_counts, dtype=np.float64)
  p = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
  with np.errstate(divide="ignore", invalid="ignore"):
    terms = np.where(p > 0, -p * np.log(p), 0.0)
  return terms.sum(axis=1)
