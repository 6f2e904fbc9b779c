"""One-line refusals for client inputs of the wrong form, instead of TFF's TypeErrors (issue 51).

IDP-FedAvg's two processes take different client inputs: SAMPLE (and the
non-private and uniform runs) a ``tf.data.Dataset`` per client, SCALE
(``per_client_clip_scale=True``) ``scaled_client_data(dataset, clip_scale)``,
a structure of the data and its clip scale. Handing one the other's input
fails deep in TFF's value conversion with ``Unable to convert ...
_BatchDataset into an Struct`` or ``Cannot serialize Python type
collections.OrderedDict``. :func:`explaining_client_inputs` wraps a
context's ``invoke`` so that such a ``TypeError`` becomes a
:class:`~tff_idp.errors.ClientInputError` that says which input the process
takes; every other error passes unchanged. It reads only the computation's
type signature (no family code: the execution layer stays family-agnostic).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from tff_idp.errors import ClientInputError

_SCALE_FIELDS = ("data", "clip_scale")


def _client_member(comp: Any) -> Optional[Any]:
  """The member type of ``comp``'s federated ``client_data`` parameter, or None."""
  parameter = getattr(getattr(comp, "type_signature", None), "parameter", None)
  try:
    return getattr(parameter.client_data, "member", None)
  except (AttributeError, ValueError):  # no parameter, or no field of that name
    return None


def _has_field(member: Any, name: str) -> bool:
  try:
    getattr(member, name)
  except (AttributeError, ValueError):
    return False
  return True


def hint_for(comp: Any, error: TypeError) -> Optional[str]:
  """What the process takes, when ``error`` is TFF refusing the other form; else None."""
  member = _client_member(comp)
  if member is None:
    return None
  text = str(error)
  scale = all(_has_field(member, name) for name in _SCALE_FIELDS)
  if scale and "into an `Struct`" in text:
    return ("this is a SCALE process (per_client_clip_scale=True): give each client "
            "tff_idp.scaled_client_data(dataset, clip_scale), not a bare tf.data.Dataset "
            "(that is SAMPLE's input).")
  if not scale and text.startswith("Cannot serialize Python type"):
    scaled = ("; scaled_client_data(...) inputs belong to the SCALE process "
              "(build_idp_fedavg_process(..., per_client_clip_scale=True))"
              if "OrderedDict" in text else "")
    return (f"this process takes each client's tf.data.Dataset{scaled}. TFF said: "
            f"{text.splitlines()[0][:160]}")
  return None


def explaining_client_inputs(invoke: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
  """``invoke`` whose client-input TypeErrors name the input the process takes."""
  @functools.wraps(invoke)
  def wrapped(comp, arg):
    try:
      return invoke(comp, arg)
    except TypeError as e:
      hint = hint_for(comp, e)
      if hint is None:
        raise
      raise ClientInputError(hint) from None
  return wrapped
