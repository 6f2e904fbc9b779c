"""One call per family: your split in, a privacy/utility table out.

:func:`run_idp_fedavg` (client-level budgets, IDP-FedAvg Alg. 1-2, with the
non-private, uniform-DP and SCALE baselines), :func:`run_rpdp`
(record-level budgets, rPDP-FL Alg. 3, against Minimum / Dropout /
PrivacyFree) and :func:`run_ino_sgd` (owners' budgets per class or per
record on the pooled records, INO-SGD Alg. 1 against IDP-SGD and Drop x%)
take any split of :mod:`datasets` (``datasets.from_arrays``,
``datasets.resolve("tfds:mnist")``, a saved split directory, a built-in
federation) and run the same code paths as ``experiments.idp_fedavg``,
``experiments.rpdp`` and ``experiments.ino_sgd``: calibration re-verified
with dp-accounting, secret privacy randomness, checkpoints that resume
exactly, ``metrics.csv`` / ``summary.json`` / ``summary.md`` / a plot in
``output_dir``. :func:`run_apes` (users' local budgets with shuffle
amplification, APES Alg. 1-2) takes users with a few records each
(``datasets.shuffle_users``) and is what ``experiments.apes`` runs.

Every runner's defaults are its command line's, from one source per family
(docs/running.md, "Defaults: one set per family").

Each starts and owns its TFF execution context (one local worker, stopped
on return, on errors and on SIGINT/SIGTERM) unless ``own_runtime=False``, for
callers that already entered :func:`tff_idp.execution.runtime.execution_context`.

Example (a tabular binary task over four hospitals)::

  split = datasets.from_arrays(x, y, partition="natural", groups=hospital,
                               test_x=x_test, test_y=y_test)
  result = tff_idp.runners.run_rpdp(split, head="sigmoid", rounds=20,
                                    output_dir="runs/mine")
  print(result.table)
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from tff_idp import models
from tff_idp import preferences
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.apes import defaults as apes_defaults
from tff_idp.apes import runs as apes_runs
from tff_idp.audit import record_canaries
from tff_idp.audit import report as audit_report
from tff_idp.centralized.silo import Silo
from tff_idp.execution import runtime
from tff_idp.idp_fedavg import config as idp_config
from tff_idp.idp_fedavg import runs as runs_lib
from tff_idp.ino_sgd import config as ino_config
from tff_idp.ino_sgd import defaults as ino_defaults
from tff_idp.ino_sgd import methods as ino_methods
from tff_idp.ino_sgd import runs as ino_runs
from tff_idp.rpdp import config as rpdp_config
from tff_idp.rpdp import record_level
from tff_idp.rpdp import runs as record_runs
from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL
from tff_idp.errors import ToolkitValueError


@dataclasses.dataclass
class RunResult:
  """What a runner returns: the printed table, one row per run spec/method, where files are."""
  table: str
  rows: list
  output_dir: str

  def __str__(self) -> str:
    return self.table


def _runtime(own_runtime: bool, device: str):
  if not own_runtime:
    return contextlib.nullcontext()
  return runtime.execution_context(device=device)


def _shape_and_classes(split) -> tuple[tuple, int, float]:
  info = split.info
  return tuple(info.input_shape), int(info.num_classes), float(info.rescale)


_IDP = idp_config.TRAINING_DEFAULTS  # the experiments.idp_fedavg flags' defaults


def run_idp_fedavg(split, *, output_dir: str,
                   budgets: Sequence[float] = _IDP["budgets"],
                   ratios: Sequence[float] = _IDP["ratios"],
                   runs: Sequence[str] = ("nonprivate", "idp", "scale"),
                   rounds: int = _IDP["rounds"],
                   clients_per_round: float = _IDP["clients_per_round"],
                   local_epochs: int = _IDP["local_epochs"],
                   batch_size: int = _IDP["batch_size"],
                   client_learning_rate: float = _IDP["client_learning_rate"],
                   server_learning_rate: float = _IDP["server_learning_rate"],
                   client_optimizer: str = _IDP["client_optimizer"],
                   delta: float = _IDP["delta"], accountant: str = _IDP["accountant"],
                   seeds: Sequence[int] = (0,),
                   model: Union[str, Callable[[], Any]] = _IDP["model"],
                   head: str = _IDP["head"],
                   initial_clip: float = _IDP["initial_clip"],
                   clipped_count_stddev: Optional[float] = _IDP["clipped_count_stddev"],
                   max_rate: float = _IDP["max_rate"],
                   allow_overrun: bool = _IDP["allow_overrun"],
                   eval_every: int = _IDP["eval_every"],
                   checkpoint_every: int = _IDP["checkpoint_every"],
                   device: str = "cpu", progress: bool = True,
                   own_runtime: bool = True, client_execution: str = "auto",
                   parallel_clients: Optional[int] = None) -> RunResult:
  """IDP-FedAvg (SAMPLE) and its baselines on ``split``; see the module doc.

  Args:
    split: any :mod:`datasets` split (``train_client_data()``, ``test_arrays()``,
      ``info``).
    output_dir: metrics, checkpoints and summaries (resumes when rerun).
    budgets, ratios: ε per privacy group and the share of clients in each.
    runs: run specs (``nonprivate``, ``idp``, ``scale``, ``A-B-C``; see
      ``experiments.idp_fedavg --runs``).
    rounds, clients_per_round: I and the expected cohort c of Alg. 1.
    model: "auto" | "logreg" | "mlp" | "cnn" (:func:`tff_idp.models.builder_for`)
      or your own zero-argument Keras builder returning logits.
    head: "softmax" or "sigmoid" (binary labels).
    initial_clip: adaptive clipping's C at round 0.
    clipped_count_stddev: σ_b of adaptive clipping's count (default 0.05·c).
    max_rate, allow_overrun: as the flags of the same names.
    Defaults: those of ``experiments.idp_fedavg``
    (:data:`tff_idp.idp_fedavg.config.TRAINING_DEFAULTS`), except ``runs``
    and ``seeds``, which the command line sets for its paired comparison.
    client_execution, parallel_clients: where the clients train ("auto";
      "in_process": in this process, ``parallel_clients`` at once;
      "vectorized": in this process, the whole cohort at once (logistic
      regression and MLP); "tff": as TFF client computations, e.g. on a fleet
      runtime you pass in with ``own_runtime=False``); see
      ``build_idp_fedavg_driver_process``.
    Other arguments: as the ``experiments.idp_fedavg`` flags of the same names.
  """
  shape, num_classes, rescale = _shape_and_classes(split)
  keras_builder = (model if callable(model) else
                   models.builder_for(shape, num_classes, model, head, rescale))
  model_fn = models.tff_model_fn(keras_builder, models.input_spec_for(shape), head=head)
  config = runs_lib.TrainingConfig(
      budgets=[float(b) for b in budgets], ratios=[float(r) for r in ratios],
      runs=list(runs), seeds=[int(s) for s in seeds], rounds=int(rounds),
      clients_per_round=float(clients_per_round), local_epochs=int(local_epochs),
      batch_size=int(batch_size), client_learning_rate=float(client_learning_rate),
      server_learning_rate=float(server_learning_rate), client_optimizer=client_optimizer,
      delta=float(delta), accountant=accountant, output_dir=output_dir,
      eval_every=int(eval_every), checkpoint_every=int(checkpoint_every), progress=progress,
      clipped_count_stddev=clipped_count_stddev, head=head,
      initial_clip=float(initial_clip), max_rate=float(max_rate),
      allow_overrun=bool(allow_overrun),
      client_execution=client_execution, parallel_clients=parallel_clients)
  train = split.train_client_data()
  runs_lib.validate(config, len(train.client_ids))
  test_x, test_y = split.evaluation_arrays()
  with _runtime(own_runtime, device):
    rows = runs_lib.run_all(config, train, model_fn, keras_builder, test_x, test_y,
                            eval_batch_size=1024)
  return RunResult(runs_lib.format_table(config, rows), rows, config.output_dir)


def run_rpdp(split, *, output_dir: str,
             budgets: Union[str, Any, dict] = "three_levels",
             methods: Sequence[str] = ("ours", "minimum", "dropout", "privacy_free"),
             rounds: Optional[int] = None, local_steps: Optional[int] = None,
             client_rate: Optional[float] = None, noise_multiplier: Optional[float] = None,
             clip_norm: Optional[float] = None, learning_rate: Optional[float] = None,
             delta: Optional[float] = None, threat_model: Optional[str] = None,
             seeds: Sequence[int] = (0,), budget_seed: int = 0,
             fresh_budgets_per_seed: bool = False,
             model: Union[str, Callable[[], Any]] = "auto", head: str = "softmax",
             estimator: str = "scf", privacy_free_batch: Optional[float] = None,
             eval_every: Optional[int] = None, checkpoint_every: Optional[int] = None,
             device: str = "cpu",
             progress: bool = True, own_runtime: bool = True,
             dropout_cutoff: Optional[float] = None, client_execution: str = "auto",
             parallel_clients: Optional[int] = None) -> RunResult:
  """rPDP-FL (record-level personalized DP) and its baselines on ``split``.

  Args:
    split: any :mod:`datasets` split; its clients keep their records.
    output_dir: metrics, checkpoints and summaries (resumes when rerun).
    budgets: every record's ε_ij: a distribution name of
      :data:`tff_idp.preferences.DISTRIBUTIONS` (e.g. "three_levels",
      "bounded_mix_gauss"), a distribution object, or ``{client_id: array}``.
    budget_seed: the seed of the budget draw from a distribution.
    fresh_budgets_per_seed: draw the records' budgets afresh for every run
      seed (seed s draws with :func:`tff_idp.preferences.per_seed_budget_seed`), so the seeds
      average over budget assignments too; each seed's plan goes to
      ``record_plan_seed<s>.csv``. Default: one draw for all seeds
      (``record_plan.csv``).
    methods: among ours, minimum, dropout, privacy_free (rPDP-FL §7.2).
    rounds, local_steps, client_rate, noise_multiplier, clip_norm: T, τ, λ,
      σ, L of Alg. 3; ``delta`` and ``threat_model`` of Thm 1. Every setting
      left at ``None`` takes ``experiments.rpdp``'s default
      (``tff_idp.rpdp.runs.DEFAULTS``: T = 30, τ = 10, λ = 0.5,
      σ = 2, L = 1, η = 1, δ = 1e-4, type2), so the CLI and the runner run the
      same experiment on the same split.
    model, head: as in :func:`run_idp_fedavg`.
    client_execution, parallel_clients: where the clients' DP-SGD runs, as in
      :func:`run_idp_fedavg` ("auto": in this process for models of ≥ 10,000
      parameters, TFF client computations otherwise).
    dropout_cutoff: the Dropout baseline's ε_mod. ``None``: the mean of the
      distribution (:func:`tff_idp.preferences.expected_budget`, from its
      specification alone) when ``budgets`` names or is a distribution, and
      the mean of the given budgets when they are a dict (a statistic of
      those budgets; pass the cutoff of their specification to avoid it).
    Other arguments: as the ``experiments.rpdp`` flags of the same names.
  """
  shape, num_classes, rescale = _shape_and_classes(split)
  keras_builder = (model if callable(model) else
                   models.builder_for(shape, num_classes, model, head, rescale))
  arrays = split.train_arrays()
  x = {cid: xy[0] for cid, xy in arrays.items()}
  y = {cid: xy[1] for cid, xy in arrays.items()}
  records = record_level.RecordFederation(x, y)
  test_x, test_y = split.evaluation_arrays()
  federation = record_runs.Federation(records, test_x, test_y, keras_builder,
                                      f"{getattr(split, 'dataset', 'split')}, "
                                      f"{len(x)} clients", num_classes, head)
  if isinstance(budgets, dict):
    if fresh_budgets_per_seed:
      raise ToolkitValueError("fresh_budgets_per_seed=True draws budgets from a distribution; "
                              "given per-record budgets cannot be drawn again (pass a "
                              "distribution, or leave it False).")
    record_budgets = {cid: np.asarray(budgets[cid], float) for cid in records.client_ids}
  else:
    distribution = budgets
    if isinstance(budgets, str):
      if budgets not in preferences.DISTRIBUTIONS:
        raise ToolkitValueError(f"budgets={budgets!r}: choose a distribution of "
                                f"{sorted(preferences.DISTRIBUTIONS)}, a distribution "
                                "object or {client_id: per-record ε array}.")
      distribution = preferences.DISTRIBUTIONS[budgets]()
    record_budgets = rpdp_config.drawn_budgets(distribution, records.sizes, budget_seed,
                                               fresh_budgets_per_seed)
    if dropout_cutoff is None:
      dropout_cutoff = preferences.expected_budget(distribution)
  given = dict(rounds=rounds, local_steps=local_steps, client_rate=client_rate,
               noise_multiplier=noise_multiplier, clip_norm=clip_norm,
               learning_rate=learning_rate, delta=delta, threat_model=threat_model,
               privacy_free_batch=privacy_free_batch, eval_every=eval_every,
               checkpoint_every=checkpoint_every)
  settings = {k: record_runs.DEFAULTS[k] if v is None else v for k, v in given.items()}
  params = TwoStageParams(float(settings["noise_multiplier"]), int(settings["local_steps"]),
                          int(settings["rounds"]), float(settings["client_rate"]),
                          float(settings["delta"]), settings["threat_model"])
  config = dict(methods=list(methods), **{k: settings[k] for k in (
                    "rounds", "local_steps", "client_rate", "noise_multiplier",
                    "clip_norm", "learning_rate", "delta", "threat_model")},
                seeds=list(seeds), budgets=str(budgets)
                if not isinstance(budgets, dict) else "per-record (given)",
                budget_seed=int(budget_seed), fresh_budgets_per_seed=bool(fresh_budgets_per_seed),
                model=model if isinstance(model, str) else "custom", head=head,
                estimator=estimator, dataset=federation.name)
  with _runtime(own_runtime, device):
    return run_rpdp_federation(
        federation, record_budgets, params, list(methods), [int(s) for s in seeds], output_dir,
        config=config, clip_norm=float(settings["clip_norm"]),
        learning_rate=float(settings["learning_rate"]),
        privacy_free_batch=float(settings["privacy_free_batch"]),
        eval_every=int(settings["eval_every"]),
        checkpoint_every=int(settings["checkpoint_every"]), progress=progress,
        estimator=estimator, dropout_cutoff=dropout_cutoff, client_execution=client_execution,
        parallel_clients=parallel_clients)


def run_rpdp_federation(federation: record_runs.Federation,
                        budgets: Union[dict, Callable[[int], dict]], params: TwoStageParams,
                        methods: Sequence[str], seeds: Sequence[int], output_dir: str, *,
                        config: Mapping[str, Any], audit_canaries: int = 0,
                        audit_seed: int = 0, audit_levels: Optional[Sequence[float]] = None,
                        privacy_warning: Optional[str] = None, **run_kwargs: Any) -> RunResult:
  """rPDP-FL's comparison (Alg. 3, §7.2) on a record-level federation whose budgets are known.

  What :func:`run_rpdp` and ``experiments.rpdp`` run once the records have
  their ε_ij (``budgets``, :func:`tff_idp.rpdp.config.assign_budgets`): every
  method × seed (:func:`tff_idp.rpdp.runs.run` with ``run_kwargs``), with the
  record-level canary audit where ``audit_canaries`` > 0
  (:class:`tff_idp.audit.record_canaries.RecordCanaryAudit`, ``audit_seed``,
  ``audit_levels``), then ``summary.md``/``summary.json``/``accuracy.png``
  with ``config`` and, below the table, the audit's. Runs in the caller's
  TFF execution context; a bad audit raises
  :class:`tff_idp.rpdp.runs.AuditConfigError` before any training.
  """
  audit = (record_canaries.RecordCanaryAudit(audit_canaries, audit_seed, audit_levels)
           if audit_canaries else None)
  rows = record_runs.run(federation, budgets, params, methods, seeds, output_dir, audit=audit,
                         **run_kwargs)
  table = record_runs.write_summary(
      rows, len(seeds), output_dir, dict(config), privacy_warning=privacy_warning,
      sections=[("Empirical privacy audit (record-level canaries, first seed)",
                 audit_report.format_record_audit_table(rows))])
  return RunResult(table, rows, output_dir)


def silo_from_split(split, *, model: Union[str, Callable[[], Any]] = "auto",
                    train_examples: int = 0, test_examples: int = 0,
                    seed: int = 0) -> Silo:
  """Every client's records of ``split`` pooled into one silo (INO-SGD, centralized runs).

  Records keep the split's client order, then each client's record order
  (the order a per-record budget array follows); ``train_examples`` > 0 keeps
  a seeded random subset of that many (in that order), ``test_examples`` > 0
  the first test examples. ``model``: as in :func:`run_idp_fedavg` (softmax
  head); the silo's builder takes the init seed.
  """
  shape, num_classes, rescale = _shape_and_classes(split)
  parts = list(split.train_arrays().values())
  x = np.concatenate([a for a, _ in parts])
  y = np.concatenate([b for _, b in parts])
  if train_examples:
    keep = np.sort(np.random.default_rng(seed).permutation(len(y))[:train_examples])
    x, y = x[keep], y[keep]
  test_x, test_y = split.evaluation_arrays()
  if test_examples:
    test_x, test_y = test_x[:test_examples], test_y[:test_examples]
  if callable(model):
    builder = lambda init_seed: model()  # noqa: E731  (your builder sets its own init)
  else:
    builder = lambda init_seed: models.builder_for(  # noqa: E731
        shape, num_classes, model, "softmax", rescale, seed=init_seed)()
  return Silo(x, y, test_x, test_y, builder,
              f"{getattr(split, 'dataset', 'split')} (clients pooled, {len(y)} records)")


def ino_owners(silo: Silo, num_classes: int, budgets: Any,
               budget_seed: int = 0) -> ino_methods.Owners:
  """The owners of INO-SGD's silo from ``budgets`` (see :func:`run_ino_sgd`)."""
  if isinstance(budgets, str) and budgets in preferences.DISTRIBUTIONS:
    return ino_config.owners_by_drawn_budgets(silo.y, budgets, budget_seed, num_classes)
  if isinstance(budgets, (str, list, tuple)):
    return ino_methods.owners_by_class(
        silo.y, preferences.parse_class_budgets(budgets, num_classes))
  if isinstance(budgets, Mapping) and all(isinstance(k, (int, np.integer)) for k in budgets):
    spec = [f"{int(c)}:{float(e)!r}" for c, e in budgets.items()]
    return ino_methods.owners_by_class(silo.y, preferences.parse_class_budgets(spec,
                                                                               num_classes))
  return ino_methods.owners_by_record(silo.y, np.asarray(budgets, float), num_classes)


