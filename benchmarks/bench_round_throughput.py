"""Round throughput of DP-FedAvg on the paper's 14-layer CNN vs plain Keras (issue 14).

The workload: the IDP-FedAvg paper's 14-layer CNN (``models.build_idp_fedavg_cnn``),
``--clients`` clients × ``--examples`` random examples × ``--epochs`` local
epochs, batch 128, Adam on the clients (lr 1e-3), SGD 1.0 on the server, DP
with noise multiplier 1 and adaptive clipping. Every entry gets the same
synthetic data and the same model, in one Python process:

* ``stock TFF``: ``tff.learning.dp_aggregator`` + ``build_unweighted_fed_avg``
  (run on a default ``ExecutionRuntime``, so its worker ends with the run);
* ``tff_idp default``: ``build_idp_fedavg_process`` in ``ExecutionRuntime()``
  (``max_concurrent_computation_calls=-1``: no limit);
* ``tff_idp, k=1/2/4``: the same with ``max_concurrent_computation_calls=k``;
* ``tff_idp, k=2, intra-op 1``: k=2 with ``TF_NUM_INTRAOP_THREADS=1`` in the
  worker's environment (a thread-setting probe);
* ``Keras ceiling``: ``model.fit`` over the same samples (all clients' data
  pooled), the same epochs and batch size, measured before and after the TFF
  entries.

A round is building the clients' ``tf.data`` pipelines in Python (as the
driver's ``client_input_fn`` does: shuffle → repeat(epochs) → batch) plus
``process.next``; evaluation is not run. samples/s = clients × examples ×
epochs / round seconds, the median of ``--rounds`` rounds after one warm-up
round, each entry on its own ``ExecutionRuntime`` (its own TFF worker).
Worker CPU (from /proc) over wall time shows how many of the cores it kept busy.

The round-time breakdown (tff_idp default runtime) times the dataset
construction, the Python-side serialisation of the client datasets (what TFF
does to send them to the worker), and ``process.next`` at 10/20/30 clients,
with training and with 0 local epochs (the same data shipped, nothing
trained), and fits round time = a + b × clients to each: b with 0 epochs is
the per-client fixed overhead; a is the per-round fixed cost.

  python -m benchmarks.bench_round_throughput [--rounds=3] [--clients=30]
      [--examples=100] [--epochs=5] [--shape=32,32,3] [--breakdown_clients=10,20,30]
      [--no_breakdown]
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time

import numpy as np

BATCH = 128
NUM_CLASSES = 10
NOISE_MULTIPLIER = 1.0
CLIENT_LR = 1e-3
RESULTS = os.path.join(os.path.dirname(__file__), "results", "round_throughput.json")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
  """User + system CPU seconds of a process (all its threads), from /proc."""
  with open(f"/proc/{pid}/stat") as f:
    fields = f.read().rpartition(")")[2].split()
  return (int(fields[11]) + int(fields[12])) / _CLK_TCK


class Workload:
  """The same synthetic data, model and client pipelines for every entry."""

  def __init__(self, clients: int, examples: int, epochs: int, shape, seed: int = 0):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tff_idp import models  # pylint: disable=g-import-not-at-top
    self.clients, self.examples, self.epochs = clients, examples, epochs
    self.shape = tuple(shape)
    rng = np.random.default_rng(seed)
    if self.shape[-1] == 3:  # CIFAR-10 / SVHN style: stored pixels, rescaled in the model
      self.x = rng.integers(0, 256, (clients, examples) + self.shape).astype(np.float32)
      rescale = 1.0 / 255
    else:  # federated EMNIST style: already in [0, 1]
      self.x = rng.random((clients, examples) + self.shape, dtype=np.float32)
      rescale = 1.0
    self.y = rng.integers(0, NUM_CLASSES, (clients, examples)).astype(np.int32)
    self.builder = lambda: models.build_idp_fedavg_cnn(self.shape, NUM_CLASSES,
                                                       rescale=rescale)
    self.spec = collections.OrderedDict(x=tf.TensorSpec((None,) + self.shape, tf.float32),
                                        y=tf.TensorSpec([None], tf.int32))
    self.model_fn = models.tff_model_fn(self.builder, self.spec)

  def datasets(self, n: int, round_num: int, epochs=None):
    """n clients' pipelines for one round, as the driver builds them."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    epochs = self.epochs if epochs is None else epochs
    out = []
    for i in range(n):
      k = i % self.clients
      ds = tf.data.Dataset.from_tensor_slices(
          collections.OrderedDict(x=self.x[k], y=self.y[k]))
      if epochs == 0:  # the same data shipped, nothing trained (repeat(0) after shuffle fails)
        out.append(ds.take(0).batch(BATCH))
        continue
      out.append(ds.shuffle(self.examples, seed=1000 * round_num + i,
                            reshuffle_each_iteration=True).repeat(epochs).batch(BATCH))
    return out

  def samples_per_round(self, n=None) -> int:
    return (self.clients if n is None else n) * self.examples * self.epochs


