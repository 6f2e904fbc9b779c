"""Per-group audit results from canary cosines, their table and plot (no TensorFlow).

:func:`audit_groups` pools the canaries of one run spec over its seeds (each
seed is an independent run with its own canaries) and estimates ε per privacy
group (:func:`tff_idp.audit.estimator.estimate_epsilon`). The held-out
canaries of every group share one null distribution, since they never take
part, so their cosines are pooled across groups too.
"""
from __future__ import annotations

import importlib.util
import logging
import math
from typing import Optional, Sequence

import numpy as np

from tff_idp.audit import estimator
from tff_idp.engine import report as engine_report


def audit_groups(cosines: Sequence[np.ndarray], groups: Sequence[np.ndarray],
                 inserted: Sequence[np.ndarray], bounds: Sequence[Optional[float]],
                 group_names: Sequence[str], delta: float, *, method: str = "gdp",
                 confidence: float = estimator.DEFAULT_CONFIDENCE,
                 bootstrap: int = estimator.DEFAULT_BOOTSTRAP, seed: int = 0) -> list[dict]:
  """One dict per privacy group that has canaries: its bound and estimate.

  Args:
    cosines / groups / inserted: per run (seed), the canaries' cosines,
      privacy groups and inserted mask (``CanaryPlan``).
    bounds: the ledger's ε per group (what the run reports).
    group_names: one per group.
    delta: the run's δ.
  """
  cos = np.concatenate([np.asarray(c, np.float64) for c in cosines])
  grp = np.concatenate([np.asarray(g) for g in groups])
  ins = np.concatenate([np.asarray(i, bool) for i in inserted])
  null = cos[~ins]
  rows = []
  for p, name in enumerate(group_names):
    members = ins & (grp == p)
    if not members.any():
      continue
    bound = bounds[p]
    bound = None if bound is None or math.isinf(bound) else float(bound)
    est = estimator.estimate_epsilon(null, cos[members], delta, bound=bound, method=method,
                                     confidence=confidence, bootstrap=bootstrap, seed=seed + p)
    rows.append(dict(group=name, **est.to_dict()))
  return rows


def verdict(row: dict) -> str:
  """'VIOLATION' (CI above the bound), 'above bound, within CI', 'within bound' or '—'."""
  if row.get("bound") is None:
    return "—"
  caveat = " (few canaries: unreliable)" if row.get("few_canaries") else ""
  if row["flagged"]:
    return "VIOLATION" + caveat
  if row["epsilon"] > row["bound"]:
    return "above bound, within CI" + caveat
  return "within bound" + caveat


def _eps(v: float) -> str:
  return f"≥ {estimator.EPSILON_CAP:g}" if v >= estimator.EPSILON_CAP else f"{v:.2f}"


def format_audit_table(results: Sequence[dict]) -> str:
  """Markdown: run | group | ε bound | ε empirical (CI) | empirical ÷ bound | canaries | verdict.

  ``results`` are rows with ``run`` and ``audit`` (a list from
  :func:`audit_groups`); runs without an audit are skipped.
  """
  confidence = next((g["confidence"] for r in results for g in (r.get("audit") or [])), 0.95)
  lines = [f"| run | group | ε bound (ledger) | ε empirical ({100 * confidence:g}% CI) | "
           "empirical ÷ bound | canaries inserted / held out | verdict |",
           "|---|---|---|---|---|---|---|"]
  for r in results:
    for g in r.get("audit") or []:
      bound = "—" if g["bound"] is None else f"{g['bound']:.2f}"
      tight = "—" if g.get("tightness") is None else f"{g['tightness']:.2f}"
      lines.append(
          f"| {r['run']} | {g['group']} | {bound} | {_eps(g['epsilon'])} "
          f"[{_eps(g['ci_low'])}, {_eps(g['ci_high'])}] | {tight} | "
          f"{g['num_inserted']} / {g['num_held_out']} | {verdict(g)} |")
  method = next((g["method"] for r in results for g in (r.get("audit") or [])), "gdp")
  lines += ["", "ε empirical: one-shot canary estimate (Andrew et al., ICLR 2024) from the "
            f"final model, {method} fit, at the run's δ; CI: percentile bootstrap over "
            "canaries. VIOLATION: the whole CI lies above the ledger's ε. A lower bound on "
            "leakage under this attack, not a proof of privacy."]
  return "\n".join(lines)


