"""Centralized comparison of rPDP-FL §7.1: SCF vs BinarySearch vs Filter (Tables 2-3, Fig. 7).

One silo, every record with its own budget ε_i:

* **scf / binary_search / exact**: rPDP-SGD, i.e. DP-SGD whose mini-batches
  Poisson-sample record i at its own rate q_i (the expected batch is Σ q_i),
  with q_i from SCF (Alg. 2, re-checked exactly), the IDP-SGD BinarySearch
  baseline, or the exact inverse. Centralized DP-SGD is Lemma 4 without
  client sampling: ``TwoStageParams(σ, local_steps=steps, rounds=1,
  client_rate=1)``. All of them use the same σ and number of steps.
* **filter**: private full-batch GD with an individual Rényi filter
  (Feldman & Zrnic 2021, Alg. 3; :mod:`tff_idp.centralized.filter_gd`): every record
  takes part until its own RDP budget, derived from (ε_i, δ), is spent.

``--mode=compare`` prints a Table 2-style table (test accuracy, expected batch,
runtime per step, calibration runtime, unused budget) and Fig. 7's active
records of Filter; ``--mode=table3`` reproduces Table 3 (Group-3, Group-100,
Individual-1000 calibration runtimes and test accuracies of SCF vs
BinarySearch on a 1,000-record subset); ``--mode=both`` (default) does both:

  python -m experiments.centralized                     # both, embedded data
  python -m experiments.centralized --mode=compare --seeds=0,1,2
  python -m experiments.centralized --mode=table3 --table3_trials=5
  python -m experiments.centralized --dataset=fmnist --data_dir=~/.tff  # if present

The functions import TensorFlow lazily, so checking the flags (``main``
called directly, as the tests do) needs no TensorFlow. The default dataset
is embedded: the pooled train records of Synthetic IID
users (:mod:`datasets.synthetic`) with multinomial logistic regression.
``--dataset=fmnist`` pools the datasets/ FMNIST split (when its source files
are present) and uses the paper's two-layer CNN.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import sys
from typing import Callable

from absl import app
from absl import flags
from absl import logging as absl_logging
import numpy as np

from experiments import privacy_flags
from tff_idp import cli
from tff_idp.engine import summary as summary_lib
from tff_idp.centralized import filter_gd  # its TensorFlow parts import TF lazily
from tff_idp import preferences
from tff_idp.accounting.record import calibration as record_calibration
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL
from tff_idp.engine.privacy_randomness import PrivacyRandomness

DP_SGD_METHODS = ("scf", "binary_search", "exact")
METHODS = DP_SGD_METHODS + ("filter",)
MODES = ("compare", "table3", "both")
METHOD_NAMES = {"scf": "SCF", "binary_search": "BinarySearch", "exact": "Exact",
                "filter": "Filter"}

_MODE = flags.DEFINE_enum("mode", "both", list(MODES),
                          "compare: Table 2 + Fig. 7; table3: Table 3; both.")
_METHODS = flags.DEFINE_list("methods", ["scf", "binary_search", "filter"],
                             f"compare mode: methods among {', '.join(METHODS)}.")
_LEVELS = flags.DEFINE_list("levels", ["2.0", "4.7", "11.8"],
                            "ThreeLevels ε of the compare mode (Table 2: ≈2.0/4.7/11.8).")
_LEVEL_RATIOS = flags.DEFINE_list("level_ratios", ["0.7", "0.2", "0.1"],
                                  "Share of records at each level.")
_NOISE = flags.DEFINE_float("noise_multiplier", 1.0, "σ of rPDP-SGD (all DP-SGD methods).")
_STEPS = flags.DEFINE_integer("steps", 1000, "DP-SGD steps (the accounting's τ).")
_CLIP = flags.DEFINE_float("clip_norm", 1.0, "L: per-example clipping norm (all methods).")
_LR = flags.DEFINE_float("learning_rate", 2.0, "DP-SGD learning rate.")
_DELTA = flags.DEFINE_float("delta", 1e-5, "Target δ of every record.")
_FILTER_NOISE = flags.DEFINE_float(
    "filter_noise_multiplier", 0.0,
    "σ of Filter; 0 = the smallest σ with which the largest finite budget affords "
    "--filter_steps worst-case steps (smaller budgets are filtered earlier).")
_FILTER_STEPS = flags.DEFINE_integer("filter_steps", 0, "Filter's GD steps (0 = --steps).")
_FILTER_LR = flags.DEFINE_float("filter_learning_rate", 16.0,
                                "Filter's learning rate (its update is divided by n).")
_FILTER_ALPHA = flags.DEFINE_float(
    "filter_alpha", 0.0, "Filter's RDP order: 0 = per record, the order that affords the "
    "most worst-case steps for its ε; > 1 = one shared order.")
_FILTER_CHECK = flags.DEFINE_enum(
    "filter_check", "worst_case", list(filter_gd.CHECKS),
    "worst_case: drop a record that cannot afford one more worst-case step (one pass); "
    "actual: Alg. 3 as written, checks the step's actual norm (two passes).")
_DATASET = flags.DEFINE_enum("dataset", "synthetic", ["synthetic", "fmnist"],
                             "synthetic: embedded pooled Synthetic IID; fmnist: datasets/ split.")
_TRAIN = flags.DEFINE_integer("train_examples", 4000, "Records in the silo (0 = all).")
_TEST = flags.DEFINE_integer("test_examples", 2000, "Test examples (0 = all).")
_DATA_DIR = flags.DEFINE_string("data_dir", None, "fmnist: source data directory.")
_SPLIT_DIR = flags.DEFINE_string("split_dir", None, "fmnist: built split directory.")
_DATA_SEED = flags.DEFINE_integer("data_seed", 0, "Seed of the data (and of subsets).")
_BUDGET_SEED = flags.DEFINE_integer("budget_seed", 0, "Seed of the budget assignment.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1"], "Training seeds (results are averaged).")
_EVAL_EVERY = flags.DEFINE_integer("eval_every", 100, "Evaluate every k steps.")
_T3_EXAMPLES = flags.DEFINE_integer("table3_examples", 1000, "table3: records in the subset.")
_T3_TRIALS = flags.DEFINE_integer("table3_trials", 2,
                                  "table3: trials (budget draw + training seed) averaged.")
_T3_NOISE = flags.DEFINE_float("table3_noise_multiplier", 1.0, "table3: σ.")
_T3_STEPS = flags.DEFINE_integer("table3_steps", 300, "table3: DP-SGD steps.")
_T3_LR = flags.DEFINE_float("table3_learning_rate", 1.0, "table3: learning rate.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "runs/centralized", "Where results go.")
privacy_flags.define(release_only=False)


@dataclasses.dataclass
class Silo:
  """One silo's records, a test set and the model that fits them."""
  x: np.ndarray
  y: np.ndarray
  test_x: np.ndarray
  test_y: np.ndarray
  keras_builder: Callable[[], "tf.keras.Model"]  # noqa: F821
  name: str

  def subset(self, n: int, seed: int) -> "Silo":
    if n > len(self.y):
      raise ValueError(f"a subset of {n} records needs at least that many; the silo has "
                       f"{len(self.y)} (raise --train_examples).")
    rows = np.sort(np.random.default_rng(seed).choice(len(self.y), n, replace=False))
    return dataclasses.replace(self, x=self.x[rows], y=self.y[rows],
                               name=f"{self.name}, {n}-record subset")


