"""Record-level runs end to end: every method × seed, then a Fig. 8-style table (rPDP-FL §7.2).

:func:`run` calibrates each method (ours = SCF rates, Minimum, Dropout,
PrivacyFree; :mod:`tff_idp.accounting.record.plan`), builds the rPDP-FL TFF
process (Alg. 3, :func:`tff_idp.rpdp.client_work.build_rpdp_fedavg_process`),
runs every seed through :func:`tff_idp.rpdp.record_level.run_record_level`
(checkpoints, per-record ledger, secret randomness) and returns one summary
row per method; :func:`format_table` and :func:`plot` present them.
``experiments.rpdp`` is its command line and :func:`tff_idp.runners.run_rpdp`
its one-call Python entry.

**Release mode** (``release_only``, the experiments' ``--release_only``;
issue 48): what is written is only what the DP analysis covers. The
records' budgets ε_ij are personal (under ``by_class`` a record's budget is
its label's), and any exact statistic of them reveals one record by
differencing two releases that differ in it: N·m − (N−1)·m′ of a mean is the
removed record's budget, and a histogram cell moves by one, withheld or
not. So a release holds no such statistic (:data:`NOT_PRIVATE_FIELDS`: the
expected batch, records at q = 0, the ledger's ε spent and budget use, the
mean budget, the budget histogram, the calibration's fit and counts), and
``metrics.csv`` gets no ledger columns (:func:`release_plan`); the rows keep
the evaluations of the released models on held-out data (post-processing).
Outside release mode those statistics are written and labelled not private
(``summary.json``'s ``details.not_private``, a line under the table).

With an ``audit`` plug-in (``RecordCanaryAudit(k)`` of
:mod:`tff_idp.audit.record_canaries`: record-level gradient canaries,
Andrew et al., ICLR 2024) every private method also gets an empirical
privacy audit: one more run of its first seed with
k canaries, whose per-level "ε bound" (the ledger's) and "ε empirical (95%
CI)" go into the summary row (``audit``), with the final accuracy with and
without canaries; the audit's table is
:func:`tff_idp.audit.report.format_record_audit_table`.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import os
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import console
from tff_idp import models
from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.ledger import RecordBudgetAccountant
from tff_idp.accounting.record.plan import DROPOUT_CUTOFF_FROM_RECORDS
from tff_idp.accounting.record.plan import RecordPlan
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.rpdp.client_work import build_rpdp_fedavg_driver_process
from tff_idp.engine import evaluation
from tff_idp.engine import group_metrics
from tff_idp.rpdp import record_level
from tff_idp.engine.metrics import read_metrics
from tff_idp.engine import report
from tff_idp.engine import summary as summary_lib
from tff_idp.engine.run_template import SeedResult
from tff_idp.engine.run_template import run_grid
from tff_idp.rpdp.defaults import DEFAULTS  # noqa: F401  pylint: disable=unused-import  (re-exported)



class AuditConfigError(ValueError):
  """The requested canary audit cannot be set up (raised before any training)."""


class RecordAuditPlugin(Protocol):
  """What :func:`run` asks of an audit plug-in (the audit lives in ``tff_idp.audit``).

  ``prepare`` validates the audit against every method's plan before any
  training (ValueError with advice); ``audits(method)`` says whether a method
  gets an audited run; ``run`` performs it and returns the row's entries.
  """

  def prepare(self, plans: Mapping[str, Any], records: Any) -> None: ...

  def audits(self, method: str) -> bool: ...

  def run(self, model_fn: Callable, records: Any, plan: Any, *, run_seed: int,
          output_dir: str, accuracy_without: float, **audit_kwargs: Any) -> dict: ...


@dataclasses.dataclass
class Federation:
  """A record-level federation with its test set and model (``head``: softmax or sigmoid)."""
  records: record_level.RecordFederation
  test_x: np.ndarray
  test_y: np.ndarray
  keras_builder: object
  name: str
  num_classes: int
  head: str = "softmax"


def group_summary(final_rows: list[dict], group_names: list[str]) -> dict:
  """Per-group utility of the final evaluations (one metrics.csv row per seed).

  Means over seeds of each group's accuracy and macro recall, of the worst
  group's accuracy and of the imbalance (std of the per-group recalls,
  INO-SGD D.4.3), with the worst group of every seed. Missing values (a
  group without test examples) are NaN.
  """
  def values(column: str) -> np.ndarray:
    return np.array([math.nan if r.get(column) is None else float(r[column])
                     for r in final_rows])

  accuracy = {g: values(f"eval_acc/{g}") for g in group_names}
  worst = []
  for i in range(len(final_rows)):
    scored = [(accuracy[g][i], g) for g in group_names if not math.isnan(accuracy[g][i])]
    worst.append(min(scored, key=lambda t: t[0])[1] if scored else None)
  worst_acc = values("eval_worst_group_accuracy")
  imbalance = values("eval_imbalance")
  return {
      "group_accuracy": {g: float(np.mean(a)) for g, a in accuracy.items()},
      "group_recall": {g: float(np.mean(values(f"eval_recall/{g}"))) for g in group_names},
      "worst_groups": worst, "final_worst_group_accuracies": worst_acc.tolist(),
      "mean_worst_group_accuracy": float(np.mean(worst_acc)),
      "final_imbalances": imbalance.tolist(), "mean_imbalance": float(np.mean(imbalance))}


def expected_batch(plan) -> float:
  """Records a client's local DP-SGD step draws on average, Σ_j q_ij, over the clients."""
  return float(np.mean([np.sum(q) for q in plan.rates.values()])) if plan.rates else 0.0


