"""The mark of a ``ClientData`` whose clients are arrays already (issue 49; no TensorFlow).

A split built from arrays (``datasets.from_arrays``), a saved split and the
embedded federations know every client's examples as numpy arrays. Their
``ClientData`` carries :data:`ATTRIBUTE`, a function ``client_id ->
OrderedDict`` of those arrays, exactly the examples the client's
``create_tf_dataset_for_client`` yields (keys, dtypes, values, order). The
vectorized rounds (:class:`tff_idp.engine.cohort_arrays.ExampleCache`) then
index arrays instead of building and reading back a ``tf.data`` pipeline per
sampled client (~3 ms each: at 1,000 clients a round, most of the round).
``client_data.preprocess(...)`` returns a ``ClientData`` without the mark, so
preprocessed data is always read through its pipeline.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

ATTRIBUTE = "tff_idp_client_arrays"


def attach(client_data: Any, client_arrays: Callable[[str], Mapping]) -> Any:
  """Marks ``client_data`` (returned) with ``client_arrays`` (see the module docstring)."""
  setattr(client_data, ATTRIBUTE, client_arrays)
  return client_data


def of(client_data: Any) -> Optional[Callable[[str], Mapping]]:
  """``client_data``'s arrays function, or None when it has none."""
  return getattr(client_data, ATTRIBUTE, None)