def build_processes(w: Workload) -> dict:
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_idp.training.process import build_idp_fedavg_process  # pylint: disable=g-import-not-at-top
  adam = lambda: tff.learning.optimizers.build_adam(learning_rate=CLIENT_LR)
  sgd = lambda: tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  stock = tff.learning.algorithms.build_unweighted_fed_avg(
      w.model_fn, client_optimizer_fn=adam(), server_optimizer_fn=sgd(),
      model_aggregator=tff.learning.dp_aggregator(NOISE_MULTIPLIER, w.clients))
  ours = build_idp_fedavg_process(
      w.model_fn, client_optimizer=adam(), server_optimizer=sgd(),
      noise_multiplier=NOISE_MULTIPLIER, expected_clients_per_round=w.clients,
      aggregator_kwargs=dict(noise_seed=0))
  return {"stock": stock, "ours": ours}


def run_rounds(process, w: Workload, rt, n: int, rounds: int, epochs=None,
               serialize: bool = False) -> dict:
  """One warm-up round, then ``rounds`` timed rounds on the current runtime."""
  state = process.initialize()
  build, nxt, ser, worker_cpu, py_cpu = [], [], [], [], []
  for r in range(1 + rounds):
    t0 = time.perf_counter()
    data = w.datasets(n, r, epochs)
    t1 = time.perf_counter()
    if serialize and r > 0:  # what TFF does to each client dataset inside next()
      from tensorflow_federated.python.core.impl.executors import value_serialization  # pylint: disable=g-import-not-at-top
      s0 = time.perf_counter()
      for ds in data:
        value_serialization._serialize_dataset(ds)  # pylint: disable=protected-access
      ser.append(time.perf_counter() - s0)
    c0, p0 = _cpu_s(rt.worker_pid), time.process_time()
    t2 = time.perf_counter()
    state = process.next(state, data).state
    t3 = time.perf_counter()
    c1, p1 = _cpu_s(rt.worker_pid), time.process_time()
    if r > 0:
      build.append(t1 - t0)
      nxt.append(t3 - t2)
      worker_cpu.append((c1 - c0) / (t3 - t2))
      py_cpu.append((p1 - p0) / (t3 - t2))
  rounds_s = [b + x for b, x in zip(build, nxt)]
  out = {
      "clients": n, "epochs": w.epochs if epochs is None else epochs,
      "round_s": float(np.median(rounds_s)), "rounds_s_all": [float(t) for t in rounds_s],
      "dataset_build_s": float(np.median(build)), "next_s": float(np.median(nxt)),
      "worker_cores_busy": float(np.median(worker_cpu)),
      "python_cores_busy_during_next": float(np.median(py_cpu)),
  }
  if ser:
    out["dataset_serialize_s"] = float(np.median(ser))
  return out