def synthetic_silo(train_examples: int, test_examples: int, seed: int) -> Silo:
  """Pooled train records of Synthetic IID users; their test records are the test set."""
  from datasets import synthetic  # pylint: disable=g-import-not-at-top
  pooled = synthetic.pooled_arrays(train_examples, test_examples, seed)
  x, y, tx, ty, config = (pooled[k] for k in ("x", "y", "test_x", "test_y", "config"))
  nf, nc = config.num_features, config.num_classes

  def builder():
    from tff_idp import models  # pylint: disable=g-import-not-at-top
    return models.build_logistic_regression(nf, nc, seed=0)

  return Silo(x, y, tx, ty, builder, f"Synthetic IID (pooled, {len(y)} records)")


def fmnist_silo(train_examples: int, test_examples: int, seed: int, data_dir,
                split_dir) -> Silo:
  """The datasets/ FMNIST i.i.d. split, every writer pooled; the paper's two-layer CNN.

  Built from local source files when present (never downloaded); a random
  ``train_examples`` of the pooled records form the silo.
  """
  from datasets import loader  # pylint: disable=g-import-not-at-top
  from datasets import resolution  # pylint: disable=g-import-not-at-top
  from datasets import specs  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  info = specs.info("fmnist")
  # The rPDP-FL CNN expects [0, 1] inputs: rescale the stored pixels here.
  train, test = resolution.load_federated("fmnist", "iid", num_clients=None, seed=seed,
                                      data_dir=data_dir, split_dir=split_dir,
                                      rescale=True, progress=False)
  parts = [loader.to_arrays(train.create_tf_dataset_for_client(cid)) for cid in train.client_ids]
  x = np.concatenate([a for a, _ in parts])
  y = np.concatenate([b for _, b in parts])
  order = np.random.default_rng(seed).permutation(len(y))
  if train_examples:
    order = order[:train_examples]
  x, y = x[order], y[order]
  tx, ty = loader.to_arrays(test)
  if test_examples:
    tx, ty = tx[:test_examples], ty[:test_examples]
  shape = tuple(info.input_shape)
  return Silo(x, y, tx, ty,
              lambda: models.build_rpdp_mnist_cnn(shape, info.num_classes, seed=0),
              f"FMNIST (i.i.d. split, writers pooled, {len(y)} records)")


