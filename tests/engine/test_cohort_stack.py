"""tff_idp.engine.cohort_stack: padded, masked local steps and memory-bounded chunks."""
import numpy as np
import pytest

from tff_idp.engine import cohort_stack


def test_batches_run_across_epochs_with_a_short_last_one():
  order = np.array([2, 0, 1, 1, 2, 0, 0, 2, 1])  # 3 examples, 3 epochs
  batches = cohort_stack.order_batches(order, 4)
  assert [b.tolist() for b in batches] == [[2, 0, 1, 1], [2, 0, 0, 2], [1]]
  assert cohort_stack.order_batches(np.zeros(0, np.int64), 4) == []


def test_stacked_steps_point_at_each_clients_rows_and_mask_the_padding():
  examples = [{"x": np.array([[1.0], [2.0]], np.float32)},
              {"x": np.zeros((0, 1), np.float32)},
              {"x": np.array([[3.0], [4.0], [5.0]], np.float32)}]
  batches = [[np.array([1, 0]), np.array([1])], [], [np.array([2, 0, 1])]]
  s = cohort_stack.stack_steps(examples, batches)
  assert s.index.shape == s.mask.shape == (3, 2, 3) and s.num_steps == 2
  np.testing.assert_array_equal(s.examples["x"][:, 0], [1, 2, 3, 4, 5, 0])  # + padding row
  pad = 5
  np.testing.assert_array_equal(s.index[0], [[1, 0, pad], [1, pad, pad]])
  np.testing.assert_array_equal(s.index[1], [[pad] * 3] * 2)
  np.testing.assert_array_equal(s.index[2], [[4, 2, 3], [pad] * 3])
  np.testing.assert_array_equal(s.mask.sum(axis=2), [[2, 1], [0, 0], [3, 0]])
  assert np.all(s.examples["x"][s.index[s.mask == 0]] == 0)


def test_chunks_sort_by_steps_cover_the_cohort_once_and_bound_memory():
  steps = [5, 1, 3, 1, 9, 0, 3]
  chunks = cohort_stack.plan_chunks(steps, bytes_per_client=100, max_chunk_bytes=250)
  assert [len(c) for c in chunks] == [2, 2, 2, 1]  # 250 // 100 clients per chunk
  flat = np.concatenate(chunks)
  assert sorted(flat.tolist()) == list(range(len(steps)))
  assert [steps[i] for i in flat] == sorted(steps)
  assert flat.tolist()[:3] == [5, 1, 3]  # stable: equal sizes keep the cohort order
  assert cohort_stack.chunk_count(7, 100, 250) == len(chunks)
  one = cohort_stack.plan_chunks(steps, bytes_per_client=10**12, max_chunk_bytes=1)
  assert all(len(c) == 1 for c in one)  # a client larger than the budget trains alone
  capped = cohort_stack.plan_chunks(steps, 1, max_chunk_clients=3)
  assert [len(c) for c in capped] == [3, 3, 1]
  assert cohort_stack.plan_chunks([], 1) == []


def test_stacked_steps_dtypes_and_a_single_client():
  """Bug caught: an int64 index or float64 mask (twice the documented memory), padding that
  changes a feature's dtype, a stack that needs a second client."""
  examples = [{"x": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
               "y": np.array([7, 8], np.int32)}]
  s = cohort_stack.stack_steps(examples, [[np.array([1]), np.array([0])]])
  assert s.index.dtype == np.int32 and s.mask.dtype == np.float32
  assert s.examples["x"].dtype == np.float32 and s.examples["y"].dtype == np.int32
  np.testing.assert_array_equal(s.examples["x"], [[1, 2], [3, 4], [0, 0]])
  np.testing.assert_array_equal(s.examples["y"], [7, 8, 0])
  assert s.index.shape == (1, 2, 1) and s.num_steps == 2  # batches of one: width 1
  np.testing.assert_array_equal(s.index[0, :, 0], [1, 0])
  np.testing.assert_array_equal(s.mask, np.ones((1, 2, 1)))


def test_clients_of_one_step_or_none_get_one_step_of_width_one():
  examples = [{"x": np.array([1.0, 2.0], np.float32)}, {"x": np.array([3.0], np.float32)}]
  one = cohort_stack.stack_steps(examples, [[np.array([1])], [np.array([0])]])
  assert one.num_steps == 1 and one.index.shape == (2, 1, 1)
  np.testing.assert_array_equal(one.index[:, 0, 0], [1, 2])
  none = cohort_stack.stack_steps(examples, [[], []])
  assert none.index.shape == (2, 1, 1) and not none.mask.any()
  np.testing.assert_array_equal(none.index, np.full((2, 1, 1), 3))


def test_stack_steps_refuses_missing_batches_and_no_client():
  examples = [{"x": np.array([1.0], np.float32)}, {"x": np.array([2.0], np.float32)}]
  with pytest.raises(ValueError, match="every client"):
    cohort_stack.stack_steps(examples, [[np.array([0])]])
  with pytest.raises(ValueError, match="at least one client"):
    cohort_stack.stack_steps([], [])


def test_the_sort_is_stable_on_a_large_cohort_with_ties():
  steps = np.random.default_rng(0).integers(0, 3, 200).tolist()
  flat = np.concatenate(cohort_stack.plan_chunks(steps, 1, max_chunk_clients=64))
  np.testing.assert_array_equal(flat, sorted(range(200), key=lambda i: (steps[i], i)))


def test_a_client_budget_of_one_or_zero_bytes():
  """max(1, bytes_per_client): a 1-byte client fits max_chunk_bytes of them; 0 counts as 1."""
  assert [len(c) for c in cohort_stack.plan_chunks([1] * 7, 1, max_chunk_bytes=3)] == [3, 3, 1]
  assert [len(c) for c in cohort_stack.plan_chunks([1] * 7, 0, max_chunk_bytes=3)] == [3, 3, 1]
  assert cohort_stack.chunk_count(7, 1, 3) == 3 and cohort_stack.chunk_count(7, 0, 3) == 3
  assert cohort_stack.chunk_count(7, 10**12, 1) == 7  # each client alone
  assert cohort_stack.chunk_count(7, 1, 100, max_chunk_clients=3) == 3
  assert cohort_stack.chunk_count(0, 1) == 0
