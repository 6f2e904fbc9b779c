"""The main job's rounds on a small model: rounds/s against plain Keras loops, and where the time goes (issue 23, item 3).

The workload is the main job's (``experiments.idp_fedavg`` defaults): the
embedded Synthetic IID federation (700 clients, d = 60, 10 classes),
multinomial logistic regression (610 parameters), c = 10 expected clients per
round, 5 local epochs of batch 16 at SGD 0.6, one IDP-SAMPLE run spec
(34-43-23 at ε 1-2-3), evaluation every 2 rounds, a checkpoint every 10.

Entries, interleaved (each pass runs every entry once, in rotated order):

* ``driver, client_execution=tff``, ``=in_process`` and ``=vectorized`` (issue
  35: the whole cohort at once, what ``auto`` picks now): the library's round
  loop (``tff_idp.engine.driver.RoundDriver`` through the family's run
  template), every stage timed by a plug-in (:class:`StageTimer`) that wraps
  the driver's parts: sampling, building the client pipelines, ``next``
  (in process: client training and the TFF server step apart), the ledger,
  evaluation, and the rest (metrics files, checkpoints, progress);
* ``Keras model.fit loop``: per round, the same number of clients (the
  driver's cohort sizes, drawn from the same federation), each trained by
  ``model.set_weights`` + ``model.fit`` on the same pipeline, then the mean
  delta applied; no privacy, no evaluation;
* ``plain tf.function loop``: the same, with one traced training loop per
  client instead of ``model.fit`` (the leanest plain-TensorFlow round).

Rounds/s counts training rounds only for the Keras loops, and the whole
driver round (what a user waits for) for the driver entries, with the
evaluation share reported apart.

  python -m benchmarks.bench_small_model_rounds [--rounds=20] [--passes=3]
"""
from __future__ import annotations

import collections
import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks import arguments

from tff_idp.engine.plugins import RunPlugin  # imports no TensorFlow

RESULTS = os.path.join(os.path.dirname(__file__), "results", "small_model_rounds.json")
STAGES = ("sample_s", "client_inputs_s", "clients_s", "server_step_s", "next_s",
          "ledger_s", "evaluation_s")


class StageTimer(RunPlugin):
  """A run plug-in that times the driver's stages (wraps its parts in ``attach``)."""

  def __init__(self):
    self.rounds: list[dict] = []
    self._current: dict = {}

  def _timed(self, fn, key):
    def call(*args, **kwargs):
      t0 = time.perf_counter()
      try:
        return fn(*args, **kwargs)
      finally:
        self._current[key] = self._current.get(key, 0.0) + time.perf_counter() - t0
    return call

  def attach(self, driver, plan, run_name, seed) -> None:
    del plan, run_name, seed
    sampler = driver.sampler
    sample = sampler.sample

    def begin_round():
      self._current = {}
      self.rounds.append(self._current)
      return sample()

    sampler.sample = self._timed(begin_round, "sample_s")
    driver.client_input_fn = self._timed(driver.client_input_fn, "client_inputs_s")
    process = driver.process
    inner = getattr(process, "_process", process)  # the secret-noise wrapper's process
    if hasattr(inner, "_train_clients"):
      inner._train_clients = self._timed(inner._train_clients, "clients_s")  # pylint: disable=protected-access
      inner.server_step = self._timed(inner.server_step, "server_step_s")
    process.next = self._timed(process.next, "next_s")
    if driver.ledger is not None:
      for name in ("begin_round", "end_round", "metrics"):
        setattr(driver.ledger, name, self._timed(getattr(driver.ledger, name), "ledger_s"))
    driver.evaluate_fn = self._timed(driver.evaluate_fn, "evaluation_s")


def _config(output_dir: str, rounds: int, execution: str):
  from tff_idp.idp_fedavg import config as config_lib  # pylint: disable=g-import-not-at-top
  return config_lib.TrainingConfig(
      budgets=[1.0, 2.0, 3.0], ratios=[0.34, 0.43, 0.23], runs=["34-43-23"], seeds=[0],
      rounds=rounds, clients_per_round=10, local_epochs=5, batch_size=16,
      client_learning_rate=0.6, server_learning_rate=1.0, client_optimizer="sgd",
      delta=1e-4, accountant="rdp", output_dir=output_dir, eval_every=2,
      checkpoint_every=10, progress=False, initial_clip=2.5,
      client_execution=execution)


