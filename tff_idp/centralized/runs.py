"""The centralized comparison of rPDP-FL §7.1 through the engine's run template.

Two grids over one :class:`~tff_idp.centralized.silo.Silo`, each a
:class:`~tff_idp.engine.run_template.FamilyRuns` for
:func:`~tff_idp.engine.run_template.run_grid`:

* :class:`CompareRuns` (Table 2, Fig. 7): every method × seed on the whole
  silo. ``scf`` / ``binary_search`` / ``exact`` are rPDP-SGD (record i
  Poisson-sampled at its own q_i, Lemma 4 without client sampling,
  calibrated once per method); ``filter`` is private full-batch GD with an
  individual Rényi filter (Feldman & Zrnic 2021, Alg. 3).
* :class:`Table3Runs` (Table 3): every (privacy setup, method) × trial on a
  subset; a trial draws the budgets and seeds the training.

Rows follow the summary schema of docs/api.md; the table and plot helpers
are :mod:`tff_idp.engine.report`'s.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional, Sequence

import numpy as np

from tff_idp import preferences
from tff_idp.accounting.record import calibration as record_calibration
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.centralized import filter_gd
from tff_idp.centralized import trainer
from tff_idp.centralized.methods import DP_SGD_METHODS
from tff_idp.centralized.methods import METHOD_NAMES
from tff_idp.centralized.silo import Silo
from tff_idp.engine import report
from tff_idp.engine import summary as summary_lib
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.engine.run_template import SeedResult
from tff_idp.engine.run_template import run_grid



def train_dp_sgd(silo: Silo, init_seed: int, q: np.ndarray, noise_multiplier: float,
                 clip_norm: float, learning_rate: float, steps: int,
                 randomness: PrivacyRandomness, eval_every: int) -> SeedResult:
  """rPDP-SGD on ``silo`` with per-record rates q (:mod:`tff_idp.centralized.trainer`).

  Evaluates every ``eval_every`` steps; the s/step in ``extras`` is warm
  (the tracing is done by a call that takes no step).
  """
  run = trainer.train_record_dp_sgd(
      lambda: silo.keras_builder(init_seed), silo.x, silo.y, q, noise_multiplier, clip_norm,
      learning_rate, steps, randomness, silo.accuracy, eval_every)
  history = [[step, m["accuracy"]] for step, m in run.history]
  return SeedResult(history[-1][1], history, {"seconds_per_step": run.seconds_per_step,
                                              "mean_batch": run.mean_batch})


def filter_noise(budgets: np.ndarray, steps: int, delta: float, alpha) -> float:
  """Default Filter σ: the largest finite budget affords exactly ``steps`` worst-case steps."""
  finite = budgets[np.isfinite(budgets)]
  if finite.size == 0:
    raise ValueError("Filter needs at least one finite budget to choose its σ.")
  return filter_gd.noise_for_steps(float(finite.max()), steps, delta, alpha)


def per_level(budgets: np.ndarray, values: np.ndarray, limit: int = 64) -> Optional[dict]:
  """{ε: value} for the distinct budgets (None if there are more than ``limit``)."""
  levels = np.unique(budgets)
  if levels.size > limit:
    return None
  return {str(float(e)): float(np.asarray(values)[budgets == e][0]) for e in levels}


class CompareRuns:
  """Table 2 and Fig. 7: every method × seed on the whole silo (``cfg``: the flags)."""

  def __init__(self, silo: Silo, budgets: np.ndarray, cfg: dict):
    self.silo, self.budgets, self.cfg = silo, budgets, cfg
    self.params = TwoStageParams(cfg["noise_multiplier"], cfg["steps"], 1, 1.0, cfg["delta"])
    self.finite = np.isfinite(budgets)

  def begin_spec(self, method: str) -> None:
    """Filter's σ, or the method's per-record rates (calibrated once for every seed)."""
    cfg = self.cfg
    if method == "filter":
      self._sigma = cfg["filter_noise_multiplier"] or filter_noise(
          self.budgets, cfg["filter_steps"], cfg["delta"], cfg["filter_alpha"])
    else:
      self._rates = record_calibration.calibrate_record_rates(self.budgets, self.params,
                                                              method=method)

  def run_seed(self, method: str, seed: int) -> SeedResult:
    cfg = self.cfg
    randomness = PrivacyRandomness.for_run(seed, f"centralized/{method}",
                                           cfg["insecure_reproducible_noise"])
    if method != "filter":
      return train_dp_sgd(self.silo, seed, self._rates.q, cfg["noise_multiplier"],
                          cfg["clip_norm"], cfg["learning_rate"], cfg["steps"], randomness,
                          cfg["eval_every"])
    keras_model = self.silo.keras_builder(seed)
    run = filter_gd.run_private_gd_with_filter(
        keras_model, self.silo.x, self.silo.y, self.budgets, cfg["delta"], self._sigma,
        cfg["clip_norm"], cfg["filter_learning_rate"], cfg["filter_steps"],
        seed=randomness.aggregator_noise_seed(), alpha=cfg["filter_alpha"],
        check=cfg["filter_check"], evaluate=lambda: self.silo.accuracy(keras_model),
        eval_every=cfg["eval_every"])
    return SeedResult(run.history[-1][1], [list(h) for h in run.history],
                      {"seconds_per_step": run.seconds_per_step(),
                       "tf_seconds_per_step": run.seconds_per_step(tf_only=True), "run": run})

  def end_spec(self, method: str, results: Sequence[SeedResult]) -> dict:
    """The Table 2 row: batch, s/step, calibration time, unused budget, never trained."""
    sps = float(np.mean([r.extras["seconds_per_step"] for r in results]))
    row = {"label": method, "table": "compare", "method": method, "seconds_per_step": sps,
           "history": results[0].history}
    if method == "filter":
      return {**row, **self._filter_row(results)}
    rates, finite, budgets = self._rates, self.finite, self.budgets
    summary = rates.summary()
    return {
        **row, "batch": f"{rates.q.sum():.1f} (expected)",
        "mean_batch": float(np.mean([r.extras["mean_batch"] for r in results])),
        "tf_seconds_per_step": sps, "calibration_seconds": rates.seconds,
        "noise_multiplier": self.cfg["noise_multiplier"], "steps": self.cfg["steps"],
        "mean_unused_budget": summary["unused_budget"]["mean"],
        "max_spent_over_budget": float(np.max(rates.epsilon[finite] / budgets[finite]))
        if finite.any() else 0.0,
        "records_never_trained": rates.excluded, "calibration": summary,
        "rates": per_level(budgets, rates.q)}

  def _filter_row(self, results: Sequence[SeedResult]) -> dict:
    run, cfg, finite, budgets = results[0].extras["run"], self.cfg, self.finite, self.budgets
    filt = run.filter
    spent = filt.epsilon_spent()
    unused = 1.0 - spent[finite] / budgets[finite]
    return {
        "batch": f"{len(self.silo.y)} (full)", "mean_batch": float(np.mean(run.active)),
        "tf_seconds_per_step": float(np.mean([r.extras["tf_seconds_per_step"]
                                              for r in results])),
        "calibration_seconds": None, "noise_multiplier": self._sigma,
        "steps": cfg["filter_steps"],
        "mean_unused_budget": float(unused.mean()) if unused.size else 0.0,
        "max_spent_over_budget": float(np.max(spent[finite] / budgets[finite]))
        if finite.any() else 0.0,
        "records_never_trained": int(np.count_nonzero(filt.steps_taken == 0)),
        "active": run.active.tolist(),
        "first_filtered": {str(k): v for k, v in run.first_filtered.items()},
        "orders": per_level(filt.epsilons, filt.alpha),
        "worst_case_steps": per_level(filt.epsilons, filter_gd.worst_case_steps(
            filt.epsilons, cfg["delta"], self._sigma, cfg["filter_alpha"]))}


def table3_scenarios(n: int, seed: int) -> dict:
  """Table 3's privacy setups for n records (budget draw seeded)."""
  rng = np.random.default_rng([seed, 3])
  levels = 1.0 + 0.05 * np.arange(100)
  return {
      "Group-3": preferences.Groups((1.0, 2.0, 3.0), (0.54, 0.37, 0.09)).sample(n, rng),
      "Group-100": rng.permutation(levels[np.arange(n) % 100]),
      "Individual-1000" if n == 1000 else f"Individual-{n}":
          preferences.BoundedMixGauss().sample(n, rng),
  }