def warn_if_batch_below_one(plan) -> Optional[str]:
  """One warning line when ``plan``'s expected batch per local step is below 1 (issue 34).

  Poisson sampling at such rates leaves most steps empty: on 4 hospitals
  Minimum drew 0.3-3 records per step and scored below the majority class.
  Returns the message (None when the batch is large enough).
  """
  batch = expected_batch(plan)
  if batch >= 1:
    return None
  params = getattr(plan, "params", None)
  if plan.method == "privacy_free":
    advice = "raise privacy_free_batch (--privacy_free_batch)"
  elif params is None:
    advice = ("raise noise_multiplier (σ: the rates the budgets allow grow with it) or "
              "lower rounds or local_steps")
  else:  # issue 51: name the flags and their values now, so a small silo knows what to change
    advice = (f"raise noise_multiplier (--noise_multiplier, now {params.noise_multiplier:g}: "
              "the rates the budgets allow grow with it) or lower rounds (--rounds, now "
              f"{params.rounds}) or local_steps (--local_steps, now {params.local_steps}); "
              "small silos: see docs/rpdp.md, \"Small silos\"")
  message = (f"{plan.method} samples {batch:.2g} records per local step on average "
             f"(below 1, so most steps train on nothing); {advice}.")
  console.warning(message)
  return message


def training_line(config: Mapping) -> str:
  """The hyperparameters of the table's runs, in one line above it (issue 34 item 3)."""
  return (f"training: T={config['rounds']} rounds of τ={config['local_steps']} local "
          f"DP-SGD steps, client rate λ={config['client_rate']}, σ={config['noise_multiplier']}, "
          f"clip L={config['clip_norm']}, lr η={config['learning_rate']}, "
          f"δ={config['delta']}, {config['threat_model']}")


def federation_line(federation: Federation, budgets: str, params: TwoStageParams,
                    clip_norm: float, local_algorithm: str, release_only: bool) -> str:
  """The line printed before training: the federation, its budgets and Alg. 3's settings.

  The exact record count is a statistic of the private records: under
  ``release_only`` the line holds none (issue 48).
  """
  n = sum(federation.records.sizes.values())
  records = "" if release_only else f"{n} records, "
  return (f"federation: {federation.name}: {records}{len(federation.test_y)} test; "
          f"{budgets}; T={params.rounds}, τ={params.local_steps}, "
          f"λ={params.client_rate:g}, σ={params.noise_multiplier:g}, L={clip_norm:g}, "
          f"δ={params.delta:g}, {params.threat_model}, local: {local_algorithm}")


