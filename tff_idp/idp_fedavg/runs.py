"""IDP-FedAvg runs end to end: run specs × seeds through one round loop, then a table.

:func:`run_all` calibrates each run (``tff_idp.idp_fedavg.plan``;
SAMPLE, IDP-FedAvg Alg. 1, or SCALE), builds its TFF process (Alg. 2 with
adaptive clipping, :func:`tff_idp.idp_fedavg.process.build_idp_fedavg_process`),
drives it with checkpoints and metrics (:class:`tff_idp.engine.driver.RoundDriver`)
and writes ``summary.json``, ``summary.md`` and ``accuracy.png`` into the
output directory; :func:`validate` checks every run spec first and
:func:`format_table` prints the comparison with paired statistics.
``experiments.idp_fedavg`` and the paper presets are its command lines and
:func:`tff_idp.runners.run_idp_fedavg` its one-call Python entry.

Privacy randomness (aggregator noise, client sampling) is secret: each
(run spec, seed) draws its own from OS entropy (``tff_idp.engine.privacy_randomness``);
the seeds control only model init, data order and the group assignment.
``insecure_reproducible_noise`` derives it from the seed instead, for
debugging, and labels every output NOT PRIVATE.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import math
import os
import zlib
from typing import Any, Callable, Optional, Sequence

import numpy as np
from scipy import stats
import tensorflow_federated as tff

from tff_idp.idp_fedavg import aggregators
from tff_idp.idp_fedavg.config import TrainingConfig
from tff_idp.idp_fedavg.config import check_settings
from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.engine.sampling import PoissonClientSampler
from tff_idp.engine import evaluation
from tff_idp.engine import fingerprint
from tff_idp.idp_fedavg import in_process
from tff_idp.idp_fedavg import vectorized
from tff_idp.engine import cohort_arrays
from tff_idp.engine import paired_stats
from tff_idp.idp_fedavg import plan as privacy_plan
from tff_idp.engine.driver import RoundDriver
from tff_idp.engine.plugins import RunPlugin
from tff_idp.engine.run_template import SeedResult
from tff_idp.engine.run_template import run_grid
from tff_idp.engine import report
from tff_idp.engine import summary as summary_lib
from tff_idp.engine.metrics import read_metrics
from tff_idp.idp_fedavg.process import build_idp_fedavg_driver_process
from tff_idp.idp_fedavg.process import scaled_client_data


def build_optimizer(name: str, lr: float) -> tff.learning.optimizers.Optimizer:
  if name == "sgd":
    return tff.learning.optimizers.build_sgdm(learning_rate=lr)
  if name == "adam":
    return tff.learning.optimizers.build_adam(learning_rate=lr)
  raise ValueError(f"optimizer {name!r} must be sgd or adam.")


# Larger than any paper client (SVHN's hold 833-834 examples), so every
# client's data is fully shuffled each epoch.
CLIENT_SHUFFLE_BUFFER = 1024


def client_input_fn(train_data: tff.simulation.datasets.ClientData,
                    config: TrainingConfig, seed: int,
                    clip_scales: Optional[dict] = None) -> Callable[[str, int], Any]:
  """Local data for one client in one round: shuffled (seeded), epochs, batches."""

  def make(client_id: str, round_num: int):
    shuffle_seed = zlib.crc32(f"{seed}/{round_num}/{client_id}".encode())
    ds = (train_data.create_tf_dataset_for_client(client_id)
          .shuffle(CLIENT_SHUFFLE_BUFFER, seed=shuffle_seed, reshuffle_each_iteration=True)
          .repeat(config.local_epochs).batch(config.batch_size))
    if clip_scales is not None:
      return scaled_client_data(ds, clip_scales[client_id])
    return ds

  return make


def client_arrays_fn(train_data: tff.simulation.datasets.ClientData,
                     config: TrainingConfig, seed: int,
                     clip_scales: Optional[dict] = None) -> Callable[[str, int], Any]:
  """:func:`client_input_fn`'s data as arrays, for the vectorized client execution (issue 35).

  Same examples, same shuffle seed, buffer, epochs and batch size, so every
  client trains on the same batches in the same order
  (:class:`tff_idp.engine.cohort_arrays.ClientArrays`); the examples are read
  from ``train_data`` once per client (:class:`~tff_idp.engine.cohort_arrays.ExampleCache`).
  """
  cache = cohort_arrays.ExampleCache(train_data)

  def make(client_id: str, round_num: int):
    arrays = cohort_arrays.ClientArrays(
        cache(client_id), shuffle_seed=zlib.crc32(f"{seed}/{round_num}/{client_id}".encode()),
        epochs=config.local_epochs, batch_size=config.batch_size,
        shuffle_buffer=CLIENT_SHUFFLE_BUFFER)
    if clip_scales is not None:
      return collections.OrderedDict(data=arrays, clip_scale=clip_scales[client_id])
    return arrays

  make.padding = lambda: cohort_arrays.ClientArrays(
      cache.empty(), shuffle_seed=None, epochs=config.local_epochs,
      batch_size=config.batch_size)
  return make


keras_evaluator = evaluation.keras_evaluator  # the library's evaluator, under its old name


def validate(config: TrainingConfig, num_clients: int,
             plugins: Sequence[RunPlugin] = ()) -> None:
  """Checks every run spec and calibration before any training starts.

  Raises ValueError with a message saying what to change, so a bad flag fails
  in seconds rather than after the first runs have trained.
  """
  check_settings(config)
  for text in config.runs:
    spec = privacy_plan.parse_run_spec(text, config.ratios, len(config.budgets))
    plan = privacy_plan.make_privacy_plan(
        spec, config.budgets, num_clients, config.clients_per_round, config.rounds,
        config.delta, config.accountant, config.seeds[0], config.allow_overrun,
        config.max_rate)
    # Adaptive clipping needs σ < 2σ_b (raises with advice otherwise).
    noise_split(config, plan, spec.name)
    for plugin in plugins:
      plugin.check(plan)  # e.g. the audit's canary plan (raises with advice)


def resolved_client_execution(config: TrainingConfig,
                              num_parameters: Optional[int] = None,
                              vectorizable: bool = False) -> str:
  """``config.client_execution`` with ``auto`` resolved (see ``TrainingConfig``)."""
  return in_process.resolve_client_execution(config.client_execution, num_parameters,
                                             canaries=config.audit_canaries > 0,
                                             vectorizable=vectorizable)


def _clip_kwargs(config: TrainingConfig) -> dict:
  """Adaptive-clipping settings of ``config`` for the aggregator (unset: its defaults)."""
  return {} if config.initial_clip is None else {"initial_clip": float(config.initial_clip)}


def clipped_count_stddev(config: TrainingConfig, plan: privacy_plan.PrivacyPlan) -> float:
  """σ_b of one run: ``config.clipped_count_stddev``, or by default 0.05·c, or σ.

  c is the run's expected clients per round (``plan.expected_clients_per_round``),
  the normaliser of the adaptive clip's count (Andrew et al. 2021 use σ_b = c/20).
  Adaptive clipping needs σ < 2σ_b, so where 0.05·c <= σ/2 (long runs, small
  cohorts: issue 33 found ``--rounds=200`` refused for 100-0-0) the default is
  σ_b = σ instead: the count bit then takes a quarter of the noise budget
  (z_Δ = σ/√(3/4) ≈ 1.155σ), and the default is feasible whenever the
  calibration is. Settings where 0.05·c works are unchanged.
  """
  if config.clipped_count_stddev is not None:
    return float(config.clipped_count_stddev)
  default = aggregators.DEFAULT_CLIPPED_COUNT_STDDEV_FRACTION * plan.expected_clients_per_round
  sigma = plan.noise_multiplier
  if sigma is not None and sigma >= 2.0 * default:
    return float(sigma)
  return default


def noise_split(config: TrainingConfig, plan: privacy_plan.PrivacyPlan,
                run_name: str = "") -> tuple[Optional[float], Optional[float]]:
  """(σ_b, z_Δ) of one run; (None, None) for a non-private run.

  σ = ``plan.noise_multiplier`` is the overall multiplier the ledger charges
  (Alg. 1's σ_SAMPLE, or SCALE's shared σ). Adaptive clipping spends part of
  it on the clip's count bit (noise σ_b), so the clipped-update sum gets the
  value multiplier z_Δ = (σ⁻² − (2σ_b)⁻²)^(-1/2) >= σ (Andrew et al. Thm. 1,
  ``aggregators.value_noise_multiplier``). Raises ValueError (naming the run
  and the flag) when σ >= 2σ_b.
  """
  if plan.noise_multiplier is None:
    return None, None
  sigma_b = clipped_count_stddev(config, plan)
  if not (sigma_b > 0 and math.isfinite(sigma_b)):
    raise ValueError(f"--clipped_count_stddev={sigma_b} must be a finite number > 0.")
  try:
    z_value = aggregators.value_noise_multiplier(plan.noise_multiplier, sigma_b)
  except ValueError:  # only an explicit --clipped_count_stddev can be too small
    raise ValueError(
        f"run {run_name or plan.spec.name}: adaptive clipping needs σ < 2·σ_b, i.e. "
        f"--clipped_count_stddev > σ/2 = {plan.noise_multiplier / 2:.4g} for "
        f"σ={plan.noise_multiplier:.4g}, got σ_b={sigma_b:.4g}; raise "
        "--clipped_count_stddev (or leave it unset for the default).") from None
  return sigma_b, z_value


def run_all(config: TrainingConfig, train_data, model_fn, keras_builder,
            test_x: np.ndarray, test_y: np.ndarray,
            aggregator_kwargs: Optional[dict] = None,
            eval_batch_size: Optional[int] = None,
            plugins: Sequence[RunPlugin] = ()) -> list[dict]:
  """Runs every (run spec, seed); returns one summary row per run spec.

  Each row holds the plan summary (σ, σ_b, z_Δ, rates), the per-seed final
  accuracies in ``config.seeds`` order, their mean and sd, and ``paired``:
  the paired comparison with its reference row (``reference_runs``), or None.

  ``plugins`` attach through the engine's hooks
  (:class:`tff_idp.engine.plugins.RunPlugin`). The empirical audit is one:
  with ``config.audit_canaries`` > 0 pass
  ``tff_idp.audit.client_audit.plugins_for(config)``; every DP run then
  carries that many canary clients, each run directory gets ``audit.json``
  and the row gets ``audit`` (per group, the ledger's ε and the empirical ε
  with its CI, pooled over seeds; None for non-private runs). Its validity
  controls (a deliberately broken mechanism) plug in the same way; their rows
  carry ``broken_control``.
  """
  if config.audit_canaries and not plugins:
    raise ValueError(f"audit_canaries={config.audit_canaries} needs the audit plug-in: pass "
                     "plugins=tff_idp.audit.client_audit.plugins_for(config).")
  for key in ("clipped_count_stddev", "initial_clip"):
    if aggregator_kwargs and key in aggregator_kwargs:
      raise ValueError(f"set TrainingConfig.{key} (--{key}), not aggregator_kwargs[{key!r}].")
  specs = [privacy_plan.parse_run_spec(r, config.ratios, len(config.budgets))
           for r in config.runs]
  evaluate = keras_evaluator(keras_builder, test_x, test_y, eval_batch_size,
                             head=config.head)
  family = _IdpFedAvgRuns(config, train_data, model_fn, keras_builder, evaluate,
                          aggregator_kwargs, plugins)
  results = run_grid(specs, config.seeds, family)
  add_paired_comparisons(results)
  write_summary(config, results, plugins)
  return results


class _IdpFedAvgRuns:
  """IDP-FedAvg in the engine's run template (:func:`tff_idp.engine.run_template.run_grid`).

  Per run specification: one process, shared by its seeds (calibration is
  cached per specification, :mod:`tff_idp.idp_fedavg.plan`); per seed: the
  plan's groups, a driver with the secret randomness, the plug-ins attached.
  """

  def __init__(self, config: TrainingConfig, train_data, model_fn, keras_builder, evaluate,
               aggregator_kwargs: Optional[dict], plugins: Sequence[RunPlugin]):
    self.config, self.train_data, self.model_fn = config, train_data, model_fn
    self.keras_builder, self.evaluate = keras_builder, evaluate
    self.aggregator_kwargs, self.plugins = aggregator_kwargs, plugins
    self.client_ids = list(train_data.client_ids)
    self.execution = resolved_client_execution(
        config, self.keras_builder().count_params() if self.keras_builder else None,
        vectorizable=vectorized.vectorizable(model_fn))

  def begin_spec(self, spec: privacy_plan.RunSpec) -> None:
    self.process, self.plan_summary, self.eps_spent = None, None, None

  def _build_process(self, plan, noise_added: Optional[float], sigma_b: float,
                     wrappers: list) -> Any:
    config = self.config
    return build_idp_fedavg_driver_process(
        self.model_fn,
        client_optimizer=build_optimizer(config.client_optimizer, config.client_learning_rate),
        server_optimizer=build_optimizer("sgd", config.server_learning_rate),
        noise_multiplier=noise_added,
        expected_clients_per_round=plan.expected_clients_per_round,
        per_client_clip_scale=plan.client_clip_scales is not None,
        aggregator_kwargs=dict(self.aggregator_kwargs or {}, **plan.aggregator_kwargs(),
                               **_clip_kwargs(config), clipped_count_stddev=sigma_b)
        if plan.noise_multiplier is not None else None,
        canary_client_work=_compose(wrappers),
        client_execution=self.execution, parallel_clients=config.parallel_clients)

  def run_seed(self, spec: privacy_plan.RunSpec, seed: int) -> SeedResult:
    config, plugins, client_ids = self.config, self.plugins, self.client_ids
    plan = privacy_plan.make_privacy_plan(
        spec, config.budgets, len(client_ids), config.clients_per_round,
        config.rounds, config.delta, config.accountant, seed,
        config.allow_overrun, config.max_rate)
    sigma_b, z_value = noise_split(config, plan)
    plan_summary = dict(plan.summary(), clipped_count_stddev=sigma_b,
                        value_noise_multiplier=z_value)
    noise_added, client_rates = plan.noise_multiplier, plan.client_rates
    wrappers = []
    for plugin in plugins:
      noise_added, client_rates, entries = plugin.mechanism(plan, noise_added, client_rates)
      plan_summary.update(entries)
      wrappers += [w for w in [plugin.client_work_wrapper(plan)] if w is not None]
    if self.process is None:
      self.process = self._build_process(plan, noise_added, sigma_b, wrappers)
    process = self.process
    scales = (dict(zip(client_ids, plan.client_clip_scales.tolist()))
              if plan.client_clip_scales is not None else None)
    run_dir = os.path.join(config.output_dir, spec.name, f"seed{seed}")
    arrays = self.execution == "vectorized"
    inputs = (client_arrays_fn if arrays else client_input_fn)(self.train_data, config, seed,
                                                                scales)
    randomness = PrivacyRandomness.for_run(seed, f"idp_fedavg/{spec.name}",
                                           config.insecure_reproducible_noise)
    driver = RoundDriver(
        process=_ProcessWithSecretNoise(process, randomness,
                                        plan.noise_multiplier is not None),
        sampler=PoissonClientSampler(client_ids, client_rates, randomness.sampling_seed()),
        client_input_fn=inputs,
        output_dir=run_dir, ledger=plan.ledger,
        group_names=[f"eps{b:g}" for b in config.budgets],
        evaluate_fn=self.evaluate, eval_every=config.eval_every,
        checkpoint_every=config.checkpoint_every,
        run_fingerprint=_fingerprint_config(config, plan, plan_summary, seed, self.train_data,
                                            self.keras_builder, self.aggregator_kwargs,
                                            plugins),
        progress=config.progress, privacy_randomness=randomness,
        release_only=config.release_only, restart=config.restart)
    empty = (self.train_data.create_tf_dataset_for_client(client_ids[0]).take(0)
             .batch(config.batch_size))
    driver.padding_input_fn = (
        (lambda e=empty: scaled_client_data(e, 1.0)) if scales is not None
        else (lambda e=empty: e))
    if arrays:
      driver.padding_input_fn = (
          (lambda: collections.OrderedDict(data=inputs.padding(), clip_scale=1.0))
          if scales is not None else inputs.padding)
    for plugin in plugins:
      plugin.attach(driver, plan, spec.name, seed)
    final_state, _ = driver.run(config.rounds)
    for plugin in plugins:
      plugin.after_run(process, final_state, run_dir, plan)
    rows = read_metrics(os.path.join(run_dir, "metrics.csv"))
    self.plan_summary = plan_summary
    self.eps_spent = plan.ledger.spent() if plan.ledger is not None else None
    return SeedResult(rows[-1]["eval_accuracy"],
                      [[r["round"], r["eval_accuracy"]] for r in rows
                       if r["eval_accuracy"] is not None])

  def end_spec(self, spec: privacy_plan.RunSpec, results: Sequence[SeedResult]) -> dict:
    if isinstance(self.process, in_process.InProcessLearningProcess):
      self.process.close()
    self.process = None  # released before the next spec calibrates and builds its own
    row = dict(self.plan_summary, label=spec.name, seeds=list(self.config.seeds),
               epsilon_spent=list(self.eps_spent) if self.eps_spent else None,
               history=results[0].history, history_by_seed=[r.history for r in results],
               audit=None)
    row.update(_plugin_rows(self.plugins))
    return row


def _compose(wrappers: Sequence[Callable]) -> Optional[Callable]:
  """The client-work wrappers applied in order (None when there are none)."""
  if not wrappers:
    return None

  def wrap(client_work):
    for w in wrappers:
      client_work = w(client_work)
    return client_work
  return wrap


def _plugin_rows(plugins: Sequence[RunPlugin]) -> dict:
  rows = {}
  for plugin in plugins:
    rows.update(plugin.row())
  return rows


def reference_runs(names: Sequence[str]) -> dict[str, Optional[str]]:
  """The row each run is compared with (paired over seeds) in the table.

  The paper's ordering (IDP-FedAvg Table I) is read down the ``--runs``
  list: each run is compared with the nearest earlier non-SCALE run
  (nonprivate − 0-0-100, 0-0-100 − 34-43-23, ...). A SCALE run
  ``scale-X`` is compared with the SAMPLE run ``X`` when present (Sec. VI:
  individual sampling beats noise scaling), else like any other run. The
  first run has no reference (None).
  """
  refs: dict[str, Optional[str]] = {}
  previous: Optional[str] = None
  for name in names:
    is_scale = name.startswith("scale-")
    twin = name[len("scale-"):] if is_scale else None
    refs[name] = twin if twin in names else previous
    if not is_scale:
      previous = name
  return refs


def add_paired_comparisons(results: list[dict]) -> None:
  """Adds ``paired`` (a dict, or None) to every row: reference − this run.

  A paired t-test over the seeds (``tff_idp.engine.paired_stats``): pairs
  share the seed, i.e. model init and data order; noise and sampling are
  fresh per run. H1: the reference is more accurate.
  """
  by_name = {r["run"]: r for r in results}
  refs = reference_runs([r["run"] for r in results])
  for r in results:
    ref = refs[r["run"]]
    if ref is None:
      r["paired"] = None
      continue
    a = by_name[ref]
    r["paired"] = paired_stats.paired_comparison(
        a["final_accuracies"], r["final_accuracies"], a=ref, b=r["run"]).to_dict()


def _fingerprint_config(config: TrainingConfig, plan: Optional[privacy_plan.PrivacyPlan] = None,
                        plan_summary: Optional[dict] = None, seed: int = 0,
                        train_data: Any = None, keras_builder: Optional[Callable] = None,
                        aggregator_kwargs: Optional[dict] = None,
                        plugins: Sequence[RunPlugin] = ()) -> dict:
  """One run's resume fingerprint (:mod:`tff_idp.engine.fingerprint`).

  Calibration: the plan (σ, σ_b, rates, clip scales, per-client rates and
  groups) and the config's budgets, ratios, rounds, cohort, δ, accountant,
  overrun, rate cap and clipping settings; training: every other config field
  (learning rates, optimizers, local epochs, batch size, and any field added
  later: unknown fields refuse a resume rather than pass silently); the data
  (client ids and element structure), the model (layers), this run's seed and
  the insecure-noise mode. Not: output_dir, runs, seeds (the list),
  eval_every, checkpoint_every, progress, release_only.
  """
  not_fingerprinted = ("runs", "seeds", "output_dir", "eval_every", "checkpoint_every",
                       "progress", "release_only", "insecure_reproducible_noise",
                       "restart")
  calibration_fields = ("budgets", "ratios", "rounds", "clients_per_round", "delta",
                        "accountant", "allow_overrun", "max_rate", "clipped_count_stddev",
                        "initial_clip")
  fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in not_fingerprinted}
  if not fields.get("audit_canaries"):
    # No audit: the fingerprint of runs made before the audit existed.
    fields.pop("audit_canaries", None)
    fields.pop("audit_seed", None)
  calibration = {k: fields.pop(k) for k in calibration_fields if k in fields}
  calibration["plan"] = plan_summary
  if plan is not None:
    calibration["client_rates"] = fingerprint.array_digest(plan.client_rates)
    calibration["client_groups"] = (None if plan.client_groups is None
                                    else fingerprint.array_digest(plan.client_groups))
    calibration["aggregator"] = dict(aggregator_kwargs or {}, **plan.aggregator_kwargs())
  for plugin in plugins:
    calibration.update(plugin.fingerprint())
  return fingerprint.run_fingerprint(
      calibration=calibration, training=dict(fields, server_optimizer="sgd"),
      data=(fingerprint.client_data_identity(train_data) if train_data is not None else None),
      model=(fingerprint.keras_model_identity(keras_builder())
             if keras_builder is not None else None),
      run_seed=seed, insecure_reproducible_noise=config.insecure_reproducible_noise)


class _ProcessWithSecretNoise:
  """Seeds the aggregator's noise from the run's privacy randomness at initialize.

  The process is built once per run spec and shared by its seeds; each run
  gets its own secret noise seed here (restored from the checkpoint when a
  run resumes, since the whole state is).
  """

  def __init__(self, process, randomness: PrivacyRandomness, private: bool):
    self._process, self._randomness, self._private = process, randomness, private

  def initialize(self):
    state = self._process.initialize()
    if self._private:
      state.aggregator["noise_seed"] = np.int64(self._randomness.aggregator_noise_seed())
    return state

  def __getattr__(self, name):
    return getattr(self._process, name)


def training_line(config: TrainingConfig) -> str:
  """The hyperparameters the table's runs trained with, in one line above it (issue 34)."""
  clip = "adaptive clip" if config.initial_clip is None else \
      f"adaptive clip from {config.initial_clip:g}"
  return (f"training: {config.rounds} rounds, {config.clients_per_round:g} expected clients "
          f"per round, {report.count(config.local_epochs, 'local epoch')} at batch "
          f"{config.batch_size}, client {config.client_optimizer} lr "
          f"{config.client_learning_rate:g}, server lr {config.server_learning_rate:g}, "
          f"{clip}, δ={config.delta:g}")