def accuracy(keras_model, silo: Silo, batch_size: int = 4096) -> float:
  preds = np.concatenate([np.argmax(keras_model(silo.test_x[i:i + batch_size],
                                                training=False).numpy(), -1)
                          for i in range(0, len(silo.test_y), batch_size)])
  return float(np.mean(preds == silo.test_y))


def train_dp_sgd(silo: Silo, q: np.ndarray, noise_multiplier: float, clip_norm: float,
                 learning_rate: float, steps: int, randomness: PrivacyRandomness,
                 eval_every: int) -> dict:
  """rPDP-SGD on one silo with per-record rates q (:mod:`tff_idp.centralized.trainer`).

  Evaluation every ``eval_every`` steps; the reported s/step is warm (the
  tracing is done by a call that takes no step).
  """
  from tff_idp.centralized import trainer as centralized  # pylint: disable=g-import-not-at-top
  run = centralized.train_record_dp_sgd(
      silo.keras_builder, silo.x, silo.y, q, noise_multiplier, clip_norm, learning_rate,
      steps, randomness, lambda m: accuracy(m, silo), eval_every)
  history = [[step, m["accuracy"]] for step, m in run.history]
  return {"accuracy": history[-1][1], "history": history,
          "seconds_per_step": run.seconds_per_step, "mean_batch": run.mean_batch}


def calibrate(budgets: np.ndarray, params: TwoStageParams, method: str):
  return record_calibration.calibrate_record_rates(budgets, params, method=method)


def filter_noise(budgets: np.ndarray, steps: int, delta: float, alpha) -> float:
  """Default Filter σ: the largest finite budget affords exactly ``steps`` worst-case steps."""
  finite = budgets[np.isfinite(budgets)]
  if finite.size == 0:
    raise ValueError("Filter needs at least one finite budget to choose its σ.")
  return filter_gd.noise_for_steps(float(finite.max()), steps, delta, alpha)