def format_table(results: list[dict], num_seeds: int) -> str:
  """The Fig. 8-style table; with budgets by class, per-group utility columns too.

  Rows made in release mode (:func:`is_release`) get the release's columns
  only: the accuracy, and the per-group utility.
  """
  by_group = all("group_accuracy" in r for r in results)
  release = is_release(results)
  header = ["method", f"accuracy (mean ± sd, {report.count(num_seeds, 'seed')})"]
  if not release:
    header += ["E[batch]/step", "records with q=0", "excluded at end",
               "mean ε spent / mean budget", "max budget used vs effective ε",
               "budget used vs own ε_ij (max / mean)", "SCF R²", "lowered by exact check"]
  if by_group:
    header += ["accuracy per group (mean)", "worst group accuracy (mean)",
               "imbalance (sd of group recalls)"]
  cells = []
  for r in results:
    row = [r["method"], report.percent_pm(r["mean_accuracy"], r["std_accuracy"], num_seeds)]
    if not release:
      row += _not_private_cells(r)
    if by_group:
      per_group = ", ".join(f"{g}: {100 * a:.2f}" for g, a in r["group_accuracy"].items())
      worst = ", ".join(dict.fromkeys(g for g in r["worst_groups"] if g)) or report.DASH
      row += [per_group, f"{100 * r['mean_worst_group_accuracy']:.2f} ({worst})",
              f"{100 * r['mean_imbalance']:.2f}"]
    cells.append(row)
  return report.markdown_table(header, cells)


def _not_private_cells(r: Mapping) -> list:
  """The table cells of a row's :data:`NOT_PRIVATE_FIELDS` and calibration statistics
  (a dash for each one the row lacks)."""
  c = r["calibration"]
  spent = report.DASH if r.get("mean_epsilon_spent") is None else \
      f"{r['mean_epsilon_spent']:.3f} / {r['mean_budget']:.3f}"
  vs_own = report.DASH if r.get("max_budget_used_vs_own") is None else \
      f"{r['max_budget_used_vs_own']:.3f} / {r['mean_budget_used_vs_own']:.3f}"
  return [report.or_dash(r.get("mean_expected_batch"), lambda v: f"{v:.1f}"),
          report.or_dash(r.get("records_q0")), report.or_dash(r.get("excluded_at_end")), spent,
          report.or_dash(r.get("max_budget_used_vs_effective"), lambda v: f"{v:.3f}"),
          vs_own, f"{c['r_squared']:.4f}" if "r_squared" in c else report.DASH,
          c.get("lowered_by_exact_check", report.DASH)]


def plot(results: list[dict], out: str) -> None:
  """Accuracy per round (first seed) and, outside release mode, the records' budgets."""
  hist = results[0].get("budget_histogram")
  if hist is None:  # release mode: the histogram is a statistic of the records' budgets
    with report.figure(out, 1) as (ax0,):
      report.plot_histories(ax0, [(r["method"], r["history"]) for r in results],
                            ylabel="test accuracy (first seed)")
    return
  with report.figure(out, 2, figsize=(11, 4.2)) as (ax0, ax1):
    report.plot_histories(ax0, [(r["method"], r["history"]) for r in results],
                          ylabel="test accuracy (first seed)")
    edges = np.asarray(hist["edges"], float)
    counts = np.asarray([0 if c is None else c for c in hist["counts"]], float)
    shown = counts > 0
    if np.any(shown):
      ax1.bar(edges[:-1][shown], counts[shown], width=np.diff(edges)[shown], align="edge",
              edgecolor="white")
    ax1.set_xscale("log")
    ax1.set_xlabel("ε_ij")
    ax1.set_ylabel("records")
    ax1.set_title(f"records' budgets (NOT private; cells < {hist['min_cell_count']} hidden)")


