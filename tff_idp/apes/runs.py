"""APES / S-APES runs end to end (APES paper Alg. 1-2, Tables 3-4).

Every user takes part in every round (the paper's setting). Each user runs
FedProx locally, and its model delta leaves the client clipped to [−C, C]
per coordinate and perturbed at the user's own ε_i (Clip-Laplace, Def. 4);
the server averages and de-biases with the ε multiset
(:mod:`tff_idp.apes`). The shuffle is implicit (the mean is
permutation-invariant); the ledger (:mod:`tff_idp.accounting.shuffle`)
charges what a shuffler would give.

One training run per *mechanism*; the table has one row per *framework*:
PLDP and UniS are the same Laplace run under two accountings (the paper's
Table 3 shows the same accuracy for both for that reason).

=============  ===================================  ===========================
framework      mechanism (run)                      ε^c per round (ledger)
=============  ===================================  ===========================
non-private    none                                 ∞
LDP-min        Clip-Laplace at min ε for everyone   min ε (no shuffle)
PLDP           Laplace at ε_i, plain mean           max ε (no shuffle)
UniS           the PLDP run                         FMT22 at max ε (as published)
APES           Clip-Laplace at ε_i, de-biased       the run's ``bound``
S-APES         random b-subset at ε_i, pad          the run's ``bound`` (b coords)
S-APES (top-b) the paper's post-top-b at ε_i, pad   max ε (no certified gain)
=============  ===================================  ===========================

S-APES's default is the data-independent random b-subset, sound at b·ε_i
locally; the paper's post-top-b (``sapes_top_b``) is only d·ε_i-LDP and its
rows print the published b·ε_i, EoN ε^c and Prop. 1 values as claims beside
the sound numbers (:mod:`tff_idp.apes.sparsify`, docs/apes.md).
"""
from __future__ import annotations

import collections
import dataclasses
import math
import os
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from tff_idp.accounting.events import ShuffledLdpDpEvent
from tff_idp.accounting.shuffle import ApesLedger
from tff_idp.accounting.shuffle import clip_laplace_reference
from tff_idp.accounting.shuffle import composition
from tff_idp.accounting.shuffle.round_ledger import ShuffleRoundLedger
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.engine.sampling import PoissonClientSampler
from tff_idp.engine import fingerprint as fingerprint_lib
from tff_idp.engine import report
from tff_idp.engine import summary as summary_lib
from tff_idp.engine.run_template import SeedResult
from tff_idp.engine.run_template import run_grid

# framework -> (training run it reads its accuracy from, mechanism of that run)
FRAMEWORKS = collections.OrderedDict([
    ("nonprivate", ("nonprivate", "none")),
    ("ldp_min", ("ldp_min", "clip_laplace")),
    ("pldp", ("laplace", "laplace")),
    ("unis", ("laplace", "laplace")),
    ("apes", ("apes", "clip_laplace")),
    ("sapes", ("sapes", "sparse_clip_laplace")),
    ("sapes_top_b", ("sapes_top_b", "sparse_clip_laplace_top_b")),
])
LABELS = {"nonprivate": "Non-private", "ldp_min": "LDP-min", "pldp": "PLDP",
          "unis": "UniS", "apes": "APES", "sapes": "S-APES",
          "sapes_top_b": "S-APES (paper's top-b)"}
# S-APES framework -> the ledger's selection rule (tff_idp.accounting.shuffle.ledger)
SAPES_SELECTION = {"sapes": "random", "sapes_top_b": "top_b"}


class UserFederation(Protocol):
  """What a run needs of its users (built by :mod:`datasets.shuffle_users`).

  ``x[cid]``/``y[cid]`` are a user's train records; ``test_x``/``test_y``
  pool every user's held-out records (the paper's pooled test accuracy);
  ``num_params`` is d of softmax regression.
  """
  client_ids: list
  x: dict
  y: dict
  test_x: np.ndarray
  test_y: np.ndarray
  num_features: int
  num_classes: int
  name: str

  @property
  def num_users(self) -> int: ...

  @property
  def num_params(self) -> int: ...


