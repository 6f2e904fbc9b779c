"""Large cohorts: clients/s of the vectorized client execution against per-client ones (issue 35).

A 100,000-client federation (each client 8 examples of 60 features, 10
classes, drawn from the client's own seed when it is sampled), IDP-FedAvg
with DP (σ = 1, adaptive clipping), 1 local epoch of batch 16 (one local step
per client) at SGD 0.1, for the logistic regression (610 parameters) and the
MLP (64 hidden units, 4,554 parameters). Per cohort size c, entries:

* ``tff``: every client a TFF client computation (what ``auto`` picked for
  these models before issue 35);
* ``in_process``: one traced ``tf.function`` call per client, 2 model copies;
* ``vectorized``: the whole cohort as one computation per chunk
  (``client_execution="vectorized"``, what ``auto`` picks now);
* ``plain tf.function loop``: per client, ``set_weights`` and one traced
  Keras training loop over the client's pipeline, then the mean delta; no
  privacy, no TFF (the leanest per-client TensorFlow).

A round is what the driver times: building the c client inputs (pipelines,
or ``ClientArrays`` for the vectorized entry) plus ``process.next`` (the
clients, then the server step: clipping, noise, server optimizer; for the
vectorized entry the DP mean clips and sums the stacked cohort in process and
noises the sums in TFF, ``AdaptiveClipDPMeanFactory.create_presummed``). The cohort's arrays are drawn before the clock starts. Each pass
runs one round of every entry, in rotated order; the first round of each
entry (tracing) is a warm-up. Medians over passes, ranges in brackets; the
load average is printed at the start and the end.

  python -m benchmarks.bench_large_cohorts [--passes=3] [--cohorts=10,100,1000,10000]
      [--per_client_max=1000]

``--per_client_max``: the per-client entries run up to this cohort size (a
10,000-client per-client round takes a minute or more on 2 cores). Results go
to ``benchmarks/results/large_cohorts.json`` (default cohorts) or
``large_cohorts_c<cohorts>.json``.
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time

import numpy as np

from benchmarks import arguments

RESULTS_DIR = os.path.join(os.path.dirname(__file__), "results")
DEFAULT_COHORTS = (10, 100, 1000, 10_000)


def results_path(cohorts=DEFAULT_COHORTS) -> str:
  """``large_cohorts.json`` for the default cohorts, ``large_cohorts_c<c>_<c>....json`` else."""
  tag = "" if tuple(cohorts) == DEFAULT_COHORTS else "_c" + "_".join(map(str, cohorts))
  return os.path.join(RESULTS_DIR, f"large_cohorts{tag}.json")
FEDERATION = 100_000
EXAMPLES, FEATURES, CLASSES, BATCH, EPOCHS, LR = 8, 60, 10, 16, 1, 0.1
ENTRIES = ("tff", "in_process", "vectorized", "plain tf.function loop")


def _client_arrays(client_id: int) -> collections.OrderedDict:
  rng = np.random.default_rng(client_id)
  return collections.OrderedDict(
      x=rng.normal(size=(EXAMPLES, FEATURES)).astype(np.float32),
      y=rng.integers(0, CLASSES, EXAMPLES).astype(np.int32))


def _builders():
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  return {"logreg": models.builder_for((FEATURES,), CLASSES, "logreg"),
          "mlp": models.builder_for((FEATURES,), CLASSES, "mlp")}


def _process(builder, execution: str, cohort: int):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.idp_fedavg import process as process_lib  # pylint: disable=g-import-not-at-top
  model_fn = models.tff_model_fn(builder, models.input_spec_for((FEATURES,)))
  return process_lib.build_idp_fedavg_driver_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(LR),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), noise_multiplier=1.0,
      expected_clients_per_round=float(cohort),
      aggregator_kwargs=dict(clipped_count_stddev=max(0.05 * cohort, 1.0)),
      client_execution=execution, parallel_clients=2 if execution == "in_process" else None)


class PlainLoop:
  """Per client: set the weights, one traced Keras training loop, the delta; then the mean."""

  def __init__(self, builder):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self.model = builder()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = tf.keras.optimizers.SGD(LR)
    model = self.model

    @tf.function
    def train_loop(dataset):
      for batch in iter(dataset):
        with tf.GradientTape() as tape:
          loss = loss_fn(batch["y"], model(batch["x"], training=True))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))

    self.train_loop = train_loop

  def round(self, datasets) -> None:
    start = [w.numpy() for w in self.model.weights]
    deltas = []
    for ds in datasets:
      self.model.set_weights(start)
      self.train_loop(ds)
      deltas.append([w.numpy() - s for w, s in zip(self.model.weights, start)])
    self.model.set_weights([s + np.mean(d, axis=0) for s, d in zip(start, zip(*deltas))])


def _inputs(entry: str, arrays, seeds):
  from tff_idp.engine.cohort_arrays import ClientArrays  # pylint: disable=g-import-not-at-top
  clients = [ClientArrays(a, shuffle_seed=s, epochs=EPOCHS, batch_size=BATCH)
             for a, s in zip(arrays, seeds)]
  return clients if entry == "vectorized" else [c.dataset() for c in clients]


def main(passes: int = 3, cohorts=DEFAULT_COHORTS, per_client_max: int = 1000,
         out_path=None) -> dict:
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top
  t_start = time.perf_counter()
  res = {"config": {"federation": FEDERATION, "examples": EXAMPLES, "features": FEATURES,
                    "batch": BATCH, "epochs": EPOCHS, "passes": passes,
                    "cohorts": list(cohorts), "per_client_max": per_client_max,
                    "cpu_count": os.cpu_count(), "load_avg_at_start": os.getloadavg()},
         "rounds": {}}
  rng = np.random.default_rng(0)
  with runtime.ExecutionRuntime(install_signal_handlers=False):
    builders = _builders()
    runners = {}
    # Build order: Keras models made in a graph (TFF, vectorized) before the eager ones
    # of the in-process copies and the plain loop (the builders' docstring).
    for order in (("tff", "vectorized"), ("in_process",)):
      for name, builder in builders.items():
        for c in cohorts:
          for entry in order:
            if entry != "vectorized" and c > per_client_max:
              continue
            runners[(name, c, entry)] = _process(builder, entry, c)
    for name, builder in builders.items():
      loop = PlainLoop(builder)
      for c in cohorts:
        if c <= per_client_max:
          runners[(name, c, "plain tf.function loop")] = loop
    states = {k: (p.initialize() if not isinstance(p, PlainLoop) else None)
              for k, p in runners.items()}
    for p in range(passes + 1):  # pass 0: warm-up (tracing)
      for c in cohorts:
        ids = rng.choice(FEDERATION, size=c, replace=False)
        arrays = [_client_arrays(int(i)) for i in ids]
        seeds = [int(s) for s in rng.integers(0, 2**31, c)]
        entries = [e for e in ENTRIES if e == "vectorized" or c <= per_client_max]
        k = p % len(entries)
        for entry in entries[k:] + entries[:k]:
          for name in builders:
            key = (name, c, entry)
            t0 = time.perf_counter()
            inputs = _inputs(entry, arrays, seeds)
            if entry == "plain tf.function loop":
              runners[key].round(inputs)
            else:
              states[key] = runners[key].next(states[key], inputs).state
            seconds = time.perf_counter() - t0
            if p > 0:
              res["rounds"].setdefault(f"{name}|{c}|{entry}", []).append(seconds)
            print(f"  pass {p} {name} c={c} {entry}: {seconds:.3f} s "
                  f"({c / seconds:,.0f} clients/s)", flush=True)
    for p in runners.values():
      if hasattr(p, "close"):
        p.close()
  res["load_avg_at_end"] = os.getloadavg()
  res["summary"] = summarize(res)
  res["total_wall_s"] = time.perf_counter() - t_start
  if out_path:
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
      json.dump(res, f, indent=1)
  return res


def summarize(res: dict) -> dict:
  """Per (model, c, entry): median round seconds, clients/s (range), × the per-client entries."""
  out = {}
  for key, rounds in res["rounds"].items():
    name, c, entry = key.split("|")
    median = float(np.median(rounds))
    out[key] = {"model": name, "cohort": int(c), "entry": entry, "round_s": median,
                "clients_per_s": int(c) / median,
                "clients_per_s_range": [int(c) / max(rounds), int(c) / min(rounds)]}
  for row in out.values():
    for ref in ("tff", "in_process", "plain tf.function loop"):
      other = out.get(f"{row['model']}|{row['cohort']}|{ref}")
      row[f"x_{ref}"] = other["round_s"] / row["round_s"] if other else None
  return out


def table(res: dict) -> str:
  c = res["config"]
  lines = [f"federation {c['federation']:,} clients × {c['examples']} examples, "
           f"{c['epochs']} epoch of batch {c['batch']}, DP σ = 1; {c['passes']} interleaved "
           f"passes after a warm-up, {c['cpu_count']} cores, load "
           f"{c['load_avg_at_start'][0]:.1f} at start, {res['load_avg_at_end'][0]:.1f} "
           "at end", "",
           "| model | c | entry | round s | clients/s (range) | × tff | × in_process | "
           "× plain loop |", "|---|---:|---|---:|---:|---:|---:|---:|"]
  fmt = lambda v: "–" if v is None else f"{v:.2f}×"  # noqa: E731
  for row in sorted(res["summary"].values(),
                    key=lambda r: (r["model"], r["cohort"], ENTRIES.index(r["entry"]))):
    lo, hi = row["clients_per_s_range"]
    lines.append(f"| {row['model']} | {row['cohort']:,} | {row['entry']} | "
                 f"{row['round_s']:.3f} | {row['clients_per_s']:,.0f} ({lo:,.0f}–{hi:,.0f}) | "
                 f"{fmt(row['x_tff'])} | {fmt(row['x_in_process'])} | "
                 f"{fmt(row['x_plain tf.function loop'])} |")
  lines.append(f"\ntotal {res['total_wall_s']:.0f} s")
  return "\n".join(lines)


def _parse(argv) -> dict:
  return arguments.parse(argv, "benchmarks.bench_large_cohorts", __doc__,
                         ints=("passes", "per_client_max"), int_lists=("cohorts",))


if __name__ == "__main__":
  parsed = _parse(sys.argv[1:])
  out = results_path(parsed.get("cohorts", DEFAULT_COHORTS))
  results = main(**parsed, out_path=out)
  print(table(results))
  print(f"written to {out}")