def run(federation: Federation, budgets: "dict | Callable[[int], dict]",
        params: TwoStageParams, methods, seeds,
        output_dir: str, clip_norm: float, learning_rate: float, privacy_free_batch: float,
        eval_every: int, checkpoint_every: int, progress: bool,
        estimator: str = "scf", insecure_reproducible_noise: bool = False,
        release_only: bool = False,
        local_weight_fn: Optional[Callable] = None,
        local_algorithm: str = "dp_sgd",
        class_groups: Optional[Mapping[int, str]] = None,
        restart: bool = False, audit: Optional[RecordAuditPlugin] = None,
        dropout_cutoff: Optional[float] = None, client_execution: str = "auto",
        parallel_clients: Optional[int] = None) -> list[dict]:
  """Every method × seed; returns one summary row per method.

  ``client_execution`` / ``parallel_clients``: where the clients' DP-SGD runs
  (:func:`tff_idp.rpdp.client_work.build_rpdp_fedavg_driver_process`; ``auto``: in
  this process for models of ≥ 10,000 parameters). An audit's canary runs
  always use TFF client work.

  ``budgets``: ``{client_id: ε array}``, one draw for every seed, or a
  function of the seed returning one (a fresh budget draw per seed): each
  seed then gets its own plans, written to ``record_plan_seed<s>.csv``.

  ``dropout_cutoff`` is the Dropout baseline's ε_mod from the budget
  specification (:func:`tff_idp.preferences.expected_budget` /
  :func:`tff_idp.preferences.class_budget_cutoff`); ``None`` takes the mean
  of ``budgets`` (see :mod:`tff_idp.accounting.record.plan`).

  ``restart`` discards each run directory's checkpoints and metrics first
  (the ``--restart`` flag); otherwise a rerun resumes, and a finished run
  returns its stored rows.

  ``local_weight_fn`` (e.g. INO-SGD's ``importance.ino_example_weight_fn``)
  weights the clipped gradients of the private methods' local steps; it does
  not apply to PrivacyFree, which does not clip. ``class_groups`` (``{label:
  "eps=<ε>"}``, budgets by class) adds per-group utility to the evaluation,
  to metrics.csv and to each summary row (:func:`group_summary`).

  Each row reports the last seed's budget usage (rPDP-FL §6.2 ledger) twice:
  ``max_budget_used_vs_effective``, ε spent / the budget the method calibrated
  to and enforced (ε_min for Minimum, ε_mod for Dropout, ε_ij for ours;
  ``max_budget_used`` is the same value under its earlier name), and
  ``max_budget_used_vs_own`` / ``mean_budget_used_vs_own``, ε spent / each
  record's own ε_ij (for ours the same as vs effective; for Minimum the mean
  shows the personal budget left unused; Dropout's dropped records count 0).

  ``release_only`` (release mode, module doc): no ``record_plan.csv``, no
  diagnostics, no ledger columns in ``metrics.csv``, no small-batch warning,
  and rows without :data:`NOT_PRIVATE_FIELDS`, whose ``calibration`` holds
  only what the flags fix (:func:`release_calibration`). It refuses
  PrivacyFree (no noise) and an ``audit`` (a second training on the same
  records): no ledger accounts for either (ValueError, before any training).

  ``audit`` (a plug-in, e.g. :class:`tff_idp.audit.record_canaries.RecordCanaryAudit`)
  adds an audit run (the first seed, in ``<method>/seed<s>-audit``) of every
  private method it audits. Its per-level results go into the row's
  ``audit`` and its final accuracy into ``audit_accuracy_with_canaries``
  (``audit_accuracy_without_canaries``: the same seed's run without
  canaries).
  """
  if release_only and "privacy_free" in methods:  # issue 48: it trains without noise
    raise ValueError("release_only=True with privacy_free in methods: it trains without "
                     "noise (no ledger accounts for its model); drop it from methods.")
  if release_only and audit is not None:  # issue 48: a second training on the records
    raise AuditConfigError("release_only=True with an audit: its runs train again on the "
                           "same records, which no ledger accounts for; audit without "
                           "release_only.")
  spec = collections.OrderedDict(
      x=tf.TensorSpec([None] + list(federation.test_x.shape[1:]), tf.float32),
      y=tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(federation.keras_builder, spec, head=federation.head)
  evaluate = evaluation.keras_evaluator(federation.keras_builder, federation.test_x,
                                    federation.test_y, batch_size=2048,
                                    class_groups=class_groups, head=federation.head)
  group_names = list(dict.fromkeys(class_groups.values())) if class_groups else []
  # Evaluator keys beyond loss and accuracy, written to metrics.csv as eval_<key>.
  eval_metrics = [k for k in group_metrics.flat_field_names(group_names)
                  if k != "accuracy"] if class_groups else []
  seeds = [int(s) for s in seeds]
  budgets_by_seed = ({s: budgets(s) for s in seeds} if callable(budgets)
                     else {s: budgets for s in seeds})
  plans_by_seed: dict = {}
  for s in seeds:  # every calibration before any training; one per draw
    same_draw = next((t for t in plans_by_seed if budgets_by_seed[t] is budgets_by_seed[s]),
                     None)
    plans_by_seed[s] = plans_by_seed[same_draw] if same_draw is not None else {
        m: record_level.make_record_plan(m, budgets_by_seed[s], params, clip_norm,
                                         privacy_free_batch, estimator,
                                         dropout_cutoff=dropout_cutoff)
        for m in methods}
  # The per-record plan holds personal budgets: a diagnostic, not part of a release.
  if release_only:
    pass
  elif callable(budgets):
    for s in seeds:
      write_record_plan(plans_by_seed[s], params, output_dir,
                        file_name=f"record_plan_seed{s}.csv")
  else:
    write_record_plan(plans_by_seed[seeds[0]], params, output_dir)
  if audit is not None:
    try:  # validate every audit before any training
      audit.prepare(plans_by_seed[seeds[0]], federation.records)
    except ValueError as e:
      raise AuditConfigError(str(e)) from None
  # The rates depend on the budgets only; the warning's batch is a statistic of them,
  # so a release prints none (issue 48 A).
  for plan in ([] if release_only else plans_by_seed[seeds[0]].values()):
    warn_if_batch_below_one(plan)
  family = _RecordRuns(
      federation=federation, budgets_by_seed=budgets_by_seed, params=params,
      plans_by_seed=plans_by_seed, seeds=seeds,
      output_dir=output_dir, model_fn=model_fn, evaluate=evaluate,
      learning_rate=learning_rate, eval_every=eval_every, checkpoint_every=checkpoint_every,
      progress=progress, local_weight_fn=local_weight_fn, local_algorithm=local_algorithm,
      class_groups=class_groups, group_names=group_names, release_only=release_only,
      audit=audit, execution=dict(client_execution=client_execution,
                                  parallel_clients=parallel_clients), run_kwargs=dict(
          fingerprint={"head": federation.head}, keras_builder=federation.keras_builder,
          insecure_reproducible_noise=insecure_reproducible_noise,
          release_only=release_only, eval_metrics=eval_metrics, restart=restart))
  return run_grid(list(methods), seeds, family)


@dataclasses.dataclass
class _RecordRuns:
  """rPDP-FL in the engine's run template (:func:`tff_idp.engine.run_template.run_grid`).

  A run specification is a method (ours, minimum, dropout, privacy_free):
  its plan is calibrated once; processes are shared by methods with the same
  σ and clip; each seed runs :func:`record_level.run_record_level`.
  """
  federation: Federation
  budgets_by_seed: dict
  params: TwoStageParams
  plans_by_seed: dict
  seeds: list
  output_dir: str
  model_fn: Callable
  evaluate: Callable
  learning_rate: float
  eval_every: int
  checkpoint_every: int
  progress: bool
  local_weight_fn: Optional[Callable]
  local_algorithm: str
  class_groups: Optional[Mapping[int, str]]
  group_names: list
  release_only: bool
  audit: Optional[RecordAuditPlugin]
  execution: dict
  run_kwargs: dict
  processes: dict = dataclasses.field(default_factory=dict)

  def begin_spec(self, method: str) -> None:
    plan = self.plans_by_seed[self.seeds[0]][method]  # σ and L are the same for every seed
    key = (plan.noise_multiplier, plan.clip_norm)
    if key not in self.processes:
      self.processes[key] = build_rpdp_fedavg_driver_process(
          self.model_fn,
          client_optimizer=tff.learning.optimizers.build_sgdm(self.learning_rate),
          server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
          local_steps=self.params.local_steps, noise_multiplier=plan.noise_multiplier,
          clip_norm=plan.clip_norm, loss_fn=models.per_example_loss(self.federation.head),
          example_weight_fn=self.local_weight_fn if math.isfinite(plan.clip_norm) else None,
          **self.execution)
    self.process = self.processes[key]
    self.hyperparameters = {"client_optimizer": "sgd",
                            "client_learning_rate": self.learning_rate,
                            "server_optimizer": "sgd", "server_learning_rate": 1.0,
                            "local_steps": self.params.local_steps,
                            "local_algorithm": self.local_algorithm}

  def run_seed(self, method: str, seed: int) -> SeedResult:
    run_dir = os.path.join(self.output_dir, method, f"seed{seed}")
    _, _, accountant = record_level.run_record_level(
        self.process, self.federation.records, self._plan(seed, method), seed, run_dir,
        self.evaluate, self.eval_every, self.checkpoint_every, self.progress,
        hyperparameters=self.hyperparameters, **self.run_kwargs)
    rows = read_metrics(os.path.join(run_dir, "metrics.csv"))
    return SeedResult(rows[-1]["eval_accuracy"],
                      [[r["round"], r["eval_accuracy"]] for r in rows
                       if r["eval_accuracy"] is not None],
                      {"final_row": rows[-1], "accountant": accountant})

  def _plan(self, seed: int, method: str) -> RecordPlan:
    """The plan a run trains with; in release mode one whose ledger writes no columns."""
    plan = self.plans_by_seed[seed][method]
    return release_plan(plan) if self.release_only else plan

  def end_spec(self, method: str, results: list) -> dict:
    groups = {}
    if self.class_groups:
      groups = dict(group_summary([r.extras["final_row"] for r in results], self.group_names),
                    groups={g: [c for c, name in sorted(self.class_groups.items()) if name == g]
                            for g in self.group_names})
    audited = {}
    if self.audit is not None and self.audit.audits(method):
      audited = self.audit.run(
          self.model_fn, self.federation.records, self._plan(self.seeds[0], method),
          run_seed=self.seeds[0],
          output_dir=os.path.join(self.output_dir, method, f"seed{self.seeds[0]}-audit"),
          accuracy_without=results[0].final_accuracy, client_learning_rate=self.learning_rate,
          loss_fn=models.per_example_loss(self.federation.head),
          example_weight_fn=self.local_weight_fn, hyperparameters=self.hyperparameters,
          evaluate_fn=self.evaluate, eval_every=self.eval_every,
          checkpoint_every=self.checkpoint_every, progress=self.progress, **self.run_kwargs)
    # The last seed's plan, ledger and budgets (one draw unless drawn per seed).
    plan = self.plans_by_seed[self.seeds[-1]][method]
    if self.release_only:
      # The evaluations of the released models on held-out data (post-processing),
      # the groups' classes (--class_budgets) and the flags' part of the calibration.
      return {"method": method, "label": method,
              "calibration": release_calibration(plan.calibration),
              "history": results[0].history, **groups, **audited}
    accountant = results[-1].extras["accountant"]
    flat_budgets = np.concatenate(list(self.budgets_by_seed[self.seeds[-1]].values()))
    all_q = np.concatenate(list(plan.rates.values()))
    expected = np.mean([plan.rates[c].sum() for c in plan.rates])
    spent = accountant.spent() if accountant is not None else None
    # Budget usage (rPDP-FL §6.2 ledger, last seed): against the effective ε the
    # method calibrated to (ε_min, ε_mod; ε_ij for ours) and against each
    # record's own ε_ij (Minimum's unused budget, Dropout's dropped records at 0).
    # Not private (NOT_PRIVATE_FIELDS; under Type I the ledger also follows the
    # secret client sampling): release mode returned above without them.
    ledger = accountant.metrics() if accountant is not None else None
    usage = lambda name: None if ledger is None else ledger[name]  # noqa: E731
    return {
        "method": method, "label": method,
        "mean_expected_batch": float(expected), "records_q0": int(np.sum(all_q == 0)),
        "excluded_at_end": ledger["records_excluded"] if ledger is not None else 0,
        "mean_epsilon_spent": float(spent.mean()) if spent is not None else None,
        # max_budget_used: the vs-effective value, under its earlier name.
        "max_budget_used": usage("budget_used_max_vs_effective"),
        "max_budget_used_vs_effective": usage("budget_used_max_vs_effective"),
        "max_budget_used_vs_own": usage("budget_used_max_vs_own"),
        "mean_budget_used_vs_own": usage("budget_used_mean_vs_own"),
        "mean_budget": float(np.mean(flat_budgets)) if spent is not None else None,
        "calibration": plan.calibration, "history": results[0].history,
        "budget_histogram": budget_histogram(flat_budgets), **groups, **audited}


# Fixed, data-independent bin edges for the budget histogram: four per decade.
BUDGET_HISTOGRAM_EDGES = tuple(float(e) for e in np.round(np.logspace(-3, 3, 25), 6))
MIN_CELL_COUNT = 20


def budget_histogram(budgets: np.ndarray, min_cell_count: int = MIN_CELL_COUNT) -> dict:
  """The records' budgets as counts on fixed bins (issue 31 item 5): NOT private.

  Per-record budgets are personal (under ``by_class`` a record's budget is
  its label's), so ``summary.json`` gets no per-record values: only counts
  over fixed, data-independent log bins (:data:`BUDGET_HISTOGRAM_EDGES`;
  budgets outside them fall in ``below``/``above``), and every count below
  ``min_cell_count`` is withheld (``None``). That is still not differential
  privacy (issue 48 A): removing one record moves its bin's count by one,
  and a cell going from 20 to 19 turns withheld, which shows it as well. So
  a release (release mode) holds no histogram, and the other summaries list
  it under ``details.not_private``. The per-record plan (``record_plan.csv``)
  is a diagnostic (docs/privacy.md).
  """
  budgets = np.asarray(budgets, float).ravel()
  edges = np.asarray(BUDGET_HISTOGRAM_EDGES)
  finite = budgets[np.isfinite(budgets)]
  counts, _ = np.histogram(finite, bins=edges)
  def cell(n):
    return int(n) if n >= min_cell_count else None
  return {"edges": list(BUDGET_HISTOGRAM_EDGES), "counts": [cell(n) for n in counts],
          "below": cell(np.sum(finite < edges[0])), "above": cell(np.sum(finite > edges[-1])),
          "unbounded": cell(np.sum(~np.isfinite(budgets))),
          "min_cell_count": int(min_cell_count)}


# Row entries that are exact statistics of the records' budgets ε_ij, rates q_ij or
# ledger (issue 48 A): no DP analysis covers them, and removing one record changes
# them by an amount that reveals its budget (under by_class, its label). Release
# mode writes none; the other summaries label them (NOT_PRIVATE_NOTE).
NOT_PRIVATE_FIELDS = ("mean_expected_batch", "records_q0", "excluded_at_end",
                      "mean_epsilon_spent", "max_budget_used", "max_budget_used_vs_effective",
                      "max_budget_used_vs_own", "mean_budget_used_vs_own", "mean_budget",
                      "budget_histogram")
NOT_PRIVATE_NOTE = (
    "Not private: exact statistics of the records' budgets, rates and ledger (E[batch], "
    "records with q=0, excluded, ε spent, budget used, mean budget, the budget histogram, "
    "the calibration's fit and counts; under by_class, of the records' labels). No DP "
    "analysis covers them: do not publish them; --release_only leaves them out.")


def is_release(results: Sequence[Mapping]) -> bool:
  """Whether summary rows were made in release mode: none holds a not-private entry."""
  return not any(k in r for r in results for k in NOT_PRIVATE_FIELDS)


def release_calibration(calibration: Mapping[str, Any]) -> dict:
  """The part of a plan's calibration summary that a release may hold: what flags fix.

  ``method``; Dropout's ε_mod where it comes from the budget specification
  (not from the records' budgets); PrivacyFree's expected batch (a flag).
  The rest (the SCF fit and its R², records lowered, at q = 0 or dropped,
  ε_min, the unused budget, the record count, the wall time) is computed
  from the records' budgets.
  """
  out = {"method": calibration.get("method")}
  if "epsilon_mod" in calibration and \
      calibration.get("epsilon_mod_source") != DROPOUT_CUTOFF_FROM_RECORDS:
    out.update(epsilon_mod=calibration["epsilon_mod"],
               epsilon_mod_source=calibration["epsilon_mod_source"])
  if calibration.get("method") == "privacy_free" and "expected_batch" in calibration:
    out["expected_batch"] = calibration["expected_batch"]
  return out


class _ReleaseLedger(RecordBudgetAccountant):
  """The record ledger of a release: it charges and enforces every budget as before,
  but reports no metric columns. Its columns (records active and excluded, ε spent
  min/mean/max, budget used) are exact statistics of the records' budgets, so even
  under Type II, where they do not follow the sampling, a release writes none."""

  def metric_names(self, group_names: Sequence[str] = ()) -> list[str]:
    del group_names
    return []

  def metrics(self, group_names: Sequence[str] = (), evaluating: bool = True) -> dict:
    del group_names, evaluating
    return {}


@dataclasses.dataclass
class _ReleasePlan(RecordPlan):
  """A :class:`RecordPlan` whose ledger is a :class:`_ReleaseLedger`."""

  def new_accountant(self) -> Optional[RecordBudgetAccountant]:
    if self.budgets is None:
      return None
    return _ReleaseLedger(self.budgets, self.rates, self.params, own_budgets=self.own_budgets)


def release_plan(plan: RecordPlan) -> RecordPlan:
  """``plan`` (same rates, budgets, calibration) for a run in release mode: the round
  driver then writes no ledger column to ``metrics.csv`` (issue 48 A)."""
  return _ReleasePlan(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)})


