"""One parser for the benchmarks' ``--name=value`` arguments (``--help`` prints the module's docstring)."""
from __future__ import annotations

from typing import Sequence


def parse(argv: Sequence[str], module: str, doc: str, *, ints: Sequence[str] = (),
          int_lists: Sequence[str] = ()) -> dict:
  """``{name: value}`` of ``--name=N`` (whole numbers ≥ 1) and ``--name=N,N,...`` arguments.

  Anything else exits with one line naming the argument and the usage;
  ``--help`` / ``-h`` prints ``doc`` and exits 0.
  """
  usage = " ".join([f"--{n}=N" for n in ints] + [f"--{n}=N,N,..." for n in int_lists])
  out: dict = {}
  for arg in argv:
    if arg in ("-h", "--help"):
      print(doc)
      raise SystemExit(0)
    key, _, value = arg.lstrip("-").partition("=")
    numbers = value.split(",")
    if key in ints and value.isdigit() and int(value) > 0:
      out[key] = int(value)
    elif key in int_lists and all(v.isdigit() and int(v) > 0 for v in numbers):
      out[key] = tuple(int(v) for v in numbers)
    else:
      raise SystemExit(f"error: unknown argument {arg!r} (use {usage}, each N ≥ 1); "
                       f"usage: python -m {module} {usage}")
  return out