@dataclasses.dataclass(frozen=True)
class Table3Spec:
  """One Table 3 row: a privacy setup and a rate method."""
  scenario: str
  method: str


class Table3Runs:
  """Table 3: calibration runtime and accuracy per (setup, method); seeds are trials."""

  def __init__(self, subset: Silo, cfg: dict):
    self.silo, self.cfg = subset, cfg
    self.params = TwoStageParams(cfg["table3_noise_multiplier"], cfg["table3_steps"], 1, 1.0,
                                 cfg["delta"])
    self.rates_of: dict = {}  # (scenario, method, trial) -> q

  def specs(self, methods: Sequence[str]) -> list[Table3Spec]:
    names = table3_scenarios(len(self.silo.y), self.cfg["budget_seed"])
    return [Table3Spec(name, m) for name in names for m in methods]

  def begin_spec(self, spec: Table3Spec) -> None:
    del spec

  def run_seed(self, spec: Table3Spec, trial: int) -> SeedResult:
    budgets = table3_scenarios(len(self.silo.y), self.cfg["budget_seed"] + trial)[spec.scenario]
    rates = record_calibration.calibrate_record_rates(budgets, self.params, method=spec.method)
    self.rates_of[spec.scenario, spec.method, trial] = rates.q
    randomness = PrivacyRandomness.for_run(
        trial, f"centralized/table3/{spec.scenario}/{spec.method}",
        self.cfg["insecure_reproducible_noise"])
    result = train_dp_sgd(self.silo, trial, rates.q, self.params.noise_multiplier,
                          self.cfg["clip_norm"], self.cfg["table3_learning_rate"],
                          self.params.local_steps, randomness, 0)
    result.extras.update(calibration_seconds=rates.seconds, details={
        "distinct_budgets": int(np.unique(budgets).size),
        "expected_batch": float(rates.q.sum()), "excluded_q0": rates.excluded,
        "lowered_by_exact_check": rates.lowered,
        "mean_unused_budget": rates.unused_budget()["mean"]})
    return result

  def end_spec(self, spec: Table3Spec, results: Sequence[SeedResult]) -> dict:
    """The row; its SCF-vs-BinarySearch agreement is filled in by :meth:`agreement`."""
    seconds = [r.extras["calibration_seconds"] for r in results]
    return {"label": f"{spec.scenario} · {spec.method}", "table": "table3",
            "scenario": spec.scenario, "method": spec.method,
            "calibration_seconds": seconds, "mean_calibration_seconds": float(np.mean(seconds)),
            **results[-1].extras["details"]}

  def agreement(self, scenario: str) -> Optional[float]:
    """max over trials of max_i |q_SCF,i − q_BinarySearch,i| (None without both)."""
    diffs = [float(np.max(np.abs(q - self.rates_of[scenario, "binary_search", trial])))
             for (name, method, trial), q in self.rates_of.items()
             if name == scenario and method == "scf"
             and (scenario, "binary_search", trial) in self.rates_of]
    return max(diffs) if diffs else None


