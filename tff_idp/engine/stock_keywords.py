"""The stock TFF builder keywords a TFF user reaches for, on the families' builders (issue 51).

``tff.learning.algorithms.build_weighted_fed_avg`` takes ``model_aggregator``,
``metrics_aggregator`` and ``client_weighting``; code written against the
toolkit's earlier builders passed ``client_execution``. A family builder
accepts each where it applies and otherwise refuses it in one line that says
why and what to use instead, never with Python's bare "unexpected keyword
argument" or a TFF type error at the first round.
"""
from __future__ import annotations

from typing import Any, Optional

import tensorflow_federated as tff

from tff_idp.errors import ToolkitValueError


def refuse_driver_keywords(builder: str, driver: str, **given: Any) -> None:
  """``client_execution`` / ``parallel_clients`` belong to the ``*_driver_process`` builder."""
  for name, value in given.items():
    if value is not None:
      raise ToolkitValueError(
          f"{builder}() builds the native TFF process, whose clients always train as TFF "
          f"client computations; {name}={value!r} belongs to {driver}() (rounds driven "
          "from Python, trained in this process where that is faster).")


def refuse_model_aggregator(builder: str, model_aggregator: Any, replaced: str) -> None:
  """A model aggregator in place of the family's DP step would void the guarantee."""
  if model_aggregator is not None:
    raise ToolkitValueError(
        f"{builder}(model_aggregator=...) would replace {replaced}, which the privacy "
        "accounting assumes: the printed ε would no longer hold. Leave it out (tune the "
        "family's own aggregator through its arguments).")


def check_client_weighting(builder: str, client_weighting: Any) -> None:
  """Only ``ClientWeighting.UNIFORM``: DP averaging counts each sampled client once."""
  if client_weighting is None or client_weighting == tff.learning.ClientWeighting.UNIFORM:
    return
  raise ToolkitValueError(
      f"{builder}(client_weighting={client_weighting!r}): the DP mean weights every sampled "
      "client equally (its sensitivity bound assumes it), so a client's weight cannot follow "
      "its data; pass tff.learning.ClientWeighting.UNIFORM or leave it out.")


def refuse_metrics_aggregator(builder: str, metrics_aggregator: Optional[Any],
                              reason: str) -> None:
  if metrics_aggregator is not None:
    raise ToolkitValueError(f"{builder}(metrics_aggregator=...) is not supported: {reason}.")