def format_table(config: TrainingConfig, results: list[dict],
                 plugins: Sequence[RunPlugin] = ()) -> str:
  """The results as a markdown table, with a paired comparison per row.

  Columns: σ (the overall noise multiplier the ledger charges), z_Δ (the
  multiplier actually added to the clipped-update sum once adaptive clipping
  has taken its share, see ``noise_split``), the per-group sampling rates q
  (Alg. 1), accuracy mean ± sd over the seeds, and ``paired Δ``: reference −
  this run in accuracy points with its 95% t-interval and one-sided p
  (``add_paired_comparisons``). A footnote names the test and n.
  """
  if any("paired" not in r for r in results):
    results = [dict(r) for r in results]
    add_paired_comparisons(results)
  n = len(config.seeds)
  budgets = "-".join(f"{b:g}" for b in config.budgets)
  cells = []
  for r in results:
    qs = ", ".join(f"{q:.5f}" if size else "·" for q, size in
                   zip(r["group_rates"], r["group_sizes"]))
    pair = r.get("paired")
    if pair is None:
      pair_text, separated = report.DASH, report.DASH
    else:
      pair_text = (f"vs {pair['a']}: "
                   + paired_stats.PairedComparison.from_dict(pair).format())
      separated = report.DASH if pair["n"] < 2 else ("yes" if pair["separated"] else "no")
    cells.append([r["run"], report.or_dash(r["noise_multiplier"], lambda v: f"{v:.4f}"),
                  report.or_dash(r.get("value_noise_multiplier"), lambda v: f"{v:.4f}"),
                  qs, f"{r['expected_clients_per_round']:.2f}",
                  report.percent_pm(r["mean_accuracy"], r["std_accuracy"], n), pair_text,
                  separated])
  lines = [training_line(config), "", report.markdown_table(
      [f"distribution (ε {budgets})", "σ", "z_Δ", "q per group", "E[clients/round]",
       f"accuracy % (mean ± sd, {report.count(n, 'seed')})",
       "paired Δ = ref − this (points, 95% CI, one-sided p)", "separated"], cells)]
  sigma_b = ("0.05·c, or σ where 0.05·c ≤ σ/2" if config.clipped_count_stddev is None
             else f"{config.clipped_count_stddev:g}")
  chain = [r["paired"] for r in results
           if r.get("paired") and not r["run"].startswith("scale-")]
  lines += [
      "",
      f"ordering down the table: {sum(p['separated'] for p in chain)} of {len(chain)} "
      "neighbouring pairs separated.",
      f"paired Δ: {paired_stats.TEST_NAME} of the final accuracies, n={report.count(n, 'seed')}, "
      f"df={max(n - 1, 0)}; pairs share the seed (model init, data order); noise and "
      "sampling are fresh per run. p is one-sided (H1: ref more accurate); "
      "separated = the 95% CI lies above 0. "
      f"z_Δ: value noise multiplier for σ_b={sigma_b} (--clipped_count_stddev)."]
  for plugin in plugins:
    lines = plugin.header_lines(results) + lines + plugin.table_lines(config, results)
  if config.insecure_reproducible_noise:
    lines = [f"**{NOT_PRIVATE_LABEL}** (--insecure_reproducible_noise)", ""] + lines
  return "\n".join(lines)