def run_compare(silo: Silo, budgets: np.ndarray, methods: Sequence[str],
                seeds: Sequence[int], cfg: dict) -> list[dict]:
  """Table 2 and Fig. 7: one row per method (the first seed's curve in ``history``)."""
  return run_grid(list(methods), seeds, CompareRuns(silo, budgets, cfg))


def run_table3(silo: Silo, methods: Sequence[str], cfg: dict) -> list[dict]:
  """Table 3 on a ``table3_examples``-record subset; one row per (setup, method)."""
  family = Table3Runs(silo.subset(cfg["table3_examples"], cfg["data_seed"]), cfg)
  rows = run_grid(family.specs(methods), range(cfg["table3_trials"]), family)
  for row in rows:
    row["max_abs_q_difference_scf_vs_binary_search"] = family.agreement(row["scenario"])
  return rows


def run_experiment(silo: Silo, budgets: np.ndarray, cfg: dict, out_dir: str,
                   flag_config: dict, warning: Optional[str] = None) -> str:
  """``experiments.centralized`` as one call: the modes of ``cfg``, then summary and plot.

  Runs Table 2 and Fig. 7 (``mode`` compare or both) and Table 3 (table3 or
  both), writes ``summary.md``, ``summary.json`` (rows: the comparison's,
  then Table 3's; ``flag_config`` as the run's configuration) and
  ``centralized.png`` to ``out_dir``, and returns the tables' text.
  """
  compare, table3, text = [], [], []
  if cfg["mode"] in ("compare", "both"):
    levels = ", ".join(f"ε={e:g} ({100 * r:g}%)" for e, r in
                       zip(cfg["distribution"].epsilons, cfg["distribution"].ratios))
    print(f"compare: ThreeLevels {levels}; DP-SGD σ={cfg['noise_multiplier']:g}, "
          f"{cfg['steps']} steps, lr={cfg['learning_rate']:g}; seeds {cfg['seeds']}")
    compare = run_compare(silo, budgets, cfg["methods"], cfg["seeds"], cfg)
    text.append("## Table 2: SCF vs BinarySearch vs Filter (centralized)\n\n"
                + format_compare(compare, len(cfg["seeds"])))
    text += ["## Fig. 7: Filter's active records\n\n" + format_active(row, budgets)
             for row in compare if row["method"] == "filter"]
  if cfg["mode"] in ("table3", "both"):
    methods = [m for m in cfg["methods"] if m in DP_SGD_METHODS]
    print(f"table3: {cfg['table3_examples']}-record subset, σ={cfg['table3_noise_multiplier']:g}"
          f", {cfg['table3_steps']} steps, {cfg['table3_trials']} trial(s), {methods}")
    table3 = run_table3(silo, methods, cfg)
    text.append("## Table 3: SCF vs BinarySearch (calibration runtime, accuracy)\n\n"
                + format_table3(table3, cfg["table3_trials"]))
  if warning:
    text.insert(0, f"**{warning}** (--insecure_reproducible_noise)")
  body = "\n\n".join(text)
  with open(os.path.join(out_dir, "summary.md"), "w") as f:
    f.write(f"{silo.name}\n\n{body}\n")
  summary_lib.write_summary(
      out_dir, "centralized", flag_config, compare + table3, privacy_warning=warning,
      details={"silo": silo.name, "records": len(silo.y),
               "budget_counts": {str(e): int(c) for e, c in
                                 zip(*np.unique(budgets, return_counts=True))},
               "curves": {r["method"]: r["history"] for r in compare}})
  plot(compare, table3, os.path.join(out_dir, "centralized.png"))
  return body


