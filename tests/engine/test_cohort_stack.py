"""tff_idp.engine.cohort_stack: padded, masked local steps and memory-bounded chunks."""
import numpy as np

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
