"""The one check of an array-backed ClientData (issue 49), shared by the split kinds' tests."""
import numpy as np

from tff_idp import client_arrays


def assert_arrays_are_each_clients_dataset(train) -> None:
  """``train`` is marked array-backed, and what the vectorized rounds read for every client
  equals that client's dataset: keys, dtypes, shapes, values and order."""
  from tff_idp.engine import cohort_arrays  # pylint: disable=g-import-not-at-top  (TensorFlow)
  assert client_arrays.of(train) is not None
  direct = cohort_arrays.ExampleCache(train)
  for cid in train.client_ids:
    want = cohort_arrays.examples_of_dataset(train.create_tf_dataset_for_client(cid))
    got = direct(cid)
    assert list(got) == list(want)
    for key in want:
      assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
      np.testing.assert_array_equal(got[key], want[key])