def per_level(budgets: np.ndarray, values: np.ndarray, limit: int = 64):
  """{ε: value} for the distinct budgets (None if there are more than ``limit``)."""
  levels = np.unique(budgets)
  if levels.size > limit:
    return None
  return {str(float(e)): float(np.asarray(values)[budgets == e][0]) for e in levels}


def run_compare(silo: Silo, budgets: np.ndarray, methods, seeds, cfg: dict) -> dict:
  """Table 2 and Fig. 7: every method × seed on the whole silo."""
  rows, curves = [], {}
  params = TwoStageParams(cfg["noise_multiplier"], cfg["steps"], 1, 1.0, cfg["delta"])
  finite = np.isfinite(budgets)
  for method in methods:
    if method == "filter":
      steps = cfg["filter_steps"]
      sigma = cfg["filter_noise_multiplier"] or filter_noise(budgets, steps, cfg["delta"],
                                                             cfg["filter_alpha"])
      accs, spf, spf_tf, run = [], [], [], None
      for seed in seeds:
        keras_model = silo.keras_builder()
        randomness = PrivacyRandomness.for_run(seed, f"centralized/{method}",
                                               cfg["insecure_reproducible_noise"])
        run_ = filter_gd.run_private_gd_with_filter(
            keras_model, silo.x, silo.y, budgets, cfg["delta"], sigma, cfg["clip_norm"],
            cfg["filter_learning_rate"], steps, seed=randomness.aggregator_noise_seed(),
            alpha=cfg["filter_alpha"],
            check=cfg["filter_check"], evaluate=lambda m=keras_model: accuracy(m, silo),
            eval_every=cfg["eval_every"])
        accs.append(run_.history[-1][1])
        spf.append(run_.seconds_per_step())
        spf_tf.append(run_.seconds_per_step(tf_only=True))
        run = run if run is not None else run_
      filt = run.filter
      spent = filt.epsilon_spent()
      unused = 1.0 - spent[finite] / budgets[finite]
      curves[method] = run.history
      rows.append({
          "method": method, "batch": f"{len(silo.y)} (full)",
          "mean_batch": float(np.mean(run.active)),
          "accuracies": accs, "mean_accuracy": float(np.mean(accs)),
          "std_accuracy": summary_lib.sample_sd(accs),
          "seconds_per_step": float(np.mean(spf)), "tf_seconds_per_step": float(np.mean(spf_tf)),
          "calibration_seconds": None, "noise_multiplier": sigma, "steps": steps,
          "mean_unused_budget": float(unused.mean()) if unused.size else 0.0,
          "max_spent_over_budget": float(np.max(spent[finite] / budgets[finite]))
          if finite.any() else 0.0,
          "records_never_trained": int(np.count_nonzero(filt.steps_taken == 0)),
          "active": run.active.tolist(),
          "first_filtered": {str(k): v for k, v in run.first_filtered.items()},
          "orders": per_level(filt.epsilons, filt.alpha),
          "worst_case_steps": per_level(filt.epsilons, filter_gd.worst_case_steps(
              filt.epsilons, cfg["delta"], sigma, cfg["filter_alpha"]))})
      continue
    rates = calibrate(budgets, params, method)
    accs, sps, mb, history = [], [], [], None
    for seed in seeds:
      randomness = PrivacyRandomness.for_run(seed, f"centralized/{method}",
                                             cfg["insecure_reproducible_noise"])
      out = train_dp_sgd(silo, rates.q, cfg["noise_multiplier"], cfg["clip_norm"],
                         cfg["learning_rate"], cfg["steps"], randomness, cfg["eval_every"])
      accs.append(out["accuracy"])
      sps.append(out["seconds_per_step"])
      mb.append(out["mean_batch"])
      history = history or out["history"]
    curves[method] = history
    summary = rates.summary()
    rows.append({
        "method": method, "batch": f"{rates.q.sum():.1f} (expected)",
        "mean_batch": float(np.mean(mb)), "accuracies": accs,
        "mean_accuracy": float(np.mean(accs)), "std_accuracy": summary_lib.sample_sd(accs),
        "seconds_per_step": float(np.mean(sps)), "tf_seconds_per_step": float(np.mean(sps)),
        "calibration_seconds": rates.seconds, "noise_multiplier": cfg["noise_multiplier"],
        "steps": cfg["steps"], "mean_unused_budget": summary["unused_budget"]["mean"],
        "max_spent_over_budget": float(np.max(rates.epsilon[finite] / budgets[finite]))
        if finite.any() else 0.0,
        "records_never_trained": rates.excluded, "calibration": summary,
        "rates": per_level(budgets, rates.q)})
  return {"rows": rows, "curves": curves}


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