def format_compare(rows: Sequence[dict], num_seeds: int) -> str:
  """Table 2: accuracy, batch, s/step, calibration time, σ, steps, budget use."""
  cells = []
  for r in rows:
    sps = f"{r['seconds_per_step'] * 1e3:.2f} ms"
    if r["method"] == "filter":
      sps += f" ({r['tf_seconds_per_step'] * 1e3:.2f} ms)"
    cells.append([
        METHOD_NAMES[r["method"]], r["batch"],
        report.percent_pm(r["mean_accuracy"], r["std_accuracy"], num_seeds), sps,
        report.or_dash(r["calibration_seconds"], lambda v: f"{v:.3f}"),
        f"{r['noise_multiplier']:.3g}", r["steps"], f"{100 * r['mean_unused_budget']:.2f}%",
        f"{r['max_spent_over_budget']:.4f}", r["records_never_trained"]])
  return report.markdown_table(
      ["method", "batch size", f"test acc (mean ± sd, {report.count(num_seeds, 'seed')})",
       "s/step (TF part)", "calibration (s)", "σ", "steps", "mean unused budget",
       "max ε spent/ε", "records never trained"], cells)


def format_active(row: dict, budgets: np.ndarray, points: int = 8) -> str:
  """Fig. 7 as a table: active records at a few steps, and when each level starts to drop."""
  active = np.asarray(row["active"])
  steps = np.unique(np.linspace(1, active.size, points).round().astype(int))
  text = report.markdown_table(["step", *(str(s) for s in steps)],
                               [["active records", *(str(active[s - 1]) for s in steps)]])
  if not row["first_filtered"]:
    return text
  levels = [[f"{float(e):g}", int(np.count_nonzero(budgets == float(e))),
             f"{(row['orders'] or {}).get(e):.2f}", f"{row['worst_case_steps'].get(e):g}",
             "never" if first is None else first]
            for e, first in row["first_filtered"].items()]
  return text + "\n\n" + report.markdown_table(
      ["ε level", "records", "α", "worst-case steps", "first filtered at step"], levels)