def keras_ceiling(w: Workload, reps: int) -> list[float]:
  """Seconds per ``model.fit`` over all clients' samples × epochs (after warm-up)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = w.builder()
  model.compile(optimizer=tf.keras.optimizers.Adam(CLIENT_LR),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
  x = w.x.reshape((-1,) + w.shape)
  y = w.y.reshape(-1)
  model.fit(x, y, epochs=1, batch_size=BATCH, verbose=0)  # trace and warm up
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    model.fit(x, y, epochs=w.epochs, batch_size=BATCH, shuffle=True, verbose=0)
    times.append(time.perf_counter() - t0)
  return times


def _save(res: dict, path) -> None:
  if path:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      json.dump(res, f, indent=1)


def _fit_line(ns, ts) -> dict:
  slope, intercept = np.polyfit(np.asarray(ns, float), np.asarray(ts, float), 1)
  return {"per_client_s": float(slope), "per_round_fixed_s": float(intercept)}


def main(rounds: int = 3, clients: int = 30, examples: int = 100, epochs: int = 5,
         shape=(32, 32, 3), breakdown_clients=(10, 20, 30), breakdown: bool = True,
         out_path=None) -> dict:
  """Runs every entry (and the breakdown); writes partial results to ``out_path``."""
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  from tff_idp import runtime  # pylint: disable=g-import-not-at-top

  t_start = time.perf_counter()
  w = Workload(clients, examples, epochs, shape)
  samples = w.samples_per_round()
  res = {"config": {"rounds": rounds, "clients": clients, "examples": examples,
                    "epochs": epochs, "batch": BATCH, "shape": list(shape),
                    "client_optimizer": f"adam lr={CLIENT_LR}", "server_optimizer": "sgd 1.0",
                    "noise_multiplier": NOISE_MULTIPLIER, "cpu_count": os.cpu_count(),
                    "samples_per_round": samples},
         "entries": {}}
  keras_times = keras_ceiling(w, rounds)
  res["keras_before_s"] = keras_times
  print(f"Keras ceiling (before): {[round(t, 2) for t in keras_times]} s", flush=True)

  t0 = time.perf_counter()
  procs = build_processes(w)
  res["process_build_s"] = time.perf_counter() - t0

  entries = [
      ("stock TFF (dp_aggregator + build_unweighted_fed_avg)", "stock", {}),
      ("tff_idp default (ExecutionRuntime())", "ours", {}),
      ("tff_idp, max_concurrent_computation_calls=1", "ours",
       dict(max_concurrent_computation_calls=1)),
      ("tff_idp, max_concurrent_computation_calls=2", "ours",
       dict(max_concurrent_computation_calls=2)),
      ("tff_idp, max_concurrent_computation_calls=4", "ours",
       dict(max_concurrent_computation_calls=4)),
      ("tff_idp, k=2, worker TF_NUM_INTRAOP_THREADS=1", "ours",
       dict(max_concurrent_computation_calls=2,
            worker_env={"TF_NUM_INTRAOP_THREADS": "1"})),
  ]
  for name, proc, kwargs in entries:
    t0 = time.perf_counter()
    with runtime.ExecutionRuntime(install_signal_handlers=False, **kwargs) as rt:
      r = run_rounds(procs[proc], w, rt, clients, rounds, serialize=False)
    r["entry_wall_s"] = time.perf_counter() - t0
    res["entries"][name] = r
    _save(res, out_path)
    print(f"{name}: round {r['round_s']:.2f} s, {samples / r['round_s']:.0f} samples/s, "
          f"worker {r['worker_cores_busy']:.2f} cores", flush=True)

  keras_after = keras_ceiling(w, rounds)
  res["keras_after_s"] = keras_after
  print(f"Keras ceiling (after): {[round(t, 2) for t in keras_after]} s", flush=True)
  keras_s = float(np.median(keras_times + keras_after))
  res["keras_s"] = keras_s
  res["keras_samples_per_s"] = samples / keras_s
  res["keras_samples_per_s_before_after"] = [samples / float(np.median(keras_times)),
                                             samples / float(np.median(keras_after))]
  for r in res["entries"].values():
    r["samples_per_s"] = samples / r["round_s"]
    r["samples_per_s_range"] = [samples / max(r["rounds_s_all"]),
                                samples / min(r["rounds_s_all"])]
    r["ratio_to_keras"] = r["samples_per_s"] / res["keras_samples_per_s"]

  if breakdown:
    bd = {"with_training": {}, "no_training": {}}
    with runtime.ExecutionRuntime(install_signal_handlers=False) as rt:
      for n in breakdown_clients:
        bd["with_training"][n] = run_rounds(procs["ours"], w, rt, n, rounds, serialize=True)
        bd["no_training"][n] = run_rounds(procs["ours"], w, rt, n, rounds, epochs=0,
                                          serialize=True)
        _save({**res, "breakdown_partial": bd}, out_path)
        print(f"breakdown n={n}: next {bd['with_training'][n]['next_s']:.2f} s, 0 epochs "
              f"{bd['no_training'][n]['next_s']:.2f} s", flush=True)
    ns = list(breakdown_clients)
    bd["fit_next_with_training"] = _fit_line(ns, [bd["with_training"][n]["next_s"] for n in ns])
    bd["fit_next_no_training"] = _fit_line(ns, [bd["no_training"][n]["next_s"] for n in ns])
    bd["fit_serialize"] = _fit_line(ns, [bd["with_training"][n]["dataset_serialize_s"]
                                         for n in ns])
    bd["fit_dataset_build"] = _fit_line(ns, [bd["with_training"][n]["dataset_build_s"]
                                             for n in ns])
    bd["keras_s_per_client"] = keras_s / clients  # pure compute for one client's samples
    res["breakdown"] = bd
    _save(res, out_path)
  res["total_wall_s"] = time.perf_counter() - t_start
  return res


def _tables(res: dict) -> str:
  c = res["config"]
  lines = [f"{c['clients']} clients × {c['examples']} examples × {c['epochs']} epochs, batch "
           f"{c['batch']}, inputs {'×'.join(map(str, c['shape']))}, median of {c['rounds']} "
           f"rounds after 1 warm-up, {c['cpu_count']} cores", "",
           "| entry | round s (of which datasets) | samples/s (range) | × Keras | "
           "worker cores busy |", "|---|---:|---:|---:|---:|"]
  for name, r in res["entries"].items():
    lo, hi = r["samples_per_s_range"]
    lines.append(f"| {name} | {r['round_s']:.2f} ({r['dataset_build_s']:.3f}) | "
                 f"{r['samples_per_s']:,.0f} ({lo:,.0f}–{hi:,.0f}) | "
                 f"{r['ratio_to_keras']:.2f}× | {r['worker_cores_busy']:.2f} |")
  kb, ka = res["keras_samples_per_s_before_after"]
  lines.append(f"| plain `model.fit` (ceiling) | {res['keras_s']:.2f} | "
               f"{res['keras_samples_per_s']:,.0f} (before {kb:,.0f}, after {ka:,.0f}) | "
               f"1.00× | – |")
  bd = res.get("breakdown")
  if bd:
    lines += ["", "| clients | datasets built (Python) s | datasets serialised (Python) s | "
              "`next` s | `next`, 0 local epochs s | worker cores busy | Keras compute "
              "for the same samples s |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for n, r in bd["with_training"].items():
      z = bd["no_training"][n]
      lines.append(f"| {n} | {r['dataset_build_s']:.3f} | {r['dataset_serialize_s']:.3f} | "
                   f"{r['next_s']:.2f} | {z['next_s']:.2f} | {r['worker_cores_busy']:.2f} | "
                   f"{bd['keras_s_per_client'] * int(n):.2f} |")
    ft, fz = bd["fit_next_with_training"], bd["fit_next_no_training"]
    lines.append(f"\n`next` ≈ {ft['per_round_fixed_s']:.2f} s + {ft['per_client_s']:.3f} s × "
                 f"clients (Keras compute per client {bd['keras_s_per_client']:.3f} s); with 0 "
                 f"epochs ≈ {fz['per_round_fixed_s']:.2f} s + {fz['per_client_s']:.3f} s × "
                 f"clients; serialisation {bd['fit_serialize']['per_client_s'] * 1000:.1f} ms "
                 f"and dataset building {bd['fit_dataset_build']['per_client_s'] * 1000:.1f} ms "
                 f"per client")
  lines.append(f"\ntotal {res['total_wall_s']:.0f} s")
  return "\n".join(lines)


def _parse(argv) -> dict:
  kw = {}
  for arg in argv:
    key, _, value = arg.lstrip("-").partition("=")
    if key in ("rounds", "clients", "examples", "epochs"):
      kw[key] = int(value)
    elif key == "shape":
      kw["shape"] = tuple(int(v) for v in value.split(","))
    elif key == "breakdown_clients":
      kw["breakdown_clients"] = tuple(int(v) for v in value.split(","))
    elif key == "no_breakdown":
      kw["breakdown"] = False
    else:
      raise SystemExit(f"error: unknown argument {arg!r} (use --rounds= --clients= "
                       "--examples= --epochs= --shape=32,32,3 --breakdown_clients=10,20,30 "
                       "--no_breakdown)")
  return kw


if __name__ == "__main__":
  results = main(**_parse(sys.argv[1:]), out_path=RESULTS)
  _save(results, RESULTS)
  print(_tables(results))
  print(f"written to {RESULTS}")
