"""tff_idp/client_arrays.py: the array-backed mark on a ClientData (issue 49)."""
from tff_idp import client_arrays


class _Data:
  pass


def test_attach_marks_and_of_reads_the_mark():
  data = _Data()
  assert client_arrays.of(data) is None
  fn = lambda cid: {"x": cid}  # noqa: E731
  assert client_arrays.attach(data, fn) is data
  assert client_arrays.of(data) is fn
  assert client_arrays.of(_Data()) is None