_INO = ino_defaults.DEFAULTS  # the experiments.ino_sgd flags' defaults (embedded preset)


def run_ino_sgd(split, *, output_dir: str, budgets: Any = _INO["budgets"],
                methods: Sequence[str] = _INO["methods"],
                drop_percents: Sequence[float] = _INO["drop_percents"],
                seeds: Sequence[int] = _INO["seeds"], steps: int = _INO["steps"],
                expected_batch: Optional[float] = _INO["expected_batch"],
                learning_rate: float = _INO["learning_rate"],
                clip_norm: float = _INO["clip_norm"], mechanism: str = _INO["mechanism"],
                delta: float = _INO["delta"], ino_gamma_ratio: float = _INO["ino_gamma_ratio"],
                ino_alpha: float = _INO["ino_alpha"], ino_beta: float = _INO["ino_beta"],
                model: Union[str, Callable[[], Any]] = _INO["model"],
                eval_every: int = _INO["eval_every"],
                train_examples: int = _INO["train_examples"],
                test_examples: int = _INO["test_examples"], data_seed: int = _INO["data_seed"],
                budget_seed: int = _INO["budget_seed"], progress: bool = _INO["progress"],
                release_only: bool = _INO["release_only"]) -> RunResult:
  """INO-SGD (Alg. 1) against IDP-SGD and "Drop x%" on ``split``'s records, pooled in one silo.

  Args:
    split: any :mod:`datasets` split; its clients' records are pooled
      (:func:`silo_from_split`).
    output_dir: per-run ``metrics.csv``, ``summary.md``/``summary.json``,
      ``per_group.png``.
    budgets: the owners' ε. By class: ``"0-4:0.1,5-9:1"`` (the
      ``--class_budgets`` syntax) or ``{class: ε}``; classes of equal ε form
      one owner. Per record: a distribution name of
      :data:`tff_idp.preferences.DISTRIBUTIONS` (drawn with ``budget_seed``)
      or an array with one ε per pooled record; records of equal ε form one
      owner, and the table reports every class.
    methods, drop_percents: among idp_sgd, drop (one run per percentage),
      ino_sgd.
    steps, expected_batch, learning_rate, clip_norm, mechanism, delta: T,
      b = Σ q_n|D_n| (default: a tenth of the records, at most 1,000), η, C,
      SAMPLE or SCALE (:mod:`tff_idp.accounting.owner.plan`), δ.
    ino_gamma_ratio, ino_alpha, ino_beta: INO-SGD's tail γ (as a fraction of
      E[Σ q C]) and its Beta(α, β) function; ``ino_gamma_ratio=0`` is IDP-SGD.
    release_only: write no ``diagnostics.csv`` (un-noised batch statistics).
    Defaults: those of ``experiments.ino_sgd`` (:data:`tff_idp.ino_sgd.defaults.DEFAULTS`),
    so the runner and ``--dataset`` run the same comparison; δ = 1e-5 is the
    INO-SGD paper's (the other families default to 1e-4).
    Other arguments: as the ``experiments.ino_sgd`` flags of the same names.
  """
  num_classes = int(split.info.num_classes)
  silo = silo_from_split(split, model=model, train_examples=train_examples,
                         test_examples=test_examples, seed=data_seed)
  owners = ino_owners(silo, num_classes, budgets, budget_seed)
  batch = ino_defaults.expected_batch(expected_batch, len(silo.y))
  cfg = {"preset": "own", "methods": list(methods),
         "drop_percents": [float(p) for p in drop_percents], "seeds": [int(s) for s in seeds],
         "epsilons": list(owners.epsilons), "owner_names": list(owners.names),
         "steps": int(steps), "expected_batch": batch, "learning_rate": float(learning_rate),
         "clip_norm": float(clip_norm), "mechanism": mechanism, "delta": float(delta),
         "ino_gamma_ratio": float(ino_gamma_ratio), "ino_alpha": float(ino_alpha),
         "ino_beta": float(ino_beta), "eval_every": int(eval_every), "data_seed": int(data_seed),
         "budget_seed": int(budget_seed), "progress": progress,
         "insecure_reproducible_noise": False, "release_only": bool(release_only)}
  ino_config.check_plan(cfg, owners)  # an infeasible plan fails before any training
  body, rows = ino_runs.compare(
      silo, owners, cfg, output_dir, title="INO-SGD on your data",
      group_epsilons=owners.epsilons if owners.by_class else None,
      details={"owners": dict(zip(owners.names, owners.epsilons)),
               "budgets": budgets if isinstance(budgets, str) else "given"})
  return RunResult(body, rows, output_dir)


