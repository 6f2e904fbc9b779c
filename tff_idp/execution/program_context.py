"""TFF's program-API context, fixed for client data that is a structure of sequences.

``tff.program.NativeFederatedContext.invoke`` (TFF 0.87) materializes a
computation's argument by walking its *type*. For a ``CLIENTS``-placed value
whose member is a struct (SCALE's ``<data, clip_scale>``, APES's
``<data, privacy>``) it walks into the member's fields with the *list of
clients* as the value, so the clients are zipped with the fields and the
round fails with ``InvalidNonAllEqualValueError`` (plain sequences happen to
work). :class:`ClientListFederatedContext` keeps a client-placed value as the
list of per-client values that ``FederatedDataSourceIterator.select``
returned, materializing only the value references inside it; server-placed
values are handled as TFF does. Everything else is TFF's own (issue 31
item 8).
"""
from __future__ import annotations

import asyncio
from typing import Any

import tensorflow_federated as tff
# pylint: disable=g-bad-import-order
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.types import type_conversions
from tensorflow_federated.python.program import federated_context
from tensorflow_federated.python.program import native_platform
from tensorflow_federated.python.program import value_reference
# pylint: enable=g-bad-import-order


async def _materialize_leaves(value: Any) -> Any:
  """``value`` with every ``MaterializableValueReference`` in it replaced by its value."""
  if isinstance(value, value_reference.MaterializableValueReference):
    return await value.get_value()
  if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
    return type(value)([await _materialize_leaves(v) for v in value])
  if isinstance(value, dict):
    return type(value)([(k, await _materialize_leaves(v)) for k, v in value.items()])
  return value


async def materialize_argument(value: Any, type_signature: tff.types.Type) -> Any:
  """The argument of ``type_signature`` with its value references materialized (module doc)."""
  if isinstance(type_signature, tff.FederatedType):
    if type_signature.placement == tff.CLIENTS and not type_signature.all_equal:
      return await _materialize_leaves(value)
    return await materialize_argument(value, type_signature.member)
  if isinstance(type_signature, tff.StructType):
    elements = list(structure.iter_elements(type_signature))
    values = structure.from_container(value)
    materialized = await asyncio.gather(*[materialize_argument(v, t)
                                          for v, (_, t) in zip(values, elements)])
    return structure.Struct([(n, v) for v, (n, _) in zip(materialized, elements)])
  return await _materialize_leaves(value)


class ClientListFederatedContext(tff.program.NativeFederatedContext):
  """``NativeFederatedContext`` whose client-placed arguments stay lists of clients (module doc)."""

  def invoke(self, comp, arg):
    result_type = comp.type_signature.result
    if not federated_context.contains_only_server_placed_data(result_type):
      raise ValueError("Expected the result type of `comp` to contain only structures, "
                       f"server-placed values, or tensors, found {result_type}.")
    inner = self._context  # pylint: disable=protected-access

    async def run():
      value = arg
      if comp.type_signature.parameter is not None:
        value = await materialize_argument(arg, comp.type_signature.parameter)
      return await inner.invoke(comp, value)

    task = asyncio.create_task(run())
    result = native_platform._create_structure_of_references(  # pylint: disable=protected-access
        task, result_type)
    return type_conversions.type_to_py_container(result, result_type)
