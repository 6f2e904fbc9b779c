"""SCF curves of rPDP-FL's Theorem 1: the fits and Figs. 5-6 (``python -m experiments.scf_curves``).

:func:`run` fits SCF (:mod:`tff_idp.accounting.record.scf`) for every σ,
draws ε(α) per order and ε*(q) with the fitted exp(a·q + b) + c, and writes
``scf_curves.png`` and ``scf_curves.json``; :func:`format_table` is the
printed table. No TensorFlow (issue 52: moved here from the command line,
which keeps only its flags).
"""
from __future__ import annotations

import json
import os
import time
from typing import Optional, Sequence

import numpy as np

from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record import scf
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams

DEFAULT_CURVE_RATES = (0.001, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0)


def _setting(params: TwoStageParams) -> str:
  return (f"T={params.rounds}, τ={params.local_steps}, λ={params.client_rate:g}, "
          f"δ={params.delta:g}, {params.threat_model}")


def run(sigmas: Sequence[float], rounds: int, local_steps: int, client_rate: float,
        delta: float, threat_model: str = "type2", out: str = "runs/scf_curves",
        curve_sigma: Optional[float] = None,
        curve_rates: Sequence[float] = DEFAULT_CURVE_RATES) -> dict:
  """Fits SCF for every σ, draws Figs. 5-6, writes PNG + JSON; returns the report.

  Raises:
    ValueError: for invalid parameters (σ ≤ 0, λ ∉ (0, 1], δ ∉ (0, 1), rates
      outside (0, 1], no σ at all, ...).
  """
  sigmas = [float(s) for s in sigmas]
  if not sigmas:
    raise ValueError("--sigmas needs at least one noise multiplier.")
  if len(set(sigmas)) != len(sigmas):
    raise ValueError(f"--sigmas={sigmas} lists a σ twice.")
  all_params = [TwoStageParams(s, local_steps, rounds, client_rate, delta, threat_model)
                for s in sigmas]
  if curve_sigma is None:
    curve_sigma = 1.0 if 1.0 in sigmas else sigmas[0]
  curve_params = TwoStageParams(float(curve_sigma), local_steps, rounds, client_rate, delta,
                                threat_model)
  curve_rates = [float(q) for q in curve_rates]
  if not curve_rates or any(not 0.0 < q <= 1.0 for q in curve_rates):
    raise ValueError(f"--curve_rates={curve_rates} must be non-empty rates in (0, 1].")

  fits = []
  for params in all_params:
    start = time.perf_counter()
    fit = scf.fit_scf(params)
    seconds = time.perf_counter() - start
    fits.append(dict(
        sigma=params.noise_multiplier, a=fit.a, b=fit.b, c=fit.c, r_squared=fit.r_squared,
        epsilon_at_one=fit.epsilon_at_one, fit_seconds=seconds,
        q_grid=fit.q_grid.tolist(), epsilon_grid=fit.epsilon_grid.tolist(),
        max_abs_residual=float(np.max(np.abs(fit.predict(fit.q_grid) - fit.epsilon_grid)))))
  curves = []
  for q in curve_rates:
    orders, eps = rdp_two_stage.epsilon_curve(q, curve_params)
    best = int(np.argmin(eps))
    # ε*(q) of Theorem 1: the curve's minimum, or 0 where dp-accounting's
    # KL bound applies (order-2 RDP below δ²), which the curve does not show.
    curves.append(dict(q=q, orders=orders.tolist(), epsilon=eps.tolist(),
                       best_order=float(orders[best]),
                       epsilon_star=float(rdp_two_stage.epsilon(q, curve_params))))

  os.makedirs(out, exist_ok=True)
  png = os.path.join(out, "scf_curves.png")
  _plot(png, fits, curves, all_params[0], curve_params)
  report = dict(
      setting=dict(sigmas=sigmas, rounds=rounds, local_steps=local_steps,
                   client_rate=client_rate, delta=delta, threat_model=threat_model,
                   curve_sigma=float(curve_sigma), orders=rdp_two_stage.ORDERS.tolist()),
      model="epsilon*(q) ≈ exp(a*q + b) + c",
      fits=fits, curves=curves, png=png)
  path = os.path.join(out, "scf_curves.json")
  with open(path, "w") as f:
    json.dump(report, f, indent=1, allow_nan=False)
    f.write("\n")
  report["json"] = path
  return report


def _plot(path, fits, curves, params, curve_params) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
  colors = plt.cm.viridis(np.linspace(0.0, 0.9, len(curves)))
  stars = [c["epsilon_star"] for c in curves if c["epsilon_star"] > 0]
  for curve, color in zip(curves, colors):
    eps = np.asarray(curve["epsilon"])
    shown = eps > 0
    left.plot(np.asarray(curve["orders"])[shown], eps[shown], color=color,
              label=f"q={curve['q']:g}")
    if curve["epsilon_star"] > 0:
      left.plot([curve["best_order"]], [curve["epsilon_star"]], "o", color=color, ms=5)
  left.set_xscale("log")
  left.set_yscale("log")
  if stars:
    left.set_ylim(min(stars) / 3, max(stars) * 30)
  # Past ~10x the largest optimal order every curve is far above the plot.
  left.set_xlim(2, min(1024, 10 * max(c["best_order"] for c in curves)))
  left.set_xlabel("RDP order α")
  left.set_ylabel("ε(α, δ, q)")
  left.set_title(f"DP budget curves, σ={curve_params.noise_multiplier:g} "
                 f"({_setting(curve_params)})", fontsize=9)
  left.legend(fontsize=8, title="dot: ε*(q) = min over α", title_fontsize=8)

  colors = plt.cm.tab10(np.arange(len(fits)) % 10)
  dense = np.linspace(0.0, 1.0, 400)
  for fit, color in zip(fits, colors):
    q, eps = np.asarray(fit["q_grid"]), np.asarray(fit["epsilon_grid"])
    right.plot(q[eps > 0], eps[eps > 0], ".", color=color, ms=4)
    pred = np.exp(fit["a"] * dense + fit["b"]) + fit["c"]
    right.plot(dense[pred > 0], pred[pred > 0], "-", color=color, lw=1.2,
               label=f"σ={fit['sigma']:g}: R²={fit['r_squared']:.4f}")
  right.set_yscale("log")
  right.set_xlabel("sampling probability q")
  right.set_ylabel("ε*(q)")
  right.set_title(f"ε*(q) (dots) and SCF fit exp(a·q+b)+c (lines); {_setting(params)}",
                  fontsize=9)
  right.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def format_table(report: dict) -> str:
  lines = ["| σ | a | b | c | R² | ε*(0.01) | ε*(0.1) | ε*(1) | fit ms |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for fit in report["fits"]:
    q, eps = np.asarray(fit["q_grid"]), np.asarray(fit["epsilon_grid"])
    at = lambda x: float(eps[np.argmin(np.abs(q - x))])  # pylint: disable=cell-var-from-loop
    lines.append(f"| {fit['sigma']:g} | {fit['a']:.4g} | {fit['b']:.4g} | {fit['c']:.4g} "
                 f"| {fit['r_squared']:.5f} | {at(0.01):.4g} | {at(0.1):.4g} "
                 f"| {fit['epsilon_at_one']:.4g} | {1e3 * fit['fit_seconds']:.1f} |")
  return "\n".join(lines)