class Federation:
  """The main job's federation, model and evaluation data."""

  def __init__(self):
    from datasets import synthetic  # pylint: disable=g-import-not-at-top
    from tff_idp import models  # pylint: disable=g-import-not-at-top
    data_config = synthetic.SyntheticConfig(num_clients=700, iid=True, seed=0,
                                            num_features=60, num_classes=10)
    self.train, _, central_test = synthetic.load_synthetic(data_config)
    test = next(iter(central_test.batch(10**7)))
    self.test_x, self.test_y = test["x"].numpy(), test["y"].numpy()
    self.builder = models.builder_for((60,), 10, "logreg")
    self.model_fn = models.tff_model_fn(self.builder, models.input_spec_for((60,)))
    self.num_parameters = int(sum(np.prod(v.shape) for v in self.builder().trainable_weights))


def driver_entry(fed: Federation, rounds: int, execution: str) -> dict:
  """One run of the main job's round loop; per-round stage seconds from :class:`StageTimer`."""
  from tff_idp.idp_fedavg import runs as runs_lib  # pylint: disable=g-import-not-at-top
  timer = StageTimer()
  with tempfile.TemporaryDirectory() as tmp:
    t0 = time.perf_counter()
    runs_lib.run_all(_config(tmp, rounds, execution), fed.train, fed.model_fn, fed.builder,
                     fed.test_x, fed.test_y, plugins=[timer])
    wall = time.perf_counter() - t0
    # Round seconds are a diagnostic column (diagnostics.csv), with the cohort size.
    with open(os.path.join(tmp, "34-43-23", "seed0", "diagnostics.csv")) as f:
      header, *lines = [line.strip().split(",") for line in f if line.strip()]
    seconds = [float(row[header.index("seconds")]) for row in lines]
    sampled = [int(float(row[header.index("clients_sampled")])) for row in lines]
  stages = {key: [r.get(key, 0.0) for r in timer.rounds] for key in STAGES}
  return {"round_s": seconds, "cohort_sizes": sampled, "run_wall_s": wall,
          **{key: values for key, values in stages.items()}}