RECORD_PLAN_FILE = "record_plan.csv"


def write_record_plan(plans: Mapping[str, "record_level.RecordPlan"], params: TwoStageParams,
                      output_dir: str, file_name: str = RECORD_PLAN_FILE) -> str:
  """Writes every record's plan, so an outside check can recompute its ε without the library.

  One row per (method, client, record): the record's own budget ε_ij, the
  budget the method calibrated it to (ε_min for Minimum, ε_mod for Dropout),
  its sampling rate q_ij, and the ε that Theorem 1 charges it after the run's T
  rounds (:func:`tff_idp.accounting.record.rdp_two_stage.epsilon`; 0 for q = 0).
  A header comment gives σ, τ, T, λ, δ and the threat model. PrivacyFree has no
  budget and is left out. The budgets are personal (under budgets by class,
  a record's budget is its label's): keep the file with the diagnostics, not
  the release.
  """
  path = os.path.join(output_dir, file_name)
  os.makedirs(output_dir, exist_ok=True)
  with open(path + ".tmp", "w") as f:
    f.write(f"# rPDP-FL record plan: sigma={params.noise_multiplier!r}, "
            f"local_steps={params.local_steps}, rounds={params.rounds}, "
            f"client_rate={params.client_rate!r}, delta={params.delta!r}, "
            f"threat_model={params.threat_model}; epsilon_charged = Theorem 1 at q\n")
    f.write("method,client_id,record,own_budget,effective_budget,q,epsilon_charged\n")
    for method, plan in plans.items():
      if plan.budgets is None:
        continue
      own = plan.own_budgets or plan.budgets
      for cid, rates in plan.rates.items():
        rates = np.asarray(rates, float)
        unique, inverse = np.unique(rates, return_inverse=True)
        charged = np.asarray(rdp_two_stage.epsilon(unique, params), float)[inverse]
        for j, (q, eps) in enumerate(zip(rates, charged)):
          f.write(f"{method},{cid},{j},{float(own[cid][j])!r},"
                  f"{float(plan.budgets[cid][j])!r},{float(q)!r},{float(eps)!r}\n")
  os.replace(path + ".tmp", path)
  return path