DISTRIBUTIONS = {"uniform1": "Uniform1", "uniform2": "Uniform2", "gauss1": "Gauss1",
                 "gauss2": "Gauss2", "mixgauss1": "MixGauss1", "mixgauss2": "MixGauss2"}


def draw_epsilons(distribution: str, users: int, seed: int) -> np.ndarray:
  """Each user's per-coordinate local ε from a Table 2 distribution, in random user order."""
  if distribution not in DISTRIBUTIONS:
    raise ValueError(f"distribution={distribution!r}; choose from {', '.join(DISTRIBUTIONS)}.")
  rng = np.random.default_rng(seed)
  eps = clip_laplace_reference.sample_epsilons(DISTRIBUTIONS[distribution], users, rng)
  return rng.permutation(eps)


@dataclasses.dataclass(frozen=True)
class ApesTraining:
  """Training hyperparameters (paper/reference defaults: notes §2.4)."""
  rounds: int = 40
  local_epochs: int = 10
  batch_size: int = 32
  client_learning_rate: float = 1.0
  server_learning_rate: float = 1.0
  proximal_strength: float = 0.01
  clip: float = 0.1
  keep_fraction: float = 0.2

  def __post_init__(self):
    for name in ("rounds", "local_epochs", "batch_size"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name}={getattr(self, name)} must be >= 1.")
    for name in ("client_learning_rate", "server_learning_rate", "clip"):
      if not getattr(self, name) > 0:
        raise ValueError(f"{name}={getattr(self, name)} must be > 0.")
    if self.proximal_strength < 0:
      raise ValueError(f"proximal_strength={self.proximal_strength} must be >= 0.")
    if not 0 < self.keep_fraction <= 1:
      raise ValueError(f"keep_fraction={self.keep_fraction} must lie in (0, 1].")


def run_epsilons(framework: str, epsilons: np.ndarray) -> np.ndarray:
  """Each user's local ε in the training run behind ``framework`` (None: no noise)."""
  run, mechanism = FRAMEWORKS[framework]
  del mechanism
  if run == "ldp_min":
    return np.full_like(epsilons, float(np.min(epsilons)))
  return np.asarray(epsilons, np.float64)


def keep_count(training: ApesTraining, num_params: int) -> int:
  """b, the coordinates S-APES keeps (Alg. 2): ``keep_fraction``·d, at least 1."""
  return max(1, int(round(training.keep_fraction * num_params)))