def plot_audit(results: Sequence[dict], path: str, title: str = "") -> bool:
  """Empirical ε (with CI) against the ledger's bound, one point per (run, group).

  Returns False (and logs) when matplotlib is missing.
  """
  if importlib.util.find_spec("matplotlib") is None:
    logging.warning("matplotlib missing: no %s", path)
    return False
  with engine_report.figure(path, figsize=(7, 5)) as (ax,):
    floor = 1e-2  # ε̂ = 0 is drawn at the floor of the log axis
    x_top, y_top = 1.0, 1.0
    markers = "osD^v<>P*X"
    drawn = [r for r in results if any(g["bound"] is not None for g in r.get("audit") or [])]
    for i, r in enumerate(drawn):
      rows = [g for g in r["audit"] if g["bound"] is not None]
      x = np.array([g["bound"] for g in rows])
      y, lo, hi = (np.clip([g[k] for g in rows], floor, estimator.EPSILON_CAP)
                   for k in ("epsilon", "ci_low", "ci_high"))
      offset = (i - (len(drawn) - 1) / 2) * 0.04 * max(1.0, float(x.max()))
      # A percentile interval need not contain the point estimate (and ε̂ = 0 is
      # drawn at the floor): bars never extend below 0.
      yerr = [np.maximum(y - lo, 0.0), np.maximum(hi - y, 0.0)]
      ax.errorbar(x + offset, y, yerr=yerr, fmt=markers[i % len(markers)],
                  capsize=3, label=r["run"])
      for g, xi, yi in zip(rows, x + offset, y):
        if g["flagged"]:
          ax.annotate("violation", (xi, yi), textcoords="offset points", xytext=(5, -3),
                      fontsize=7, color="red")
      x_top = max(x_top, float(x.max()))
      y_top = max(y_top, float(hi.max()))
    x_top *= 1.25
    line = np.linspace(floor, x_top, 200)
    ax.plot(line, line, "k--", lw=1, label="empirical = bound")
    ax.set_yscale("log")
    ax.set_xlim(0, x_top)
    ax.set_ylim(floor, y_top * 1.5)
    ax.set_xlabel("ε bound (ledger)")
    ax.set_ylabel("ε empirical (canary audit, 95% CI; log scale)")
    ax.set_title(title or "Empirical privacy audit per group")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left")
  return True


def format_record_audit_table(results: Sequence[dict]) -> str:
  """rPDP-FL's record-level audit per method and budget level: ledger ε bound vs empirical ε.

  Empty when no row has an ``audit`` (no ``audit_canaries``).
  """
  audited = [r for r in results if r.get("audit")]
  if not audited:
    return ""
  lines = ["| method | level ε | rate q | ε bound (ledger) | ε empirical (95% CI) | flagged | "
           "canaries inserted / held out | accuracy with / without canaries |",
           "|---|---|---|---|---|---|---|---|"]
  for r in audited:
    with_c, without = r.get("audit_accuracy_with_canaries"), r.get(
        "audit_accuracy_without_canaries")
    utility = "—" if with_c is None or without is None else \
        f"{100 * with_c:.2f} / {100 * without:.2f}"
    for level in r["audit"]:
      lines.append(
          f"| {r['method']} | {level['level']:g} | {level['rate']:.4g} | "
          f"{level['bound']:.3g} | {level['formatted']} | "
          f"{'YES' if level['flagged'] else 'no'}"
          f"{' (few canaries)' if level.get('few_canaries') else ''} | "
          f"{level['num_inserted']} / {level['num_held_out']} | {utility} |")
  return "\n".join(lines)


def format_audit_summary(rows: Sequence[dict], insecure_reproducible_noise: bool) -> str:
  """The client-level audit's table plus the accuracy and utility-effect lines
  (``python -m experiments.audit``)."""
  lines = [format_audit_table(rows), "",
           "| run | accuracy % (mean over seeds) | canaries |", "|---|---|---|"]
  for r in rows:
    lines.append(f"| {r['run']} | {100 * r['mean_accuracy']:.2f} | {r['canaries']} |")
  base = next((r for r in rows if r["run"] == "34-43-23, no canaries"), None)
  with_canaries = next((r for r in rows if r["run"] == "34-43-23"), None)
  if base and with_canaries:
    diff = 100 * (with_canaries["mean_accuracy"] - base["mean_accuracy"])
    why = ("identical noise and real cohorts under --insecure_reproducible_noise, so this "
           "is the canaries' effect alone" if insecure_reproducible_noise else
           "same seeds; noise and sampling are fresh per run, so part of it is run-to-run "
           "noise: --insecure_reproducible_noise pairs them exactly")
    lines += ["", f"utility effect of the canaries on 34-43-23: {diff:+.2f} accuracy points "
              f"({why})."]
  correct = [g for r in rows if not r.get("broken_control") for g in r.get("audit") or []]
  broken = [r for r in rows if r.get("broken_control")]
  ok = all(g["epsilon"] <= g["bound"] for g in correct if g["bound"] is not None)
  flagged = sum(any(g["flagged"] for g in r.get("audit") or []) for r in broken)
  lines += ["", f"correct runs: empirical ε ≤ bound in every group: {'yes' if ok else 'NO'}; "
            f"broken controls flagged: {flagged} of {len(broken)}"
            f"{'' if flagged == len(broken) else ' (NOT all)'}."]
  return "\n".join(lines)