def keras_loop_entry(fed: Federation, cohort_sizes, use_fit: bool, seed: int = 0) -> dict:
  """Plain FedAvg rounds in Keras over the same cohort sizes (no privacy, no evaluation)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = fed.builder()
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  optimizer = tf.keras.optimizers.SGD(0.6)
  model.compile(optimizer=optimizer, loss=loss_fn)

  @tf.function
  def train_loop(dataset):
    # iter(): a while loop over an iterator (a bare ``for batch in dataset``
    # becomes a dataset reduce, ~10 ms slower per call here).
    for batch in iter(dataset):
      with tf.GradientTape() as tape:
        loss = loss_fn(batch["y"], model(batch["x"], training=True))
      optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                    model.trainable_variables))

  rng = np.random.default_rng(seed)
  ids = fed.train.client_ids
  round_s = []
  for r, size in enumerate(cohort_sizes):
    t0 = time.perf_counter()
    start = [w.numpy() for w in model.weights]
    deltas = []
    for cid in rng.choice(ids, size=size, replace=False):
      model.set_weights(start)
      ds = (fed.train.create_tf_dataset_for_client(cid)
            .shuffle(512, seed=r, reshuffle_each_iteration=True).repeat(5).batch(16))
      if use_fit:
        model.fit(ds.map(lambda e: (e["x"], e["y"])), epochs=1, verbose=0)
      else:
        train_loop(ds)
      deltas.append([w.numpy() - s for w, s in zip(model.weights, start)])
    mean = [np.mean(d, axis=0) for d in zip(*deltas)] if deltas else [0.0 for _ in start]
    model.set_weights([s + m for s, m in zip(start, mean)])
    round_s.append(time.perf_counter() - t0)
  return {"round_s": round_s}


def main(rounds: int = 20, passes: int = 3, out_path=None) -> dict:
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  t_start = time.perf_counter()
  fed = Federation()
  names = ["driver, client_execution=tff", "driver, client_execution=in_process",
           "driver, client_execution=vectorized", "Keras model.fit loop",
           "plain tf.function loop"]
  res = {"config": {"rounds": rounds, "passes": passes, "clients": 700,
                    "clients_per_round": 10, "local_epochs": 5, "batch": 16,
                    "parameters": fed.num_parameters, "cpu_count": os.cpu_count(),
                    "load_avg_at_start": os.getloadavg()},
         "passes": {name: [] for name in names}}
  cohort_sizes = None
  with runtime.ExecutionRuntime(install_signal_handlers=False):
    for p in range(passes):
      order = names[p % len(names):] + names[:p % len(names)]
      for name in order:
        if name.startswith("driver"):
          entry = driver_entry(fed, rounds, name.rpartition("=")[2])
          cohort_sizes = cohort_sizes or entry["cohort_sizes"]
        else:
          entry = keras_loop_entry(fed, cohort_sizes or [10] * rounds,
                                   use_fit=name.startswith("Keras"), seed=p)
        res["passes"][name].append(entry)
        print(f"  pass {p} {name}: {np.mean(entry['round_s'][1:]) * 1000:.0f} ms/round",
              flush=True)
  res["load_avg_at_end"] = os.getloadavg()
  res["summary"] = summarize(res)
  res["total_wall_s"] = time.perf_counter() - t_start
  _save(res, out_path)
  return res


def summarize(res: dict) -> dict:
  """Per entry: rounds/s and stage shares, from each pass's mean round (its first round,
  which traces, left out), the median over passes; the range over passes.

  Means, not medians, within a pass: evaluation runs every 2nd round, and means
  of the stages add up to the mean round.
  """
  out = {}
  for name, entries in res["passes"].items():
    per_pass = [float(np.mean(e["round_s"][1:] or e["round_s"])) for e in entries]
    row = {"round_ms": 1000 * float(np.median(per_pass)),
           "rounds_per_s": 1 / float(np.median(per_pass)),
           "rounds_per_s_range": [1 / max(per_pass), 1 / min(per_pass)]}
    if name.startswith("driver"):
      for key in STAGES:
        row[key.replace("_s", "_ms")] = 1000 * float(np.median(
            [np.mean(e[key][1:] or e[key]) for e in entries]))
      row["rest_ms"] = row["round_ms"] - sum(row[k.replace("_s", "_ms")] for k in STAGES
                                             if k not in ("clients_s", "server_step_s"))
    out[name] = row
  return out


def _save(res: dict, path) -> None:
  if path:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(res, f, indent=1)


def table(res: dict) -> str:
  c = res["config"]
  s = res["summary"]
  fit = s["Keras model.fit loop"]["rounds_per_s"]
  loop = s["plain tf.function loop"]["rounds_per_s"]
  lines = [f"{c['clients']} clients, c = {c['clients_per_round']}, {c['parameters']} parameters "
           f"(logreg), {c['local_epochs']} epochs of batch {c['batch']}; {c['rounds']} rounds × "
           f"{c['passes']} interleaved passes, {c['cpu_count']} cores, load "
           f"{c['load_avg_at_start'][0]:.1f} at start", "",
           "| entry | ms/round | rounds/s (range over passes) | × model.fit loop | × tf.function loop |",
           "|---|---:|---:|---:|---:|"]
  for name, row in s.items():
    lo, hi = row["rounds_per_s_range"]
    lines.append(f"| {name} | {row['round_ms']:.0f} | {row['rounds_per_s']:.2f} "
                 f"({lo:.2f}–{hi:.2f}) | {row['rounds_per_s'] / fit:.2f}× | "
                 f"{row['rounds_per_s'] / loop:.2f}× |")
  drivers = [n for n in s if n.startswith("driver")]
  lines += ["", "| driver stage, ms per round (medians) | " +
            " | ".join(n.partition("=")[2] for n in drivers) + " |",
            "|---|" + "---:|" * len(drivers)]
  labels = [("sample_s", "sampling the cohort"), ("client_inputs_s", "building client pipelines"),
            ("next_s", "`process.next`"),
            # "in process" covers the vectorized entry too (its cohort trains in this process).
            ("clients_s", "… of which client training (in process)"),
            ("server_step_s", "… of which the TFF server step (in process)"),
            ("ledger_s", "privacy ledger"),
            ("evaluation_s", "evaluation (every 2nd round, averaged over rounds)"),
            ("rest_s", "rest: metrics files, checkpoints, progress")]
  for key, label in labels:
    vals = [row.get(key.replace("_s", "_ms"), 0.0) for n, row in s.items()
            if n.startswith("driver")]
    lines.append(f"| {label} | " + " | ".join(f"{v:.1f}" for v in vals) + " |")
  lines.append(f"\ntotal {res['total_wall_s']:.0f} s")
  return "\n".join(lines)


def _parse(argv) -> dict:
  return arguments.parse(argv, "benchmarks.bench_small_model_rounds", __doc__,
                         ints=("rounds", "passes"))


if __name__ == "__main__":
  results = main(**_parse(sys.argv[1:]), out_path=RESULTS)
  print(table(results))
  print(f"written to {RESULTS}")
