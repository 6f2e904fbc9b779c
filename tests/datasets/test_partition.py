"""Partition properties (pure numpy): coverage, sizes, determinism, skew."""
import numpy as np
import pytest

from datasets import partition as P
from datasets import specs

PAIRS = specs.CIFAR10_COARSE["pairs"]


def _balanced_labels(n_per_class=500, classes=10, seed=0):
  labels = np.repeat(np.arange(classes), n_per_class)
  np.random.default_rng(seed).shuffle(labels)
  return labels


def _assert_each_example_once(a: P.Assignment, n: int):
  used = np.concatenate(a.indices)
  assert len(used) == n
  assert np.array_equal(np.sort(used), np.arange(n))


def test_iid_equal_uses_every_example_once_with_documented_sizes():
  a = P.iid_equal(604_388, 725, np.random.default_rng(0))     # SVHN train + extra
  _assert_each_example_once(a, 604_388)
  sizes = a.sizes
  # 604,388 = 725 * 833 + 463: the first 463 clients hold 834, the rest 833.
  assert (sizes[:463] == 834).all() and (sizes[463:] == 833).all()
  b = P.iid_equal(50_000, 500, np.random.default_rng(0))      # CIFAR-10
  assert (b.sizes == 100).all()


def test_iid_keep_sizes_keeps_every_clients_size():
  sizes = np.array([5, 1, 0, 12, 7])
  a = P.iid_keep_sizes(sizes, np.random.default_rng(3))
  assert a.sizes.tolist() == sizes.tolist()
  _assert_each_example_once(a, sizes.sum())


def test_natural_partition_groups_examples_by_writer_in_source_order():
  groups = np.array([2, 0, 2, 1, 0, 2])
  a = P.from_groups(groups, 4)
  assert [i.tolist() for i in a.indices] == [[1, 4], [3], [0, 2, 5], []]


@pytest.mark.parametrize("make", [
    lambda labels, rng: P.iid_equal(len(labels), 50, rng),
    lambda labels, rng: P.pachinko(labels, PAIRS, 50, 100, 0.1, 10.0, rng),
    lambda labels, rng: P.dirichlet_turns(labels, 50, 0.1, rng),
], ids=["iid", "pachinko", "dirichlet"])
def test_same_seed_same_checksum_and_other_seed_another(make):
  labels = _balanced_labels()
  a1 = make(labels, np.random.default_rng(7))
  a2 = make(labels, np.random.default_rng(7))
  b = make(labels, np.random.default_rng(8))
  assert a1.checksum() == a2.checksum()
  assert all(np.array_equal(x, y) for x, y in zip(a1.indices, a2.indices))
  assert a1.checksum() != b.checksum()
  _assert_each_example_once(a1, len(labels))


def test_checksum_sees_any_moved_or_reordered_example():
  a = P.Assignment((np.array([0, 1]), np.array([2, 3])))
  assert a.checksum() != P.Assignment((np.array([1, 0]), np.array([2, 3]))).checksum()
  assert a.checksum() != P.Assignment((np.array([0]), np.array([1, 2, 3]))).checksum()
  assert a.checksum() == P.Assignment((np.array([0, 1]), np.array([2, 3]))).checksum()


def test_pachinko_gives_each_client_its_quota_and_uses_all_examples():
  labels = _balanced_labels()                           # 5,000 examples
  a = P.pachinko(labels, PAIRS, 50, 100, 0.1, 10.0, np.random.default_rng(0))
  assert (a.sizes == 100).all()
  _assert_each_example_once(a, 5000)
  # Fewer slots than examples: the rest stays unassigned, nothing twice.
  b = P.pachinko(labels, PAIRS, 30, 100, 0.1, 10.0, np.random.default_rng(0))
  used = np.concatenate(b.indices)
  assert len(used) == 3000 == len(np.unique(used))


def test_smaller_pachinko_alpha_gives_more_label_skew():
  labels = _balanced_labels()
  def mean_entropy(alpha, seed):
    a = P.pachinko(labels, PAIRS, 50, 100, alpha, 10.0, np.random.default_rng(seed))
    return P.label_entropy(a.label_counts(labels, 10)).mean()
  entropies = [np.mean([mean_entropy(alpha, s) for s in range(3)])
               for alpha in (0.01, 0.1, 1.0, 100.0)]
  assert all(x < y for x, y in zip(entropies, entropies[1:])), entropies
  # α → 0: about one coarse pair per client (entropy ≈ ln 2 with β = 10);
  # α → ∞: close to uniform over all ten labels (ln 10 = 2.30).
  assert entropies[0] < 0.9 and entropies[-1] > 2.0


def test_pachinko_coarse_labels_group_the_fine_labels():
  labels = _balanced_labels()
  a = P.pachinko(labels, PAIRS, 50, 100, 0.001, 1000.0, np.random.default_rng(1))
  counts = a.label_counts(labels, 10)
  coarse = np.zeros((50, 5), dtype=int)
  for fine, c in enumerate(PAIRS):
    coarse[:, c] += counts[:, fine]
  # Nearly all clients draw from one coarse pair (until pairs run out) and,
  # with a large β, from both of its fine labels.
  dominated = coarse.max(axis=1) >= 90
  assert dominated.mean() > 0.6
  pairs = np.array(PAIRS)
  for k in np.flatnonzero(dominated[:30]):          # before labels run out
    both = counts[k, pairs == coarse[k].argmax()]
    assert both.min() >= 20, (k, counts[k])


def test_dirichlet_turns_sizes_coverage_and_skew():
  labels = _balanced_labels()
  a = P.dirichlet_turns(labels, 50, 0.1, np.random.default_rng(0))
  assert (a.sizes == 100).all()                          # 5,000 / 50 in turns
  _assert_each_example_once(a, 5000)
  c = P.dirichlet_turns(labels, 37, 0.1, np.random.default_rng(0))
  assert set(c.sizes.tolist()) <= {5000 // 37, 5000 // 37 + 1}
  _assert_each_example_once(c, 5000)
  skewed = P.label_entropy(a.label_counts(labels, 10)).mean()
  flat = P.label_entropy(P.dirichlet_turns(labels, 50, 100.0, np.random.default_rng(0))
                         .label_counts(labels, 10)).mean()
  assert skewed < flat - 0.5


def test_partitioners_reject_bad_input():
  rng = np.random.default_rng(0)
  labels = _balanced_labels(10)
  with pytest.raises(ValueError, match="exceeds"):
    P.iid_equal(5, 6, rng)
  with pytest.raises(ValueError, match="exceeds"):
    P.pachinko(labels, PAIRS, 11, 10, 0.1, 10, rng)
  with pytest.raises(ValueError, match="alpha"):
    P.pachinko(labels, PAIRS, 5, 10, 0.0, 10, rng)
  with pytest.raises(ValueError, match="coarse label"):
    P.pachinko(labels, PAIRS[:5], 5, 10, 0.1, 10, rng)
  with pytest.raises(ValueError, match="alpha"):
    P.dirichlet_turns(labels, 5, -1.0, rng)
  with pytest.raises(TypeError, match="Generator"):
    P.iid_equal(10, 2, 0)
