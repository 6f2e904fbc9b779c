"""Command line for SAMPLE calibration (IDP-FedAvg Alg. 1).

Example:
  python -m tff_idp.idp_fedavg.calibrate --epsilons=1,2,3 --ratios=0.34,0.43,0.23 \
      --num_clients=3383 --clients_per_round=30 --rounds=420 --delta=1e-4
"""
from __future__ import annotations

import decimal
import json
import math
import sys
import time

from absl import app
from absl import flags

from tff_idp import cli

from tff_idp.accounting import exact
from tff_idp.accounting.client import sample
from tff_idp.accounting import validation

_EPSILONS = flags.DEFINE_list("epsilons", ["1", "2", "3"],
                              "Per-group budgets ε_p (inf for non-private groups).")
_RATIOS = flags.DEFINE_list("ratios", ["0.34", "0.43", "0.23"],
                            "Fraction of clients in each group; must sum to 1.")
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 3383, "Total clients N.")
_CLIENTS_PER_ROUND = flags.DEFINE_float("clients_per_round", 30,
                                        "Expected clients per round c.")
_ROUNDS = flags.DEFINE_integer("rounds", 420, "Training rounds I.")
_DELTA = flags.DEFINE_float("delta", 1e-4, "Target δ.")
_ACCOUNTANT = flags.DEFINE_enum("accountant", "rdp", list(exact.ACCOUNTANTS),
                                "dp-accounting accountant used and verified with.")
_MAX_RATE = flags.DEFINE_float("max_rate", 1.0,
                               "Cap on any group's sampling rate (see README).")
_JSON = flags.DEFINE_bool("json", False, "Print machine-readable JSON.")


def _parse_floats(values: list[str], name: str) -> list[float]:
  try:
    return [float(v) for v in values]
  except ValueError as e:
    raise ValueError(f"--{name} must be a comma-separated list of numbers: {e}") from None


PRINTED_DIGITS = 7  # significant digits of the printed σ and q


def round_toward(value: float, digits: int, direction: str) -> str:
  """``value`` to ``digits`` significant digits, rounded *down* or *up* (never to nearest).

  Exact (``decimal`` on the float's binary value), so the printed text is on
  the safe side of the value: a copied rate is never above the calibrated
  one, a copied σ never below it (issue 31 item 6: q = 0.0508985 printed as
  0.050898 rounded to nearest... or up, gave ε 1.0000053 > 1).
  """
  if not math.isfinite(value) or value == 0:
    return repr(float(value))
  number = decimal.Decimal(value)
  exponent = number.adjusted() - (digits - 1)
  rounding = decimal.ROUND_FLOOR if direction == "down" else decimal.ROUND_CEILING
  text = str(number.quantize(decimal.Decimal(1).scaleb(exponent), rounding=rounding))
  if "E" in text:
    text = format(decimal.Decimal(text), "f")
  return text


def format_table(cal: sample.GroupCalibration) -> str:
  """The calibration as text; σ rounded up, rates down, achieved ε up (safe to copy)."""
  lines = [
      f"accountant            {cal.accountant}",
      f"noise multiplier σ    {round_toward(cal.noise_multiplier, PRINTED_DIGITS, 'up')}",
      f"rounds, δ             {cal.rounds}, {cal.delta:g}",
      f"expected clients/rnd  {cal.expected_clients_per_round:.3f} "
      f"(target {cal.target_clients_per_round:g} of N={cal.num_clients})",
      "",
      f"{'group':>5} {'ε target':>9} {'clients':>8} {'q':>13} {'ε achieved':>11}",
  ]
  for p, (e, n, q, a) in enumerate(zip(cal.target_epsilons, cal.group_sizes,
                                       cal.sampling_rates, cal.achieved_epsilons)):
    lines.append(f"{p:>5} {e:>9g} {n:>8d} {round_toward(q, PRINTED_DIGITS, 'down'):>13} "
                 f"{round_toward(a, 6, 'up'):>11}")
  lines += ["", f"σ is rounded up and q down to {PRINTED_DIGITS} significant digits, so "
            "copied values stay within budget; --json prints them at full precision."]
  return "\n".join(lines)


@cli.entry
def main(argv: list[str]) -> int:
  del argv
  try:
    epsilons = _parse_floats(_EPSILONS.value, "epsilons")
    ratios = _parse_floats(_RATIOS.value, "ratios")
    if len(ratios) != len(epsilons):
      raise ValueError(f"--epsilons has {len(epsilons)} values but --ratios has "
                       f"{len(ratios)}; give one ratio per budget.")
    sizes = validation.group_sizes_from_ratios(ratios, _NUM_CLIENTS.value)
    start = time.perf_counter()
    cal = sample.get_group_sampling_rates(
        epsilons, sizes, _DELTA.value, _ROUNDS.value, _CLIENTS_PER_ROUND.value,
        _ACCOUNTANT.value, _MAX_RATE.value)
    elapsed = time.perf_counter() - start
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  if _JSON.value:
    d = json.loads(cal.to_json())
    d["seconds"] = elapsed
    print(json.dumps(d, indent=2, allow_nan=False))
  else:
    print(format_table(cal))
    print(f"\ncalibrated and verified with dp-accounting in {elapsed:.3f} s")
  return 0


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