def run_table3(silo: Silo, methods, cfg: dict) -> list[dict]:
  """Table 3: calibration runtime and test accuracy per scenario and method."""
  sub = silo.subset(cfg["table3_examples"], cfg["data_seed"])
  params = TwoStageParams(cfg["table3_noise_multiplier"], cfg["table3_steps"], 1, 1.0,
                          cfg["delta"])
  acc = collections.defaultdict(list)
  secs = collections.defaultdict(list)
  agree = collections.defaultdict(list)
  extra = {}
  for trial in range(cfg["table3_trials"]):
    scenarios = table3_scenarios(len(sub.y), cfg["budget_seed"] + trial)
    for name, budgets in scenarios.items():
      qs = {}
      for method in methods:
        rates = calibrate(budgets, params, method)
        qs[method] = rates.q
        secs[name, method].append(rates.seconds)
        randomness = PrivacyRandomness.for_run(
            trial, f"centralized/table3/{name}/{method}", cfg["insecure_reproducible_noise"])
        out = train_dp_sgd(sub, rates.q, params.noise_multiplier, cfg["clip_norm"],
                           cfg["table3_learning_rate"], params.local_steps, randomness, 0)
        acc[name, method].append(out["accuracy"])
        extra[name, method] = {
            "distinct_budgets": int(np.unique(budgets).size),
            "expected_batch": float(rates.q.sum()), "excluded_q0": rates.excluded,
            "lowered_by_exact_check": rates.lowered,
            "mean_unused_budget": rates.unused_budget()["mean"]}
      if "scf" in qs and "binary_search" in qs:
        agree[name].append(float(np.max(np.abs(qs["scf"] - qs["binary_search"]))))
  rows = []
  for (name, method), values in acc.items():
    rows.append({"scenario": name, "method": method, "accuracies": values,
                 "mean_accuracy": float(np.mean(values)), "std_accuracy": summary_lib.sample_sd(values),
                 "calibration_seconds": secs[name, method],
                 "mean_calibration_seconds": float(np.mean(secs[name, method])),
                 "max_abs_q_difference_scf_vs_binary_search":
                     float(np.max(agree[name])) if agree[name] else None,
                 **extra[name, method]})
  return rows