def mean_band(histories: Sequence[Sequence[Sequence[float]]], confidence: float = 0.95
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(rounds, mean, half-width) over seeds at the rounds every seed evaluated.

  The half-width is the t-interval's, t_{(1+c)/2, n−1}·sd/√n (sd with ddof = 1);
  0 for one seed.
  """
  common = sorted(set.intersection(*[{int(r) for r, _ in h} for h in histories]))
  if not common:
    return np.zeros(0), np.zeros(0), np.zeros(0)
  table = np.asarray([[dict((int(r), a) for r, a in h)[k] for k in common]
                      for h in histories], float)
  n = table.shape[0]
  mean = table.mean(axis=0)
  if n < 2:
    return np.asarray(common), mean, np.zeros_like(mean)
  half = (stats.t.ppf((1 + confidence) / 2, n - 1) * table.std(axis=0, ddof=1)
          / math.sqrt(n))
  return np.asarray(common), mean, half


def plot_accuracy(results: list[dict], path: str, warning: Optional[str] = None) -> None:
  """The table at a glance: accuracy per round (mean over seeds, 95% t-band) and the
  paired comparisons of the final accuracies (Δ = reference − run, 95% CI)."""
  import matplotlib.ticker  # pylint: disable=g-import-not-at-top
  with report.figure(path, 2, figsize=(12, 4.6),
                     gridspec_kw={"width_ratios": [1.5, 1]}) as (left, right):
    n = max((len(r.get("history_by_seed") or [r["history"]]) for r in results), default=0)
    for r in results:
      rounds, mean, half = mean_band(r.get("history_by_seed") or [r["history"]])
      if rounds.size:
        line, = left.plot(rounds, 100 * mean, marker=".", label=r["run"])
        left.fill_between(rounds, 100 * (mean - half), 100 * (mean + half),
                          color=line.get_color(), alpha=0.18, lw=0)
    left.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    left.set_xlabel("round")
    left.set_ylabel(f"test accuracy % (mean of {report.count(n, 'seed')}, 95% band)")
    left.set_title("accuracy per round" + (f"\n{warning}" if warning else ""),
                   color="red" if warning else "black")
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    _plot_paired(right, results)


def _plot_paired(ax, results: list[dict]) -> None:
  """The paired comparisons of the final accuracies: Δ = reference − run, 95% CI."""
  pairs = [(r["run"], r["paired"]) for r in results if r.get("paired")]
  for i, (run, pair) in enumerate(pairs):
    mean = 100 * pair["mean"]
    if pair.get("ci_low") is None:
      ax.plot([mean], [i], "o", color="gray")
    else:
      lo, hi = 100 * pair["ci_low"], 100 * pair["ci_high"]
      ax.errorbar([mean], [i], xerr=[[mean - lo], [hi - mean]], fmt="o", capsize=4,
                  color="tab:green" if pair.get("separated") else "tab:red")
  ax.axvline(0, color="black", lw=0.8)
  ax.set_yticks(range(len(pairs)))
  ax.set_yticklabels([f"{p['a']} − {run}" for run, p in pairs], fontsize=8)
  ax.invert_yaxis()
  ax.set_xlabel("final accuracy Δ (points), paired over seeds, 95% CI")
  ax.set_title("green: separated (CI above 0)")
  ax.grid(alpha=0.3, axis="x")


def write_summary(config: TrainingConfig, results: list[dict],
                  plugins: Sequence[RunPlugin] = ()) -> None:
  os.makedirs(config.output_dir, exist_ok=True)
  warning = NOT_PRIVATE_LABEL if config.insecure_reproducible_noise else None
  summary_lib.write_summary(config.output_dir, "idp_fedavg", dataclasses.asdict(config),
                            results, privacy_warning=warning)
  table = format_table(config, results, plugins)
  with open(os.path.join(config.output_dir, "summary.md"), "w") as f:
    f.write(table + "\n")
  try:
    plot_accuracy(results, os.path.join(config.output_dir, "accuracy.png"), warning)
    for plugin in plugins:
      plugin.plot(results, config.output_dir)
  except ImportError:  # report.figure skips a missing matplotlib; a plug-in may not
    logging.warning("matplotlib missing: no plug-in plots")