def user_input_fn(federation: UserFederation, epsilons: np.ndarray, training: ApesTraining,
                  randomness: PrivacyRandomness, vectorized: bool = False
                  ) -> Callable[[str, int], Any]:
  """``(user, round) -> client input``: the user's batches, its own ε and its secret per-round seed (``randomness.client_seed``).

  ``vectorized``: a :class:`tff_idp.apes.vectorized.LdpClientArrays` (the
  same records, batches, ε and seed without a ``tf.data`` pipeline) for the
  vectorized client work; otherwise the TFF client work's input.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_idp import apes as ldp  # pylint: disable=g-import-not-at-top
  index = {cid: i for i, cid in enumerate(federation.client_ids)}

  def make(client_id: str, round_num: int):
    epsilon = float(epsilons[index[client_id]])
    seed = randomness.client_seed(client_id, round_num)
    examples = collections.OrderedDict(x=federation.x[client_id], y=federation.y[client_id])
    if vectorized:
      return ldp.LdpClientArrays(examples, training.batch_size, epsilon, seed)
    data = tf.data.Dataset.from_tensor_slices(examples)
    data = data.batch(training.batch_size)  # the process runs local_epochs passes
    return ldp.make_client_input(data, epsilon, seed)

  return make


def run_training(run: str, mechanism: str, federation: UserFederation,
                 epsilons: np.ndarray, training: ApesTraining, run_seed: int,
                 output_dir: str, accountant: Optional[ShuffleRoundLedger],
                 evaluate_fn: Optional[Callable[[Any], dict]] = None,
                 eval_every: int = 1, checkpoint_every: int = 5, progress: bool = True,
                 insecure_reproducible_noise: bool = False, restart: bool = False,
                 model_seed: int = 0, client_execution: str = "auto"):
  """Trains (or resumes) one run; returns its metric rows.

  Checkpoints hold the model, the server optimizer, the round number, the
  ledger's round count and the secret randomness, so a resumed run continues
  exactly (:class:`~tff_idp.engine.driver.RoundDriver`). ``client_execution``:
  :func:`tff_idp.apes.process.build_apes_driver_process`'s ("auto":
  vectorized for the logistic regression); it is not part of the run's
  fingerprint, since every execution gives the same round within float
  tolerance, so a run may resume under another.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_idp import apes as ldp  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.engine.driver import RoundDriver  # pylint: disable=g-import-not-at-top
  from tff_idp.engine import tff_composition  # pylint: disable=g-import-not-at-top
  d, c = federation.num_features, federation.num_classes

  def keras_builder():
    return models.build_logistic_regression(d, c, seed=model_seed)

  spec = collections.OrderedDict(x=tf.TensorSpec([None, d], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(keras_builder, spec)
  num_params = d * c + c
  sparse = mechanism in ldp.SPARSE_SELECTION
  keep = keep_count(training, num_params) if sparse else None
  process = ldp.build_apes_driver_process(
      model_fn, mechanism=mechanism, clip=training.clip, epsilons=epsilons, keep=keep,
      client_learning_rate=training.client_learning_rate,
      server_learning_rate=training.server_learning_rate,
      proximal_strength=training.proximal_strength, local_epochs=training.local_epochs,
      num_reports=federation.num_users, client_execution=client_execution)
  vectorized = isinstance(getattr(process, "cohort_update", None), ldp.VectorizedLdpUpdate)
  randomness = PrivacyRandomness.for_run(run_seed, f"apes/{run}", insecure_reproducible_noise)
  sampler = PoissonClientSampler(federation.client_ids,
                                 np.ones(federation.num_users), randomness.sampling_seed())
  hyper = dataclasses.asdict(training)
  driver = RoundDriver(
      # The client work's seed counter starts at the run's secret (issue 48).
      process=tff_composition.WithSeedCounterStart(process, randomness.seed_counter_start()),
      sampler=sampler,
      client_input_fn=user_input_fn(federation, epsilons, training, randomness, vectorized),
      output_dir=output_dir, evaluate_fn=evaluate_fn, eval_every=eval_every,
      checkpoint_every=checkpoint_every, progress=progress,
      run_fingerprint=fingerprint_lib.run_fingerprint(
          calibration={"mechanism": mechanism, "keep": keep,
                       **({"selection": ldp.SPARSE_SELECTION[mechanism]} if sparse else {}),
                       "epsilons": fingerprint_lib.mapping_digest({"eps": np.asarray(epsilons)})},
          training=hyper,
          data={"records": fingerprint_lib.records_identity(federation.x, federation.y)},
          model=fingerprint_lib.keras_model_identity(keras_builder()),
          run_seed=run_seed, insecure_reproducible_noise=insecure_reproducible_noise),
      ledger=accountant, privacy_randomness=randomness, restart=restart)
  _, rows = driver.run(training.rounds)
  return rows


BOUNDS = ("per_user", "fmt22_max", "eon_paper")


@dataclasses.dataclass(frozen=True)
class ApesAccounting:
  """What the ledger charges: δ_s per shuffled coordinate, the user-level δ, the bound."""
  shuffle_delta: float = 1e-8
  delta: float = 1e-4
  bound: str = "per_user"

  def __post_init__(self):
    if not 0 < self.shuffle_delta < 1 or not 0 < self.delta < 1:
      raise ValueError("shuffle_delta and delta must lie in (0, 1).")
    if self.bound not in BOUNDS:
      raise ValueError(f"bound={self.bound!r}; choose from {', '.join(BOUNDS)}.")


def _no_shuffle_ledger(epsilon0: float, d: int, rounds: int, accounting: ApesAccounting,
                       paper_user_level: float) -> dict:
  """LDP without shuffling: ε^c is the local ε0 itself; user level composes d·t pure-ε0 releases."""
  cumulative = [composition.exact(epsilon0, 0.0, d * t, accounting.delta).epsilon
                for t in range(1, rounds + 1)]
  return {"eps_c": float(epsilon0), "delta_c": 0.0, "amplified": False,
          "reason": "no shuffle: the server sees each user's reports",
          "eps_uc_round": cumulative[0], "eps_uc_round_paper": float(paper_user_level),
          "eps_uc_total": cumulative[-1], "eps_uc_cumulative": cumulative}


def _shuffle_ledger(epsilons: np.ndarray, d: int, keep: Optional[int], rounds: int,
                    accounting: ApesAccounting, bound: str,
                    selection: Optional[str] = None) -> dict:
  ledger = ApesLedger(epsilons, d, accounting.shuffle_delta, accounting.delta, b=keep,
                      bound=bound, selection=selection)
  r = ledger.round_account()
  cumulative = ledger.history(rounds)
  claims = {} if r.epsilon_ul_published is None else {
      "eps_ul_paper_min": r.epsilon_ul_published[0],
      "eps_ul_paper_max": r.epsilon_ul_published[1],
      "eps_c_claimed": r.epsilon_c_claimed}
  return {"eps_ul_min": r.epsilon_ul[0], "eps_ul_max": r.epsilon_ul[1], **claims,
          "eps_c": r.epsilon_c, "delta_c": r.delta_c, "amplified": r.amplified,
          "reason": r.reason, "bound": bound, "bound_label": r.label,
          "selection": selection, "compositions_per_round": r.k,
          "eps_uc_round": r.user_level.epsilon,
          "eps_uc_round_paper": r.user_level_paper.epsilon,
          "eps_uc_round_pld": (r.user_level_pld.epsilon if r.user_level_pld else None),
          "eps_uc_total": cumulative[-1], "eps_uc_cumulative": cumulative,
          "levels": r.levels}


def framework_ledger(framework: str, epsilons: np.ndarray, d: int, keep: int, rounds: int,
                     accounting: ApesAccounting) -> dict:
  """The ledger row of one framework (APES paper Tables 3-4 columns).

  ε^{ul}: the sound local user-level budget (d·ε_i; b·ε_i for S-APES's
  random b-subset; d·ε_i for the paper's post-top-b, whose published b·ε_i
  is ``eps_ul_paper_*``). ε^c, δ^c: one shuffled round, per coordinate.
  ε^{uc}: user level at ``accounting.delta`` after one round and after
  ``rounds`` rounds, by optimal composition of (ε^c, δ^c) over the
  coordinates that carry a user's data (d; b for S-APES; d unamplified
  coordinates for post-top-b) and the rounds; ``eps_uc_round_paper`` is the
  paper's advanced composition (Prop. 1 with 2b for S-APES; d·ε for PLDP,
  as its table). APES and S-APES use ``accounting.bound`` and also carry the
  EoN value as published (``eps_c_eon_paper``) for comparison with the paper.
  """
  eps = np.asarray(epsilons, np.float64)
  lo, hi = float(eps.min()), float(eps.max())
  row = {"eps_local_min": lo, "eps_local_max": hi}
  inf = float("inf")
  if framework == "nonprivate":
    return {**row, "eps_ul_min": inf, "eps_ul_max": inf, "eps_c": inf, "delta_c": 0.0,
            "amplified": False, "reason": "no privacy", "eps_uc_round": inf,
            "eps_uc_round_paper": inf, "eps_uc_total": inf,
            "eps_uc_cumulative": [inf] * rounds}
  if framework == "ldp_min":
    paper = composition.advanced(lo, 0.0, d, delta_total=accounting.delta).epsilon
    return {**row, "eps_ul_min": d * lo, "eps_ul_max": d * lo,
            **_no_shuffle_ledger(lo, d, rounds, accounting, paper)}
  if framework == "pldp":
    return {**row, "eps_ul_min": d * lo, "eps_ul_max": d * hi,
            **_no_shuffle_ledger(hi, d, rounds, accounting, d * hi)}
  if framework == "unis":
    return {**row, "eps_ul_min": d * lo, "eps_ul_max": d * hi,
            **_shuffle_ledger(eps, d, None, rounds, accounting, "fmt22_max")}
  b = keep if framework in SAPES_SELECTION else None
  selection = SAPES_SELECTION.get(framework)
  out = {**row, **_shuffle_ledger(eps, d, b, rounds, accounting, accounting.bound, selection)}
  # EoN as published, per coordinate (the same for APES and both S-APES, as in
  # the paper's tables), and the user level the paper would derive from it.
  published = (out if accounting.bound == "eon_paper" and selection != "top_b" else
               _shuffle_ledger(eps, d, b, 1, accounting, "eon_paper",
                               None if b is None else "random"))
  out["eps_c_eon_paper"] = published["eps_c"]
  out["eps_uc_round_eon_paper"] = published["eps_uc_round"]
  return out


def federation_line(federation: UserFederation, samples_per_user: int, distribution: str,
                    epsilons: np.ndarray, training: ApesTraining,
                    accounting: "ApesAccounting") -> str:
  """The line a run prints before training: the users, their ε range and the settings."""
  return (f"federation: {federation.num_users} users × {samples_per_user} records "
          f"({federation.name}), d = {federation.num_params}, ε ~ {distribution} "
          f"[{epsilons.min():.3g}, {epsilons.max():.3g}], C = {training.clip:g}, "
          f"T = {training.rounds}, {training.local_epochs} local epochs, "
          f"μ = {training.proximal_strength:g}, bound: {accounting.bound}, "
          f"δ_s = {accounting.shuffle_delta:.2g}, δ = {accounting.delta:g}")


def default_shuffle_delta(delta: float, d: int, rounds: int) -> float:
  """δ_s = δ/(10·d·T), one significant digit (rounded down).

  A user reports d coordinates per round (2b ≤ d for S-APES), each shuffled
  with failure probability δ_s, so T rounds spend d·T·δ_s of the user-level
  δ; this leaves 90% of δ to the composition's δ'.
  """
  raw = delta / (10.0 * d * rounds)
  exponent = math.floor(math.log10(raw))
  return float(f"{math.floor(raw / 10 ** exponent)}e{exponent}")


class ApesRuns:
  """:class:`~tff_idp.engine.run_template.FamilyRuns` of APES: one spec per training run.

  A run is trained once and read by every framework that needs it (PLDP and
  UniS share the Laplace run); its ledger is that of the first such
  framework in ``frameworks``.
  """

  def __init__(self, frameworks: Sequence[str], federation: UserFederation,
               epsilons: np.ndarray, training: ApesTraining, accounting: ApesAccounting,
               output_dir: str, evaluate: Callable[[Any], dict], eval_every: int,
               checkpoint_every: int, progress: bool, insecure_reproducible_noise: bool,
               restart: bool, client_execution: str = "auto"):
    self.frameworks, self.federation, self.epsilons = list(frameworks), federation, epsilons
    self.training, self.accounting, self.output_dir = training, accounting, output_dir
    self.evaluate, self.eval_every, self.checkpoint_every = evaluate, eval_every, checkpoint_every
    self.progress, self.insecure, self.restart = progress, insecure_reproducible_noise, restart
    self.client_execution = client_execution
    self.keep = keep_count(training, federation.num_params)
    self._ledgers: dict = {}

  def runs(self) -> list[str]:
    """The training runs the frameworks need, once each, in order."""
    return list(dict.fromkeys(FRAMEWORKS[f][0] for f in self.frameworks))

  def ledger(self, framework: str) -> dict:
    """The framework's ledger row (:func:`framework_ledger`), computed once."""
    if framework not in self._ledgers:
      self._ledgers[framework] = framework_ledger(
          framework, self.epsilons, self.federation.num_params, self.keep,
          self.training.rounds, self.accounting)
    return self._ledgers[framework]

  def begin_spec(self, run: str) -> None:
    """The run's local ε (b·ε for S-APES) and its ledger."""
    framework = next(f for f in self.frameworks if FRAMEWORKS[f][0] == run)
    mechanism = FRAMEWORKS[framework][1]
    run_eps = run_epsilons(framework, self.epsilons)
    sparse = framework in SAPES_SELECTION
    if sparse:
      # The drawn ε is per coordinate; S-APES spends it on each of the b kept
      # coordinates, so the user's budget handed to Alg. 2 is b·ε (the paper's
      # Table 3 lists ε^{ul} = b·ε for S-APES).
      run_eps = run_eps * self.keep
    ledger = self.ledger(framework)
    self._mechanism, self._run_eps = mechanism, run_eps
    self._accountant = None if mechanism == "none" else ShuffleRoundLedger(
        ledger["eps_c"], ledger["eps_uc_round"], ledger["eps_uc_cumulative"],
        ShuffledLdpDpEvent(tuple(float(e) for e in run_eps), self.federation.num_params,
                           self.keep if sparse else None,
                           SAPES_SELECTION.get(framework, "all")))

  def run_seed(self, run: str, seed: int) -> SeedResult:
    """Trains (or resumes) the run in ``output_dir/<run>``."""
    rows = run_training(
        run, self._mechanism, self.federation, self._run_eps, self.training, seed,
        os.path.join(self.output_dir, run), self._accountant, self.evaluate,
        eval_every=self.eval_every, checkpoint_every=self.checkpoint_every,
        progress=self.progress, insecure_reproducible_noise=self.insecure,
        restart=self.restart, client_execution=self.client_execution)
    history = [(int(r["round"]), float(r["eval_accuracy"])) for r in rows
               if r.get("eval_accuracy") not in (None, "")]
    return SeedResult(history[-1][1] if history else float("nan"), history)

  def end_spec(self, run: str, results: Sequence[SeedResult]) -> dict:
    return {"label": run, "run": run, "history": results[0].history}


def run_frameworks(frameworks: Sequence[str], federation: UserFederation,
                   epsilons: np.ndarray, training: ApesTraining, accounting: ApesAccounting,
                   run_seed: int, output_dir: str, eval_every: int = 1,
                   checkpoint_every: int = 2, progress: bool = True,
                   insecure_reproducible_noise: bool = False,
                   restart: bool = False, client_execution: str = "auto") -> list[dict]:
  """Trains every run the frameworks need (once each) and returns one row per framework.

  Each row: the framework's ledger (:func:`framework_ledger`), its run's
  final accuracy (``accuracy``, and ``mean_accuracy`` of the one seed) and
  accuracy per round. Runs live in ``output_dir/<run>`` and resume from
  their checkpoints when rerun with the same settings.
  """
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.engine.evaluation import keras_evaluator  # pylint: disable=g-import-not-at-top
  d, c = federation.num_features, federation.num_classes
  evaluate = keras_evaluator(lambda: models.build_logistic_regression(d, c),
                             federation.test_x, federation.test_y, batch_size=4096)
  family = ApesRuns(frameworks, federation, epsilons, training, accounting, output_dir,
                    evaluate, eval_every, checkpoint_every, progress,
                    insecure_reproducible_noise, restart, client_execution)
  by_run = {row["run"]: row for row in run_grid(family.runs(), [run_seed], family)}
  rows = []
  for framework in frameworks:
    run, mechanism = FRAMEWORKS[framework]
    of_run = by_run[run]
    rows.append({"framework": framework, "label": LABELS[framework], "run": run,
                 "mechanism": mechanism, **family.ledger(framework),
                 "accuracy": of_run["mean_accuracy"], "history": of_run["history"],
                 **{k: of_run[k] for k in ("final_accuracies", "mean_accuracy",
                                           "std_accuracy")}})
  return rows


def _fmt(v: Any, digits: int = 3) -> str:
  if v is None:
    return "—"
  v = float(v)
  if np.isinf(v):
    return "∞"
  if v >= 100:
    return f"{v:,.0f}"
  return f"{v:.{digits}g}"


def format_table(rows: Sequence[dict], training: ApesTraining,
                 accounting: ApesAccounting) -> str:
  """The Table 3/4-style table: one-round ε beside T-round ε^{uc} and accuracy."""
  t = training.rounds
  cells = []
  for r in rows:
    ul = _range(r["eps_ul_min"], r["eps_ul_max"])
    claim = "‡" if r.get("selection") == "top_b" else ""
    if claim:
      ul += f" (paper: {_range(r['eps_ul_paper_min'], r['eps_ul_paper_max'])}‡)"
    no_gain = str(r.get("reason", "")).startswith("no amplification")
    eps_c = _fmt(r["eps_c"], 4) + (" (no amplification)" if no_gain else
                                   " (none certified)" if claim else "")
    cells.append([r["label"], ul, eps_c, _fmt(r.get("eps_c_eon_paper"), 4),
                  _fmt(r["eps_uc_round"]), f"{_fmt(r.get('eps_uc_round_paper'))}{claim}",
                  _fmt(r["eps_uc_total"]), f"{100 * r['accuracy']:.2f}"])
  lines = [report.markdown_table(
      ["framework", "ε^{ul} (local, per user)", "ε^c (1 round, per coordinate)",
       "ε^c EoN as published", "ε^{uc} 1 round", "ε^{uc} 1 round (paper's composition)",
       f"ε^{{uc}} {t} rounds", f"accuracy after {t} rounds (%)"], cells)]
  lines.append(
      f"\n\nε^c: one shuffled round, per coordinate, at δ_s = {accounting.shuffle_delta:g} "
      f"for APES/S-APES from the {accounting.bound!r} bound; UniS is FMT22 at max ε, as "
      "published; LDP-min and PLDP are not shuffled (ε^c = the local ε). ε^{uc}: user level "
      f"at δ = {accounting.delta:g}, optimal composition over the coordinates that carry a "
      "user's data (d; b for S-APES's random b-subset) and, in the T-round column, over "
      "the rounds. The paper's tables pair the one-round ε with the accuracy after all "
      "rounds; both are shown here."
      + ("\n‡ S-APES with the paper's post-top-b selection: the kept set depends on all d "
         "perturbed coordinates, so the sound local ε is d·ε (its exact density exceeds the "
         "published b·ε) and no shuffle amplification is certified; its sound ε^c and "
         "ε^{uc} are those of d unshuffled coordinates. The paper's b·ε and Prop. 1 "
         "values (‡) are claims, not guarantees."
         if any(r.get("selection") == "top_b" for r in rows) else ""))
  return "\n".join(lines)


def _range(lo: Optional[float], hi: Optional[float]) -> str:
  """"∞", one value, or "lo–hi" for a ledger's min/max pair."""
  if hi is None or np.isinf(hi):
    return "∞"
  return _fmt(lo) if lo == hi else f"{_fmt(lo)}–{_fmt(hi)}"


def plot(rows: Sequence[dict], path: str) -> None:
  """Accuracy per round, one line per training run (labelled by its frameworks)."""
  names: dict = {}
  for r in rows:
    names.setdefault(r["run"], []).append(r["label"])
  series = [(" / ".join(names.pop(r["run"])), r["history"]) for r in rows if r["run"] in names]
  with report.figure(path, figsize=(6.5, 4.2)) as (ax,):
    report.plot_histories(ax, series, ylabel="test accuracy (%)", percent=True,
                          integer_x=True)


def write_summary(rows: Sequence[dict], training: ApesTraining, accounting: ApesAccounting,
                  output_dir: str, config: Optional[dict] = None,
                  privacy_warning: Optional[str] = None) -> str:
  """Writes ``summary.md``, ``summary.json`` and ``accuracy.png``; returns the table."""
  table = format_table(rows, training, accounting)
  os.makedirs(output_dir, exist_ok=True)
  with open(os.path.join(output_dir, "summary.md"), "w") as f:
    f.write(table + "\n")
  summary_lib.write_summary(output_dir, "apes", config or {},
                            [dict(r, label=LABELS[r["framework"]]) for r in rows],
                            privacy_warning=privacy_warning)
  plot(rows, os.path.join(output_dir, "accuracy.png"))
  return table