def format_compare(rows: list[dict], num_seeds: int) -> str:
  lines = [f"| method | batch size | test acc (mean ± sd, {num_seeds} seed(s)) | s/step "
           "(TF part) | calibration (s) | σ | steps | mean unused budget | "
           "max ε spent/ε | records never trained |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    cal = "—" if r["calibration_seconds"] is None else f"{r['calibration_seconds']:.3f}"
    sps = f"{r['seconds_per_step'] * 1e3:.2f} ms"
    if r["method"] == "filter":
      sps += f" ({r['tf_seconds_per_step'] * 1e3:.2f} ms)"
    lines.append(
        f"| {METHOD_NAMES[r['method']]} | {r['batch']} | {100 * r['mean_accuracy']:.2f} ± "
        f"{100 * r['std_accuracy']:.2f} | {sps} | {cal} | {r['noise_multiplier']:.3g} | "
        f"{r['steps']} | {100 * r['mean_unused_budget']:.2f}% | "
        f"{r['max_spent_over_budget']:.4f} | {r['records_never_trained']} |")
  return "\n".join(lines)


def format_active(row: dict, budgets: np.ndarray, points: int = 8) -> str:
  """Fig. 7 as a table: active records at a few steps, and when each level starts to drop."""
  active = np.asarray(row["active"])
  steps = np.unique(np.linspace(1, active.size, points).round().astype(int))
  lines = ["| step | " + " | ".join(str(s) for s in steps) + " |",
           "|---" * (steps.size + 1) + "|",
           "| active records | " + " | ".join(str(active[s - 1]) for s in steps) + " |"]
  if row["first_filtered"]:
    lines.append("")
    lines.append("| ε level | records | α | worst-case steps | first filtered at step |")
    lines.append("|---|---|---|---|---|")
    for e, first in row["first_filtered"].items():
      count = int(np.count_nonzero(budgets == float(e)))
      alpha = (row["orders"] or {}).get(e)
      wc = row["worst_case_steps"].get(e)
      lines.append(f"| {float(e):g} | {count} | {alpha:.2f} | {wc:g} | "
                   f"{'never' if first is None else first} |")
  return "\n".join(lines)


def format_table3(rows: list[dict], trials: int) -> str:
  lines = [f"| privacy setup | method | distinct ε | E[batch] | records at q=0 | test acc "
           f"(mean ± sd, {trials} trial(s)) | calibration runtime (s) | SCF rates lowered "
           "by exact check | max |q_SCF − q_BS| |",
           "|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    diff = r["max_abs_q_difference_scf_vs_binary_search"]
    lines.append(
        f"| {r['scenario']} | {METHOD_NAMES[r['method']]} | {r['distinct_budgets']} | "
        f"{r['expected_batch']:.1f} | {r['excluded_q0']} | {100 * r['mean_accuracy']:.2f} ± "
        f"{100 * r['std_accuracy']:.2f} | {r['mean_calibration_seconds']:.3f} | "
        f"{r['lowered_by_exact_check'] if r['method'] == 'scf' else '—'} | "
        f"{'—' if diff is None else f'{diff:.2e}'} |")
  return "\n".join(lines)


def plot(compare: dict | None, table3: list | None, out: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  panels = (2 if compare else 0) + (1 if table3 else 0)
  fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2), squeeze=False)
  axes = list(axes[0])
  if compare:
    ax = axes.pop(0)
    styles = {"scf": "-", "binary_search": "--", "exact": ":", "filter": "-"}
    for method, history in compare["curves"].items():  # SCF and BinarySearch overlap
      h = np.asarray(history, dtype=float)
      ax.plot(h[:, 0], h[:, 1], styles[method], marker=".", label=METHOD_NAMES[method])
    ax.set_xlabel("step")
    ax.set_ylabel("test accuracy (first seed)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax = axes.pop(0)
    filt = [r for r in compare["rows"] if r["method"] == "filter"]
    if filt:
      active = np.asarray(filt[0]["active"])
      ax.plot(np.arange(1, active.size + 1), active, color="C0")
      for first in filt[0]["first_filtered"].values():
        if first is not None:
          ax.plot([first], [active[first - 1]], "o", color="red")
      ax.set_xlabel("step")
      ax.set_ylim(0, active.max() * 1.05)
      ax.set_ylabel("active records")
      ax.set_title("Filter: active records (Fig. 7)")
      ax.grid(alpha=0.3)
    else:
      ax.set_axis_off()
  if table3:
    ax = axes.pop(0)
    scenarios = list(dict.fromkeys(r["scenario"] for r in table3))
    methods = list(dict.fromkeys(r["method"] for r in table3))
    width = 0.8 / len(methods)
    for k, method in enumerate(methods):
      vals = [next(r["mean_calibration_seconds"] for r in table3
                   if r["scenario"] == s and r["method"] == method) for s in scenarios]
      ax.bar(np.arange(len(scenarios)) + k * width, vals, width, label=METHOD_NAMES[method])
    ax.set_xticks(np.arange(len(scenarios)) + 0.4 - width / 2)
    ax.set_xticklabels(scenarios)
    ax.set_yscale("log")
    ax.set_ylabel("calibration runtime (s)")
    ax.set_title("Table 3")
    ax.legend()
  fig.tight_layout()
  fig.savefig(out, dpi=120)
  plt.close(fig)


def _floats(values, name: str) -> tuple:
  try:
    return tuple(float(v) for v in values)
  except ValueError as e:
    raise ValueError(f"--{name} must be numbers: {e}") from None


def parse_config() -> dict:
  """All flags, checked; raises ValueError with advice."""
  methods = list(_METHODS.value)
  unknown = sorted(set(methods) - set(METHODS))
  if unknown or not methods:
    raise ValueError(f"--methods has {unknown or 'nothing'}; choose from {', '.join(METHODS)}.")
  seeds = [int(s) for s in _SEEDS.value]
  if not seeds:
    raise ValueError("--seeds is empty; give at least one seed.")
  for name, value in (("steps", _STEPS.value), ("table3_steps", _T3_STEPS.value),
                      ("table3_trials", _T3_TRIALS.value),
                      ("table3_examples", _T3_EXAMPLES.value)):
    if value < 1:
      raise ValueError(f"--{name}={value} must be >= 1.")
  for name, value in (("train_examples", _TRAIN.value), ("test_examples", _TEST.value),
                      ("filter_steps", _FILTER_STEPS.value), ("eval_every", _EVAL_EVERY.value)):
    if value < 0:
      raise ValueError(f"--{name}={value} must be >= 0.")
  if not _CLIP.value > 0 or math.isinf(_CLIP.value):
    raise ValueError(f"--clip_norm={_CLIP.value} must be a finite number > 0.")
  for name, value in (("learning_rate", _LR.value), ("filter_learning_rate", _FILTER_LR.value),
                      ("table3_learning_rate", _T3_LR.value)):
    if not value > 0 or math.isinf(value):
      raise ValueError(f"--{name}={value} must be a finite number > 0.")
  if _FILTER_NOISE.value < 0 or math.isinf(_FILTER_NOISE.value):
    raise ValueError(f"--filter_noise_multiplier={_FILTER_NOISE.value} must be > 0 "
                     "(or 0 to choose it from the budgets).")
  if _FILTER_ALPHA.value != 0 and not _FILTER_ALPHA.value > 1:
    raise ValueError(f"--filter_alpha={_FILTER_ALPHA.value} must be > 1 (or 0 for "
                     "per-record orders).")
  levels = _floats(_LEVELS.value, "levels")
  ratios = _floats(_LEVEL_RATIOS.value, "level_ratios")
  distribution = preferences.ThreeLevels(levels, ratios)  # checks ε > 0, ratios sum to 1
  # TwoStageParams checks σ, δ and the steps with advice.
  TwoStageParams(_NOISE.value, _STEPS.value, 1, 1.0, _DELTA.value)
  TwoStageParams(_T3_NOISE.value, _T3_STEPS.value, 1, 1.0, _DELTA.value)
  return {
      "mode": _MODE.value, "methods": methods, "seeds": seeds, "distribution": distribution,
      "noise_multiplier": _NOISE.value, "steps": _STEPS.value, "clip_norm": _CLIP.value,
      "learning_rate": _LR.value, "delta": _DELTA.value,
      "filter_noise_multiplier": _FILTER_NOISE.value,
      "filter_steps": _FILTER_STEPS.value or _STEPS.value,
      "filter_learning_rate": _FILTER_LR.value,
      "filter_alpha": _FILTER_ALPHA.value or None, "filter_check": _FILTER_CHECK.value,
      "eval_every": _EVAL_EVERY.value, "data_seed": _DATA_SEED.value,
      "budget_seed": _BUDGET_SEED.value, "table3_examples": _T3_EXAMPLES.value,
      "table3_trials": _T3_TRIALS.value, "table3_noise_multiplier": _T3_NOISE.value,
      "table3_steps": _T3_STEPS.value, "table3_learning_rate": _T3_LR.value,
      "insecure_reproducible_noise": privacy_flags.insecure(),
  }


@cli.entry
def main(argv):
  del argv
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  absl_logging.set_verbosity(absl_logging.WARNING)
  try:
    cfg = parse_config()
    if _DATASET.value == "synthetic":
      silo = synthetic_silo(_TRAIN.value, _TEST.value, _DATA_SEED.value)
    else:
      silo = fmnist_silo(_TRAIN.value, _TEST.value, _DATA_SEED.value, _DATA_DIR.value,
                         _SPLIT_DIR.value)
    if cfg["mode"] != "compare" and cfg["table3_examples"] > len(silo.y):
      raise ValueError(f"--table3_examples={cfg['table3_examples']} exceeds the silo's "
                       f"{len(silo.y)} records (raise --train_examples).")
    if (cfg["mode"] != "compare"
        and not {"scf", "binary_search", "exact"} & set(cfg["methods"])):
      raise ValueError("--mode=table3 compares DP-SGD rate methods; put scf and/or "
                       "binary_search in --methods.")
  except (ValueError, FileNotFoundError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  privacy_flags.announce()
  warning = NOT_PRIVATE_LABEL if cfg["insecure_reproducible_noise"] else None
  out_dir = cli.prepare_output_dir(_OUTPUT_DIR.value)
  budgets = preferences.assign_record_budgets(cfg["distribution"], [len(silo.y)],
                                              cfg["budget_seed"])["0"]
  print(f"silo: {silo.name}, {len(silo.test_y)} test; δ={cfg['delta']:g}, "
        f"L={cfg['clip_norm']:g}")
  compare, table3, text = None, None, []
  if cfg["mode"] in ("compare", "both"):
    levels = ", ".join(f"ε={e:g} ({100 * r:g}%)" for e, r in
                       zip(cfg["distribution"].epsilons, cfg["distribution"].ratios))
    print(f"compare: ThreeLevels {levels}; DP-SGD σ={cfg['noise_multiplier']:g}, "
          f"{cfg['steps']} steps, lr={cfg['learning_rate']:g}; seeds {cfg['seeds']}")
    compare = run_compare(silo, budgets, cfg["methods"], cfg["seeds"], cfg)
    text.append("## Table 2: SCF vs BinarySearch vs Filter (centralized)\n\n"
                + format_compare(compare["rows"], len(cfg["seeds"])))
    for row in compare["rows"]:
      if row["method"] == "filter":
        text.append("## Fig. 7: Filter's active records\n\n" + format_active(row, budgets))
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
  config = {h.name: h.value for h in globals().values() if isinstance(h, flags.FlagHolder)}
  # results: the comparison rows, then Table 3's (scenario · method) rows.
  results = ([dict(r, label=r["method"], table="compare") for r in compare.get("rows", [])]
             + [dict(r, label=f"{r['scenario']} · {r['method']}", table="table3")
                for r in (table3 or [])])
  summary_lib.write_summary(
      out_dir, "centralized", config, results, privacy_warning=warning,
      details={"silo": silo.name, "records": len(silo.y),
               "budget_counts": {str(e): int(c) for e, c in
                                 zip(*np.unique(budgets, return_counts=True))},
               "curves": compare.get("curves", {})})
  plot(compare, table3, os.path.join(out_dir, "centralized.png"))
  print()
  print(body)
  print(f"\nsummary.md/json and centralized.png in {out_dir}")
  return 0


if __name__ == "__main__":
  # Keras must be imported before absl parses the flags: imported inside
  # main(), tf.keras.Sequential fails ("Output tensors of a Sequential model
  # must be the output of a TensorFlow Layer"). Flag checks in tests call
  # main() directly and never reach TensorFlow.
  import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  app.run(main, flags_parser=cli.parse_flags)