def format_table3(rows: Sequence[dict], trials: int) -> str:
  """Table 3: setup, method, distinct ε, E[batch], accuracy, calibration runtime, agreement."""
  return report.markdown_table(
      ["privacy setup", "method", "distinct ε", "E[batch]", "records at q=0",
       f"test acc (mean ± sd, {trials} trial(s))", "calibration runtime (s)",
       "SCF rates lowered by exact check", "max |q_SCF − q_BS|"],
      [[r["scenario"], METHOD_NAMES[r["method"]], r["distinct_budgets"],
        f"{r['expected_batch']:.1f}", r["excluded_q0"],
        report.percent_pm(r["mean_accuracy"], r["std_accuracy"], trials),
        f"{r['mean_calibration_seconds']:.3f}",
        r["lowered_by_exact_check"] if r["method"] == "scf" else report.DASH,
        report.or_dash(r["max_abs_q_difference_scf_vs_binary_search"],
                       lambda d: f"{d:.2e}")] for r in rows])


def plot(compare: Optional[Sequence[dict]], table3: Optional[Sequence[dict]],
         out: str) -> None:
  """Accuracy per step and Filter's active records (Fig. 7); Table 3's runtimes (log)."""
  panels = (2 if compare else 0) + (1 if table3 else 0)
  with report.figure(out, panels, figsize=(5.2 * panels, 4.2)) as axes:
    if compare:
      styles = {"SCF": "-", "BinarySearch": "--", "Exact": ":", "Filter": "-"}
      report.plot_histories(  # SCF and BinarySearch overlap
          axes.pop(0), [(METHOD_NAMES[r["method"]], r["history"]) for r in compare],
          xlabel="step", ylabel="test accuracy (first seed)", styles=styles)
      _plot_active(axes.pop(0), [r for r in compare if r["method"] == "filter"])
    if table3:
      ax = axes.pop(0)
      scenarios = list(dict.fromkeys(r["scenario"] for r in table3))
      methods = list(dict.fromkeys(r["method"] for r in table3))
      seconds = {(r["scenario"], r["method"]): r["mean_calibration_seconds"] for r in table3}
      report.grouped_bars(
          ax, scenarios, [(METHOD_NAMES[m], [seconds[s, m] for s in scenarios], None)
                          for m in methods], ylabel="calibration runtime (s)", log=True)
      ax.set_title("Table 3")


def _plot_active(ax, filter_rows: Sequence[dict]) -> None:
  """Fig. 7: Filter's active records per step, a red dot where a level starts to drop."""
  if not filter_rows:
    ax.set_axis_off()
    return
  active = np.asarray(filter_rows[0]["active"])
  ax.plot(np.arange(1, active.size + 1), active, color="C0")
  for first in filter_rows[0]["first_filtered"].values():
    if first is not None:
      ax.plot([first], [active[first - 1]], "o", color="red")
  ax.set_xlabel("step")
  ax.set_ylim(0, active.max() * 1.05)
  ax.set_ylabel("active records")
  ax.set_title("Filter: active records (Fig. 7)")
  ax.grid(alpha=0.3)