_APES = apes_defaults.DEFAULTS  # the experiments.apes flags' defaults


APES_CLIENT_EXECUTIONS = ("auto", "vectorized", "tff")
"""APES's client executions (it has no per-user in-process one)."""


def run_apes(users: apes_runs.UserFederation, *, output_dir: str,
             frameworks: Sequence[str] = _APES["frameworks"],
             distribution: str = _APES["distribution"], epsilon_seed: int = _APES["epsilon_seed"],
             rounds: int = _APES["rounds"], local_epochs: int = _APES["local_epochs"],
             batch_size: int = _APES["batch_size"],
             client_learning_rate: float = _APES["client_learning_rate"],
             proximal_strength: float = _APES["proximal_strength"], clip: float = _APES["clip"],
             keep_fraction: float = _APES["keep_fraction"], bound: str = _APES["bound"],
             shuffle_delta: Optional[float] = _APES["shuffle_delta"],
             delta: float = _APES["delta"], seed: int = _APES["seed"],
             eval_every: int = _APES["eval_every"],
             checkpoint_every: int = _APES["checkpoint_every"], device: str = _APES["device"],
             progress: bool = _APES["progress"], restart: bool = _APES["restart"],
             insecure_reproducible_noise: bool = _APES["insecure_reproducible_noise"],
             client_execution: str = _APES["client_execution"],
             own_runtime: bool = True, details: Optional[Mapping[str, Any]] = None
             ) -> RunResult:
  """APES / S-APES against their baselines (APES paper Alg. 1-2, Tables 3-4) on ``users``.

  What ``experiments.apes`` runs: every user draws a local ε_i from
  ``distribution`` (Table 2, seeded by ``epsilon_seed``), runs FedProx every
  round and sends its model delta clipped per coordinate to [−C, C] and
  perturbed at ε_i; one row per framework gives ε^{ul}, the one-round ε^c
  and ε^{uc}, the ``rounds``-round ε^{uc} and the test accuracy.

  Args:
    users: a :class:`tff_idp.apes.runs.UserFederation`, e.g.
      ``datasets.shuffle_users.synthetic_users(1000)`` (the command line's
      embedded users: ``--users``, ``--samples_per_user``, ``--data_seed``)
      or ``datasets.shuffle_users.mnist_users(None, 12, data_dir)``
      (``--preset=paper``, with ``rounds=40``).
    output_dir: per-run checkpoints and metrics, ``summary.md``/``summary.json``,
      ``accuracy.png`` (resumes when rerun with the same settings).
    frameworks: among :data:`tff_idp.apes.runs.FRAMEWORKS`.
    shuffle_delta: δ_s per shuffled coordinate; ``None``: δ/(10·d·T)
      (:func:`tff_idp.apes.runs.default_shuffle_delta`).
    delta: the user-level δ^{uc}.
    insecure_reproducible_noise: derive the noise from ``seed`` (NOT PRIVATE;
      debugging only).
    client_execution: "auto" (vectorized: every user's FedProx and randomizer
      at once in this process, :mod:`tff_idp.apes.vectorized`), "vectorized"
      or "tff" (one TFF client computation per user); the same rounds within
      float tolerance.
    details: extra entries for ``summary.json``'s config (the command line's flags).
    Defaults: those of ``experiments.apes``
    (:data:`tff_idp.apes.defaults.DEFAULTS`). Other arguments: as the
    ``experiments.apes`` flags of the same names.
  """
  training = apes_runs.ApesTraining(
      rounds=int(rounds), local_epochs=int(local_epochs), batch_size=int(batch_size),
      client_learning_rate=float(client_learning_rate),
      proximal_strength=float(proximal_strength), clip=float(clip),
      keep_fraction=float(keep_fraction))
  if client_execution not in APES_CLIENT_EXECUTIONS:
    raise ToolkitValueError(f"client_execution={client_execution!r}; APES runs its users with "
                            f"one of {', '.join(APES_CLIENT_EXECUTIONS)}.")
  unknown = sorted(set(frameworks) - set(apes_runs.FRAMEWORKS))
  if unknown or not frameworks:
    raise ToolkitValueError(f"frameworks has {unknown or 'nothing'}; choose from "
                            f"{', '.join(apes_runs.FRAMEWORKS)}.")
  epsilons = apes_runs.draw_epsilons(distribution, users.num_users, int(epsilon_seed))
  if shuffle_delta is None:
    shuffle_delta = apes_runs.default_shuffle_delta(float(delta), users.num_params,
                                                    training.rounds)
  accounting = apes_runs.ApesAccounting(shuffle_delta=float(shuffle_delta),
                                        delta=float(delta), bound=bound)
  with _runtime(own_runtime, device):
    rows = apes_runs.run_frameworks(
        list(frameworks), users, epsilons, training, accounting, int(seed), output_dir,
        eval_every=int(eval_every), checkpoint_every=int(checkpoint_every), progress=progress,
        insecure_reproducible_noise=bool(insecure_reproducible_noise), restart=bool(restart),
        client_execution=client_execution)
  config = dict(frameworks=list(frameworks), distribution=distribution,
                epsilon_seed=int(epsilon_seed), **dataclasses.asdict(training), bound=bound,
                delta=float(delta), seed=int(seed), eval_every=int(eval_every),
                checkpoint_every=int(checkpoint_every), dataset=users.name)
  config.update(details or {})
  config.update(users=users.num_users, rounds=training.rounds,
                shuffle_delta=accounting.shuffle_delta)
  table = apes_runs.write_summary(
      rows, training, accounting, output_dir, config,
      privacy_warning=NOT_PRIVATE_LABEL if insecure_reproducible_noise else None)
  return RunResult(table, rows, output_dir)