def write_summary(results: list[dict], num_seeds: int, output_dir: str,
                  config: Optional[dict] = None, privacy_warning: Optional[str] = None,
                  sections: Sequence[tuple[str, str]] = ()) -> str:
  """Writes ``summary.md`` (the table), ``summary.json`` (config + rows) and
  ``accuracy.png`` into ``output_dir``; returns the table.

  ``sections``: ``(title, text)`` pairs printed below the table where the
  text is not empty (a plug-in's table, e.g. the record-level audit's).

  Rows made outside release mode hold statistics of the records' budgets: a
  line under the table and ``details.not_private`` in ``summary.json`` say so
  (:data:`NOT_PRIVATE_FIELDS`). Rows made in release mode hold none, and the
  plot then has no budget histogram.
  """
  release = is_release(results)
  table = format_table(results, num_seeds)
  if config and all(k in config for k in ("rounds", "local_steps", "client_rate",
                                          "noise_multiplier", "clip_norm", "learning_rate",
                                          "delta", "threat_model")):
    table = training_line(config) + "\n\n" + table
  if not release:
    table += f"\n\n{NOT_PRIVATE_NOTE}"
  for title, text in sections:
    if text:
      table += f"\n\n{title}:\n\n{text}"
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, "summary.md"), "w") as f:
    f.write(table + "\n")
  not_private = {"fields": [*NOT_PRIVATE_FIELDS, "calibration"], "note": NOT_PRIVATE_NOTE}
  summary_lib.write_summary(output_dir, "rpdp", config or {}, results,
                            privacy_warning=privacy_warning,
                            details=None if release else {"not_private": not_private})
  plot(results, os.path.join(output_dir, "accuracy.png"))
  return table

