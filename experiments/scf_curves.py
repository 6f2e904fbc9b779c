"""SCF curves: ε(α) per order and ε*(q) with the fitted exp(a·q + b) + c (rPDP-FL Figs. 5-6).

Draws, for the Theorem 1 bound of rPDP-FL (:mod:`tff_idp.accounting.record.rdp_two_stage`):

* left: the DP budget curves ε(α, δ, q) against the RDP order α for several
  sampling rates q (Alg. 2 line 5, Fig. 5 left), with each curve's minimum
  ε*(q) marked;
* right: the optimum ε*(q) on SCF's simulation grid Π (dots) and the fitted
  SCF curve f(q) = exp(a·q + b) + c for each σ, with R² in the legend
  (Alg. 2 lines 6-7, Fig. 5 right and Fig. 6).

It writes ``scf_curves.png`` and ``scf_curves.json`` (the fit parameters, R²,
ε*(1) and the simulated points) to ``--out`` and prints a table:

  python -m experiments.scf_curves                    # the paper's Fig. 5 setting
  python -m experiments.scf_curves --sigmas=0.5,1,2,5 --rounds=20 --local_steps=5 \\
      --client_rate=0.5 --delta=1e-3 --threat_model=type2 --out=runs/scf_curves

No TensorFlow is imported; it runs in seconds on a CPU.
"""
from __future__ import annotations

import sys

from absl import app
from absl import flags

from tff_idp import cli
from tff_idp.accounting.record.rdp_two_stage import THREAT_MODELS
# The fits, figures and table live in the family (issue 52); re-exported for callers.
from tff_idp.rpdp.scf_curves import DEFAULT_CURVE_RATES
from tff_idp.rpdp.scf_curves import format_table
from tff_idp.rpdp.scf_curves import run


def define_flags() -> None:
  """The CLI flags. Defined only when run as a program, so that importing this
  module (e.g. from a test) registers nothing in absl's global FLAGS."""
  flags.DEFINE_list("sigmas", ["0.5", "1", "2", "5"],
                    "Noise multipliers σ: one fitted SCF curve each (right panel).")
  flags.DEFINE_integer("rounds", 20, "T: communication rounds.")
  flags.DEFINE_integer("local_steps", 5, "τ: local DP-SGD steps per round.")
  flags.DEFINE_float("client_rate", 0.5, "λ: client sampling rate, in (0, 1].")
  flags.DEFINE_float("delta", 1e-3, "Target δ.")
  flags.DEFINE_enum("threat_model", "type2", list(THREAT_MODELS),
                    "type2: third parties see global models; type1: the server.")
  flags.DEFINE_float("curve_sigma", None,
                     "σ of the left panel's ε(α) curves (default: 1 if listed in "
                     "--sigmas, else the first σ).")
  flags.DEFINE_list("curve_rates", [f"{q:g}" for q in DEFAULT_CURVE_RATES],
                    "Sampling rates q of the left panel's ε(α) curves.")
  flags.DEFINE_string("out", "runs/scf_curves", "Output directory for the PNG and JSON.")


@cli.entry
def main(argv) -> int:
  if len(argv) > 1:
    print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
    return 2
  f = flags.FLAGS
  try:
    cli.prepare_output_dir(f.out, flag="out")  # names --out when it is empty or unwritable
    report = run(sigmas=cli.float_list("sigmas"), rounds=f.rounds,
                 local_steps=f.local_steps, client_rate=f.client_rate, delta=f.delta,
                 threat_model=f.threat_model, out=f.out, curve_sigma=f.curve_sigma,
                 curve_rates=cli.float_list("curve_rates"))
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  s = report["setting"]
  print(f"SCF fits of Theorem 1 (T={s['rounds']}, τ={s['local_steps']}, "
        f"λ={s['client_rate']:g}, δ={s['delta']:g}, {s['threat_model']}), "
        f"{len(report['fits'][0]['q_grid'])} rates each:")
  print(format_table(report))
  print(f"\nwrote {report['png']} and {report['json']}")
  return 0


if __name__ == "__main__":
  define_flags()
  app.run(main, flags_parser=cli.parse_flags)
