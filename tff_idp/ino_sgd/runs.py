"""INO-SGD vs IDP-SGD vs "Drop x%" on one silo, through the engine's run template.

Data owners hold classes and set budgets (INO-SGD paper §5); every method ×
seed plans the owners' rates (:mod:`tff_idp.accounting.owner.plan`, SAMPLE or
SCALE, re-verified with dp-accounting), trains record-level DP-SGD on the
silo (:mod:`tff_idp.centralized.trainer`) with INO-SGD's importance weights
(Alg. 1, :mod:`tff_idp.ino_sgd.importance`) where asked, and evaluates per
owner group. :func:`run_methods` runs the grid with
:func:`tff_idp.engine.run_template.run_grid`; the rows follow the summary
schema of docs/api.md (``label``, ``mean_accuracy``, ``std_accuracy``, ...).

**Release mode** (``cfg["release_only"]``, the experiment's ``--release_only``;
issue 48): what is written is only what the DP analysis covers. The plan is
computed from the owners' record counts |D_n| (IDP-SGD's SAMPLE rates solve
Σ_n q_n|D_n| = b, SCALE's rate is b / Σ|D_n|, and z, the thresholds, the
achieved ε and INO-SGD's γ follow), so every value of it is an exact
statistic of the records: from two releases on N and N − 1 records,
``owner_sizes`` (or ``records``, or the rates) name the owner, i.e. under
budgets by class the class group, of the removed record. A release holds
none of them (:data:`NOT_PRIVATE_FIELDS`, the ``plan`` and ``gamma`` of
``details.runs``, the expected batch where a tenth of the records set it,
the owners' ε levels where budgets are per record, the record count in the
data's name; :func:`write_summary`); what stays is the evaluation of the
released models on held-out data (post-processing of models trained under
every owner's (ε_n, δ), INO-SGD Thm 3.3) and the flags. Outside release
mode they are written and labelled not private (a line under the plans
table, ``details.not_private``).
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tff_idp.accounting.owner import plan as owner_plan
from tff_idp.centralized import trainer as centralized
from tff_idp.centralized.silo import Silo
from tff_idp.engine import group_metrics
from tff_idp.engine import metrics as metrics_lib
from tff_idp.engine import paired_stats
from tff_idp.engine import report
from tff_idp.engine import summary as summary_lib
from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.engine.run_template import SeedResult
from tff_idp.engine.run_template import run_grid
from tff_idp.engine.summary import sample_sd
from tff_idp.ino_sgd import importance
from tff_idp.ino_sgd.methods import MethodRun
from tff_idp.ino_sgd.methods import Owners
from tff_idp.ino_sgd.methods import method_runs
from tff_idp.ino_sgd.methods import release_data_name

class InoSgdRuns:
  """:class:`~tff_idp.engine.run_template.FamilyRuns` of the INO-SGD comparison.

  ``cfg`` holds the plan and training settings (``epsilons``, ``delta``,
  ``steps``, ``expected_batch``, ``clip_norm``, ``mechanism``,
  ``learning_rate``, ``ino_gamma_ratio``/``ino_alpha``/``ino_beta``,
  ``eval_every``, ``data_seed``, ``owner_names``, ``preset``, ``progress``,
  ``insecure_reproducible_noise``, ``release_only``); each (run, seed) writes
  ``output_dir/<run slug>/seed<s>/metrics.csv``.
  """

  def __init__(self, silo: Silo, owners: np.ndarray, class_groups: dict, cfg: dict,
               output_dir: str):
    self.silo, self.owners, self.class_groups = silo, owners, class_groups
    self.cfg, self.output_dir = cfg, output_dir
    self.group_names = list(dict.fromkeys(class_groups.values()))
    self.runs: list[dict] = []  # every (run, seed), for the summary's details

  def begin_spec(self, spec: MethodRun) -> None:
    """Drop's records and the owners' plan (the same for every seed)."""
    cfg = self.cfg
    keep = (owner_plan.drop_less_private(self.owners, cfg["epsilons"], spec.drop,
                                         cfg["data_seed"])
            if spec.drop else np.ones(self.owners.shape, bool))
    self._keep = keep
    own = self.owners[keep]
    sizes = np.bincount(own, minlength=len(cfg["epsilons"]))
    self._plan = owner_plan.plan_owners(
        cfg["epsilons"], sizes, cfg["delta"], cfg["steps"], cfg["expected_batch"],
        cfg["clip_norm"], cfg["mechanism"], owner_names=cfg["owner_names"])
    self._q, self._thresholds = self._plan.record_rates(own), self._plan.record_thresholds(own)
    self._gamma, self._weight_fn = 0.0, None
    if spec.kind == "ino_sgd" and cfg["ino_gamma_ratio"] > 0:
      self._gamma = cfg["ino_gamma_ratio"] * float(np.dot(self._q, self._thresholds))
      self._weight_fn = importance.ino_example_weight_fn(
          antiderivative=importance.beta_antiderivative(cfg["ino_alpha"], cfg["ino_beta"],
                                                        self._gamma))

  def run_seed(self, spec: MethodRun, seed: int) -> SeedResult:
    """Trains one seed; writes its metrics.csv; the result carries the per-group report."""
    cfg, silo, names = self.cfg, self.silo, self.group_names
    fields = ["round"] + group_metrics.flat_field_names(names)
    writer = metrics_lib.MetricsWriter(
        f"{self.output_dir}/{spec.slug}/seed{seed}", fields,
        None if cfg["release_only"] else ["round", "mean_batch", "clipped_fraction"],
        privacy_warning=NOT_PRIVATE_LABEL if cfg["insecure_reproducible_noise"] else None)
    randomness = PrivacyRandomness.for_run(seed, f"ino_sgd/{cfg['preset']}/{spec.label}",
                                           cfg["insecure_reproducible_noise"])
    reports = []

    def evaluate_and_log(keras_model):
      report_ = group_metrics.group_report(silo.test_y, silo.predictions(keras_model),
                                           class_groups=self.class_groups, group_names=names)
      reports.append(report_)
      return report_.flat()

    try:
      run = centralized.train_record_dp_sgd(
          lambda: silo.keras_builder(seed), silo.x[self._keep], silo.y[self._keep], self._q,
          self._plan.noise_multiplier, self._plan.clip_norm, cfg["learning_rate"],
          cfg["steps"], randomness, evaluate_and_log, cfg["eval_every"],
          clip_norms=self._thresholds if cfg["mechanism"] == "scale" else None,
          example_weight_fn=self._weight_fn, progress=cfg["progress"],
          desc=f"{spec.label} seed {seed}")
      for (step, flat), (_, diag) in zip(run.history, run.chunk_diagnostics):
        writer.write({"round": step, **flat, **diag})
    finally:
      writer.close()
    record = {"label": spec.label, "kind": spec.kind, "drop": spec.drop, "seed": seed,
              "gamma": self._gamma, "plan": self._plan.to_dict(),
              "final": reports[-1].to_dict()}
    if cfg["release_only"]:
      for key in NOT_PRIVATE_RUN_FIELDS:  # statistics of the owners' record counts
        del record[key]
    else:
      record["diagnostics"] = {"mean_batch": run.mean_batch,
                               "clipped_fraction": run.clipped_fraction,
                               "seconds_per_step": run.seconds_per_step}
    self.runs.append(record)
    history = [[step, flat["accuracy"]] for step, flat in run.history]
    return SeedResult(reports[-1].overall_accuracy, history, {"final": record["final"]})

  def end_spec(self, spec: MethodRun, results: Sequence[SeedResult]) -> dict:
    """Mean ± sd (ddof = 1) over seeds per group, the worst group, the imbalance, the plan.

    In release mode (module doc) the row has no plan: none of :data:`NOT_PRIVATE_FIELDS`.
    """
    finals = [r.extras["final"] for r in results]
    names, plan = self.group_names, self._plan.to_dict()

    def stat(values):
      v = np.asarray(values, float)
      return {"mean": float(np.nanmean(v)), "std": sample_sd(v), "values": v.tolist()}

    row = {
        "label": spec.label, "seeds": len(finals),
        "accuracy": stat([f["overall_accuracy"] for f in finals]),
        "group_accuracy": {g: stat([f["accuracy"][g] for f in finals]) for g in names},
        "group_recall": {g: stat([f["recall"][g] for f in finals]) for g in names},
        "worst_group_accuracy": stat([f["worst_group"]["accuracy"] for f in finals]),
        "imbalance": stat([f["imbalance"] for f in finals]),
        "records": int(sum(plan["owner_sizes"])), "rates": plan["sampling_rates"],
        "thresholds": plan["clip_thresholds"], "noise_multiplier": plan["noise_multiplier"],
        "achieved_epsilons": plan["achieved_epsilons"], "gamma": self._gamma,
        "history": results[0].history,
    }
    if self.cfg["release_only"]:
      for key in NOT_PRIVATE_FIELDS:
        del row[key]
    return row


# Row entries that are exact statistics of the silo's records (issue 48): the record
# count and the owner plan, which is computed from the owners' record counts |D_n|
# (module doc). No DP analysis covers them; release mode writes none.
NOT_PRIVATE_FIELDS = ("records", "rates", "thresholds", "noise_multiplier",
                      "achieved_epsilons", "gamma")
# The same in each (run, seed) record of ``details.runs``.
NOT_PRIVATE_RUN_FIELDS = ("plan", "gamma")
NOT_PRIVATE_NOTE = (
    "Not private: the record counts and the plans above (rates q, thresholds C, z, the "
    "spent budgets, γ) are exact statistics of the owners' record counts, and under "
    "budgets by class of the records' labels; so are the record count in the data's name "
    "and an expected batch set by the record count. No DP analysis covers them: do not "
    "publish them; --release_only leaves them out.")
RELEASE_PLANS_NOTE = (
    "Every owner's budget (ε_n, δ = {delta:g}) is met: the plan is re-verified with "
    "dp-accounting before training (INO-SGD Thm 3.3). Its rates, thresholds, noise "
    "multiplier, spent budgets and record counts are computed from the owners' record "
    "counts, so a release (--release_only) holds none of them.")


def run_methods(silo: Silo, owners: np.ndarray, class_groups: dict, cfg: dict,
                runs: Sequence[MethodRun], seeds: Sequence[int], output_dir: str
                ) -> tuple[list[dict], list[dict]]:
  """Every run × seed; returns (one summary row per run, every (run, seed) record)."""
  family = InoSgdRuns(silo, owners, class_groups, cfg, output_dir)
  rows = run_grid(runs, seeds, family)
  return rows, family.runs


def compare(silo: Silo, owners: Owners, cfg: dict, output_dir: str,
            **summary: Any) -> tuple[str, list[dict]]:
  """The comparison of ``cfg["methods"]`` (INO-SGD paper §5, Table 3) on ``silo``'s owners.

  Every method × seed (:func:`run_methods`; Drop once per ``cfg["drop_percents"]``),
  then :func:`write_summary` with the groups of ``owners``, ``silo``'s name and
  ``summary`` (its keyword arguments). Returns (the text printed, the rows).
  What ``experiments.ino_sgd`` and :func:`tff_idp.runners.run_ino_sgd` run.
  """
  rows, records = run_methods(silo, owners.of_record, owners.class_groups, cfg,
                              method_runs(cfg["methods"], cfg["drop_percents"]),
                              cfg["seeds"], output_dir)
  body = write_summary(rows, records, cfg, list(dict.fromkeys(owners.class_groups.values())),
                       output_dir, data_name=silo.name, **summary)
  return body, rows


def group_heads(names: Sequence[str], epsilons=None) -> list[str]:
  """Each group's column name: its classes ("classes 0-4", "class 3"), with its owner's ε.

  ``epsilons``: each group's budget (None when the groups are classes rather
  than owners, i.e. per-record budgets), shown for up to four groups (more
  are in the privacy plans' table).
  """
  labels = [g if g.startswith("class") else f"classes {g}" for g in names]
  if epsilons is not None and len(names) <= 4:
    return [f"{g} (ε={e:g})" for g, e in zip(labels, epsilons)]
  return labels


def _percent_pm(stats: dict) -> str:
  """``mean ± sd`` in points; a dash for the sd over fewer than two seeds."""
  return report.percent_pm(stats["mean"], stats["std"], len(stats.get("values", [0, 0])))


def format_table(rows: Sequence[dict], names: Sequence[str], epsilons=None) -> str:
  """The per-group table: overall, each group's accuracy, worst group, imbalance.

  Groups are named by their classes ("classes 0-4", "class 3"; :func:`group_heads`).
  """
  heads = group_heads(names, epsilons)
  pm = _percent_pm
  return report.markdown_table(
      ["method", "overall acc (%)", *(f"acc {h} (%)" for h in heads), "worst group (%)",
       "imbalance (std of recalls, %)"],
      [[r["label"], pm(r["accuracy"]), *(pm(r["group_accuracy"][g]) for g in names),
        pm(r["worst_group_accuracy"]), pm(r["imbalance"])] for r in rows])


PAIRED_METHODS = ("INO-SGD", "IDP-SGD")
"""The paired comparison's A and B: does INO-SGD's weighting beat IDP-SGD per group?"""


def paired_by_group(rows: Sequence[dict], names: Sequence[str]) -> Optional[list[tuple]]:
  """(group, INO-SGD − IDP-SGD) per group, then overall and the worst group; None without both.

  The differences are of the final test accuracies, paired by seed
  (:func:`tff_idp.engine.paired_stats.paired_comparison`, the paired t-test
  of the IDP-FedAvg table): both methods share each seed's model init and
  data; their sampling and noise are fresh per run. The INO-SGD paper's claim
  (§5, Table 3) is that INO-SGD raises the more private owners' accuracy
  without lowering the others'.
  """
  by_label = {r["label"]: r for r in rows}
  if not all(m in by_label for m in PAIRED_METHODS):
    return None
  ino, idp = (by_label[m] for m in PAIRED_METHODS)
  stats = [(g, ino["group_accuracy"][g], idp["group_accuracy"][g]) for g in names]
  stats += [("overall", ino["accuracy"], idp["accuracy"]),
            ("worst group", ino["worst_group_accuracy"], idp["worst_group_accuracy"])]
  return [(g, a, b, _paired(a["values"], b["values"])) for g, a, b in stats]


def _paired(a: Sequence[float], b: Sequence[float]) -> Optional[paired_stats.PairedComparison]:
  """INO − IDP over the seeds; None when a value is missing (a group with no test records)."""
  if not np.all(np.isfinite(a)) or not np.all(np.isfinite(b)):
    return None
  return paired_stats.paired_comparison(a, b, *PAIRED_METHODS)


def format_paired(rows: Sequence[dict], names: Sequence[str], epsilons=None) -> Optional[str]:
  """INO − IDP per group with its 95% CI and one-sided p (None unless both methods ran)."""
  pairs = paired_by_group(rows, names)
  if pairs is None:
    return None
  heads = dict(zip(names, group_heads(names, epsilons)))
  pm = _percent_pm
  cells = [[heads.get(g, g), pm(b), pm(a), report.or_dash(cmp, lambda c: c.format()),
            report.DASH if cmp is None or cmp.n < 2 else ("yes" if cmp.separated else "no")]
           for g, a, b, cmp in pairs]
  n = len(pairs[0][1]["values"])
  table = report.markdown_table(
      ["group", "IDP-SGD acc (%)", "INO-SGD acc (%)",
       "INO − IDP (points, 95% CI, one-sided p)", "INO better"], cells)
  return (table + f"\n\n{paired_stats.TEST_NAME} of the final accuracies, n = "
          f"{report.count(n, 'seed')}, df = {max(n - 1, 0)}; the two methods share each "
          "seed's model init and data, their sampling and noise are fresh per run. p is "
          "one-sided (H1: INO-SGD more accurate); INO better = the 95% CI lies above 0.")


def format_plans(rows: Sequence[dict], names: Sequence[str], epsilons, delta: float) -> str:
  """Each run's plan: records, z, γ and per owner q / C / ε spent against its budget."""
  table = report.markdown_table(
      ["method", "records", "z", "γ", "per owner: q / C / ε spent (≤ budget)"],
      [[r["label"], r["records"], f"{r['noise_multiplier']:.3f}", f"{r['gamma']:.1f}",
        "; ".join(f"{g}: {q:.4g} / {c:.3g} / {a:.4g} (≤ {e:g})"
                  for g, q, c, a, e in zip(names, r["rates"], r["thresholds"],
                                           r["achieved_epsilons"], epsilons))]
       for r in rows])
  return table + f"\n\nδ = {delta:g}; ε recomputed with dp-accounting before training."


def plot(rows: Sequence[dict], names: Sequence[str], out: str, title: str) -> None:
  """Per-group accuracy bars (mean ± sd over seeds), one colour per method."""
  groups = list(names) + ["overall"]
  with report.figure(out, figsize=(max(6.0, 1.1 * len(groups) * len(rows) / 2 + 3), 4.2)
                     ) as (ax,):
    series = []
    for r in rows:
      stats = [r["group_accuracy"][g] for g in names] + [r["accuracy"]]
      series.append((r["label"], [100 * s["mean"] for s in stats],
                     [100 * s["std"] for s in stats]))
    report.grouped_bars(ax, groups, series, ylabel="test accuracy (%)",
                        rotate=len(groups) > 5, legend_size=8)
    ax.set_title(title)



def release_config(cfg: Mapping[str, Any], *, by_class: bool,
                   expected_batch_given: bool) -> dict:
  """The part of ``cfg`` a release may hold (module doc): what the flags fix.

  Without ``expected_batch_given`` (b from the default rule, a tenth of the
  records) the expected batch is left out; without ``by_class`` (budgets per
  record: the owners are the budget levels the records hold) the owners'
  ``epsilons`` and ``owner_names`` too.
  """
  out = {k: v for k, v in cfg.items() if k != "owners"}
  if not expected_batch_given:
    out.pop("expected_batch", None)
  if not by_class:
    out.pop("epsilons", None)
    out.pop("owner_names", None)
  return out


def write_summary(rows: Sequence[dict], run_records: Sequence[dict], cfg: dict,
                  group_names: Sequence[str], output_dir: str, *, title: str, data_name: str,
                  group_epsilons: Optional[Sequence[float]] = None,
                  details: Optional[dict] = None, notes: Sequence[str] = (),
                  expected_batch_given: bool = False) -> str:
  """Writes ``summary.md``, ``summary.json`` and ``per_group.png``; returns the text printed.

  ``cfg`` carries ``seeds``, ``epsilons``, ``owner_names``, ``delta``,
  ``insecure_reproducible_noise`` and ``release_only``; ``notes`` are
  paragraphs added below the tables (e.g. the paper's numbers).
  ``group_epsilons`` (the groups' ε) is given where the groups are owners by
  class, i.e. the budgets follow the classes (flags); None for budgets per
  record.

  Release mode (``cfg["release_only"]``, module doc): no plans table (a line
  saying every budget is met instead), the config without what the records
  set (:func:`release_config`; ``expected_batch_given``: b came from a flag
  or a preset), the data's name without its record count, and
  ``details.owners`` only where the owners are classes. Otherwise the plans
  are labelled not private (:data:`NOT_PRIVATE_NOTE`, ``details.not_private``).
  """
  warning = NOT_PRIVATE_LABEL if cfg["insecure_reproducible_noise"] else None
  release = bool(cfg.get("release_only"))
  by_class = group_epsilons is not None
  table = format_table(rows, group_names, group_epsilons)
  paired = format_paired(rows, group_names, group_epsilons)
  if release:
    plans = RELEASE_PLANS_NOTE.format(delta=cfg["delta"])
    data_name = release_data_name(data_name)
    config = release_config(cfg, by_class=by_class, expected_batch_given=expected_batch_given)
    details = {k: v for k, v in (details or {}).items() if by_class or k != "owners"}
    not_private = {}
  else:
    plans = (format_plans(rows, cfg["owner_names"], cfg["epsilons"], cfg["delta"])
             + f"\n\n{NOT_PRIVATE_NOTE}")
    config = {k: v for k, v in cfg.items() if k != "owners"}
    not_private = {"not_private": {
        "fields": [*NOT_PRIVATE_FIELDS, *(f"details.runs.{k}" for k in NOT_PRIVATE_RUN_FIELDS),
                   "details.data", "config.expected_batch"],
        "note": NOT_PRIVATE_NOTE}}
  seeds = report.count(len(cfg["seeds"]), "seed")
  text = [f"## {title}: per-group test accuracy ({seeds})\n\n{table}",
          *([f"## INO-SGD − IDP-SGD per group, paired by seed\n\n{paired}"] if paired else []),
          f"## Privacy plans (the same for every seed)\n\n{plans}", *notes]
  if warning:
    text.insert(0, f"**{warning}** (--insecure_reproducible_noise)")
  body = "\n\n".join(text)
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, "summary.md"), "w") as f:
    f.write(f"{data_name}\n\n{body}\n")
  summary_lib.write_summary(
      output_dir, "ino_sgd", config, rows, privacy_warning=warning,
      details={"data": data_name, "runs": list(run_records),
               "paired": [dict(cmp.to_dict(), group=g) if cmp else {"group": g}
                          for g, _, _, cmp in paired_by_group(rows, group_names) or []],
               **(details or {}), **not_private})
  plot(rows, group_names, os.path.join(output_dir, "per_group.png"), title)
  return body
