"""Round throughput on a fleet of TFF workers vs one local worker (``--workers``).

The workload is the one of ``benchmarks.bench_round_throughput`` (its
``Workload`` and ``build_processes`` are reused): the IDP-FedAvg paper's
14-layer CNN, ``--clients`` clients × ``--examples`` random examples ×
``--epochs`` local epochs, batch 128, Adam on the clients (lr 1e-3), SGD 1.0 on
the server, DP with noise multiplier 1 and adaptive clipping, run with
``build_idp_fedavg_process``. A round is building the clients' ``tf.data``
pipelines plus ``process.next``; samples/s = clients × examples × epochs /
round seconds.

Entries, all alive in one process at once and measured **interleaved** (each
pass runs one round on every entry, the order rotated from pass to pass, so
drift in the machine's load hits every entry alike):

* ``1 local worker``: ``ExecutionRuntime()``, the default: one local
  ``worker_binary`` owned by the runtime (the baseline);
* ``N loopback worker(s)`` for N in ``--fleet_sizes`` (default 1, 2, 4):
  ``ExecutionRuntime(workers=["localhost:P", ...])`` over N workers started
  here as subprocesses, ``python -m tff_idp.execution.worker --port=P`` (ports from
  ``portpicker``), on TFF's mergeable-comp context: the cohort is split over
  the workers, each runs the client work and the partial aggregation, the
  partial sums are merged, the server part (DP noise) runs once.

Every entry: one warm-up round, then the median of ``--rounds`` rounds; the
ratio of its samples/s to the baseline's; CPU of its ``worker_binary``
processes (from /proc) over the wall time of ``next`` (cores kept busy) and
of this driver process. The issue's goal: 2 loopback workers lose at most 10%
vs 1 local worker (ratio >= 0.90). On a machine with few cores all loopback
workers share the same cores, so this measures the fleet's overhead, not a
speed-up. Every worker (local and fleet) runs with
``--max_concurrent_computation_calls`` (default -1: no limit) and TensorFlow's
default thread pools unless ``TF_NUM_INTRAOP_THREADS`` /
``TF_NUM_INTEROP_THREADS`` are set in the environment (TF's default, 0, sizes
each pool to the machine's cores, in every worker: N loopback workers
oversubscribe the cores N times); both are recorded in the results.

Breakdown (``--breakdown_clients``, default 4,10,20,30; the small cohort
anchors the intercept): 0 local epochs (the clients' data are built,
serialised and shipped, nothing is trained) on every entry, interleaved the same way, median of ``--breakdown_rounds`` rounds, and
a fit round time ≈ a + b × clients per entry (the approach of
``bench_round_throughput``'s breakdown): b is the per-client cost of shipping
a client (Python serialisation + gRPC + the worker's side), a the fixed
per-round cost (the server part; on a fleet also the merge and the extra
RPCs). The driver-side serialisation alone (``_serialize_dataset``) is timed
and fitted too. The fleet's fixed overhead is a(fleet) - a(1 local).

Projection to k machines: o = a of the 2-worker fleet (the fixed per-round
cost that no machine splits; clipped into [0, that fleet's 0-epoch round at
the smallest cohort] when noise pushes the fit outside it), t_clients = round time of 1 loopback worker - o
(the client work, T1 = samples / t_clients samples/s on one worker); then
t_k ≈ o + t_clients / k, assuming every machine is as fast as this one, the
cohort splits evenly, and the network is not the bottleneck (the per-client
shipping cost measured on loopback holds). A conservative variant keeps the
per-client shipping cost b × clients serial (as if all on the driver; an
upper bound, the driver's Python serialisation is only part of b): t_k ≈ o +
b·n + (t_clients - b·n) / k.

Writes ``benchmarks/results/workers.json`` (partial results after every step)
and prints Markdown tables for the README. Every worker started here is
stopped with SIGTERM by PID (SIGKILL after 20 s) in a ``finally``; the
results record that none of their ``worker_binary`` processes is left.

  python -m benchmarks.bench_workers [--rounds=3] [--clients=30] [--examples=100]
      [--epochs=5] [--shape=32,32,3] [--fleet_sizes=1,2,4]
      [--breakdown_clients=4,10,20,30] [--breakdown_rounds=5] [--no_breakdown]
      [--max_concurrent_computation_calls=-1] [--out=PATH] [--quick]

``--quick`` is a smoke test (12 clients × 20 examples × 1 epoch, 1 round,
breakdown at 4,8,12 clients; 12 is the fewest that the reused
workload's stock DP aggregator accepts, written to ``$TMPDIR/bench_workers_quick.json``).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from benchmarks import bench_round_throughput as brt

RESULTS = os.path.join(os.path.dirname(__file__), "results", "workers.json")
QUICK_RESULTS = os.path.join(tempfile.gettempdir(), "bench_workers_quick.json")
BASELINE = "1 local worker (ExecutionRuntime())"
_LISTENING = re.compile(r"TFF worker \(pid (\d+)\) listening on")
_WORKER_START_TIMEOUT_S = 300.0
_WORKER_STOP_TIMEOUT_S = 20.0
_THREAD_ENV = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


def _fleet_name(n: int) -> str:
  return f"{n} loopback worker{'s' if n > 1 else ''} (--workers)"


class LoopbackWorker:
  """One ``python -m tff_idp.execution.worker`` subprocess on a free port (started here)."""

  def __init__(self, max_calls: int):
    import portpicker  # pylint: disable=g-import-not-at-top
    self.port = portpicker.pick_unused_port()
    self.address = f"localhost:{self.port}"
    self.binary_pid = None  # the worker_binary's PID, from the "listening" line
    self.lines: list[str] = []
    self._ready: queue.Queue = queue.Queue()
    self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-m", "tff_idp.execution.worker", f"--port={self.port}",
         f"--max_concurrent_computation_calls={max_calls}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")})
    threading.Thread(target=self._drain, daemon=True).start()

  def _drain(self) -> None:
    """Reads the worker's output to its end (so its pipe never fills)."""
    for line in self.proc.stdout:
      self.lines.append(line.rstrip())
      m = _LISTENING.search(line)
      if m:
        self._ready.put(int(m.group(1)))
    self._ready.put(None)

  def wait_listening(self, deadline: float) -> None:
    try:
      pid = self._ready.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
      pid = None
    if pid is None:
      raise RuntimeError(f"worker on port {self.port} did not start (exit code "
                         f"{self.proc.poll()}): {' | '.join(self.lines[-5:])}")
    self.binary_pid = pid

  def stop(self) -> dict:
    """SIGTERM by PID, SIGKILL after 20 s; returns how it ended."""
    how = "already exited"
    if self.proc.poll() is None:
      self.proc.send_signal(signal.SIGTERM)
      how = "SIGTERM"
      try:
        self.proc.wait(timeout=_WORKER_STOP_TIMEOUT_S)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait(timeout=_WORKER_STOP_TIMEOUT_S)
        how = "SIGKILL after 20 s"
    return {"port": self.port, "pid": self.proc.pid, "worker_binary_pid": self.binary_pid,
            "stopped_by": how, "exit_code": self.proc.returncode}


def _alive(pid) -> bool:
  if pid is None:
    return False
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rpartition(")")[2].split()[0] != "Z"
  except FileNotFoundError:
    return False


def _timed_round(process, state, w, n: int, round_num: int, epochs, pids, serialize=False):
  """One round (datasets + ``next``) on the current default context."""
  t0 = time.perf_counter()
  data = w.datasets(n, round_num, epochs)
  t1 = time.perf_counter()
  out = {}
  if serialize:  # what TFF does on the driver to each client dataset inside next()
    from tensorflow_federated.python.core.impl.executors import value_serialization  # pylint: disable=g-import-not-at-top
    for ds in data:
      value_serialization._serialize_dataset(ds)  # pylint: disable=protected-access
    out["dataset_serialize_s"] = time.perf_counter() - t1
  c0, p0 = sum(brt._cpu_s(p) for p in pids), time.process_time()  # pylint: disable=protected-access
  t2 = time.perf_counter()
  state = process.next(state, data).state
  t3 = time.perf_counter()
  c1, p1 = sum(brt._cpu_s(p) for p in pids), time.process_time()  # pylint: disable=protected-access
  out.update(dataset_build_s=t1 - t0, next_s=t3 - t2, round_s=(t1 - t0) + (t3 - t2),
             worker_cores_busy=(c1 - c0) / (t3 - t2),
             driver_cores_busy=(p1 - p0) / (t3 - t2))
  return state, out


def _summarise(samples: list[dict], n_samples: int) -> dict:
  rounds = [s["round_s"] for s in samples]
  out = {key: float(np.median([s[key] for s in samples])) for key in samples[0]}
  out["rounds_s_all"] = [float(t) for t in rounds]
  if n_samples:
    out["samples_per_s"] = n_samples / out["round_s"]
    out["samples_per_s_range"] = [n_samples / max(rounds), n_samples / min(rounds)]
  return out


def interleaved(entries: dict, process, w, n: int, rounds: int, epochs=None,
                serialize=False, label="") -> dict:
  """Warm-up + ``rounds`` rounds on every entry, passes interleaved, order rotated."""
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  names = list(entries)
  states, samples = {}, {name: [] for name in names}
  for r in range(1 + rounds):
    order = names[r % len(names):] + names[:r % len(names)]
    for name in order:
      e = entries[name]
      context_stack_impl.context_stack.set_default_context(e["rt"].context)
      if name not in states:
        states[name] = process.initialize()
      states[name], s = _timed_round(process, states[name], w, n, r, epochs, e["pids"],
                                     serialize=serialize and r > 0)
      if r > 0:
        samples[name].append(s)
      print(f"  {label}round {r}{' (warm-up)' if r == 0 else ''} {name}: "
            f"{s['round_s']:.2f} s", flush=True)
  n_samples = n * w.examples * (w.epochs if epochs is None else epochs)
  return {name: _summarise(samples[name], n_samples) for name in names}


def _fit(ns, values) -> dict:
  return brt._fit_line(ns, values)  # pylint: disable=protected-access


def project(res: dict, ks=(1, 2, 4, 8)) -> dict:
  """t_k ≈ o + t_clients / k from the measured entries and the 0-epoch fits."""
  bd = res.get("breakdown")
  one, two = _fleet_name(1), _fleet_name(2)
  if not bd or one not in res["entries"] or two not in bd["fits"]:
    return {}
  n, samples = res["config"]["clients"], res["config"]["samples_per_round"]
  fit = bd["fits"][two]["round"]
  smallest = min(bd["no_training"], key=int)
  t_smallest = bd["no_training"][smallest][two]["round_s"]
  # A fixed cost is >= 0 and <= the whole 0-epoch round at the smallest cohort;
  # a fit on noisy medians can leave that range: then o is clipped into it.
  o = min(max(fit["per_round_fixed_s"], 0.0), t_smallest)
  o_from = f"0-epoch fit intercept, {two}"
  if o != fit["per_round_fixed_s"]:
    o_from += (f" ({fit['per_round_fixed_s']:+.3f} s, clipped to [0, its 0-epoch round at "
               f"{smallest} clients = {t_smallest:.3f} s]: noisy fit)")
  b = max(0.0, fit["per_client_s"])
  t1 = res["entries"][one]["round_s"]
  t_clients = max(t1 - o, 1e-9)
  shipping = min(b * n, t_clients)
  rows = {}
  for k in ks:
    ideal = o + t_clients / k
    conservative = o + shipping + (t_clients - shipping) / k
    rows[str(k)] = {"round_s": ideal, "samples_per_s": samples / ideal,
                    "round_s_shipping_serial": conservative,
                    "samples_per_s_shipping_serial": samples / conservative}
  return {"o_fixed_per_round_s": o, "o_from": o_from,
          "per_client_shipping_s": b,
          "driver_serialize_per_client_s": bd["fits"][two]["driver_serialize"]["per_client_s"],
          "t_one_worker_round_s": t1,
          "t_clients_s": t_clients, "T1_samples_per_s_one_worker": samples / t_clients,
          "assumptions": "every machine as fast as this one (one worker per machine), "
                         "cohort split evenly, network bandwidth not the bottleneck "
                         "(loopback per-client shipping cost holds)",
          "k": rows}


def main(rounds=3, clients=30, examples=100, epochs=5, shape=(32, 32, 3),
         fleet_sizes=(1, 2, 4), breakdown_clients=(4, 10, 20, 30), breakdown_rounds=5,
         breakdown=True, max_calls=-1, out_path=None, quick=False) -> dict:
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  from tff_idp.execution import runtime  # pylint: disable=g-import-not-at-top

  t_start = time.perf_counter()
  w = brt.Workload(clients, examples, epochs, shape)
  samples = w.samples_per_round()
  res = {"config": {
      "rounds": rounds, "clients": clients, "examples": examples, "epochs": epochs,
      "batch": brt.BATCH, "shape": list(shape), "client_optimizer": f"adam lr={brt.CLIENT_LR}",
      "server_optimizer": "sgd 1.0", "noise_multiplier": brt.NOISE_MULTIPLIER,
      "samples_per_round": samples, "fleet_sizes": list(fleet_sizes),
      "breakdown_clients": list(breakdown_clients), "breakdown_rounds": breakdown_rounds,
      "cpu_count": os.cpu_count(), "load_avg_at_start": list(os.getloadavg()),
      "quick": quick,
      "worker_settings": {
          "max_concurrent_computation_calls": max_calls,
          "thread_env": {k: os.environ.get(k) for k in _THREAD_ENV},
          "thread_note": "unset = TensorFlow's default (0): intra-op and inter-op pools "
                         "sized to the machine's cores, in every worker process",
          "allocator": runtime.find_worker_allocator(),
          "same_for": "the local worker and every loopback worker"}},
      "entries": {}}
  process = brt.build_processes(w)["tff"]  # the clients must run on the workers
  workers: list[LoopbackWorker] = []
  local_pids = []  # the baseline's worker_binary, stopped by its ExecutionRuntime
  try:
    with contextlib.ExitStack() as stack:
      entries = {}
      rt = stack.enter_context(runtime.ExecutionRuntime(
          install_signal_handlers=False, max_concurrent_computation_calls=max_calls))
      entries[BASELINE] = {"rt": rt, "pids": [rt.worker_pid], "addresses": ["local"]}
      local_pids.append(rt.worker_pid)
      t0 = time.perf_counter()
      fleets = {}
      for k in fleet_sizes:
        fleets[k] = []
        for _ in range(k):
          workers.append(LoopbackWorker(max_calls))  # appended first: stopped in `finally`
          fleets[k].append(workers[-1])
      deadline = time.monotonic() + _WORKER_START_TIMEOUT_S
      for worker in workers:
        worker.wait_listening(deadline)
      res["workers_start_s"] = time.perf_counter() - t0
      print(f"{len(workers)} loopback workers listening after {res['workers_start_s']:.1f} s",
            flush=True)
      for k, group in fleets.items():
        rt = stack.enter_context(runtime.ExecutionRuntime(
            install_signal_handlers=False, workers=[g.address for g in group]))
        entries[_fleet_name(k)] = {"rt": rt, "pids": [g.binary_pid for g in group],
                                   "addresses": [g.address for g in group]}
      res["workers"] = {name: {"addresses": e["addresses"], "worker_binary_pids": e["pids"]}
                        for name, e in entries.items()}

      measured = interleaved(entries, process, w, clients, rounds)
      base = measured[BASELINE]["samples_per_s"]
      for name, r in measured.items():
        r["ratio_to_1_local"] = r["samples_per_s"] / base
        res["entries"][name] = r
        print(f"{name}: round {r['round_s']:.2f} s, {r['samples_per_s']:.0f} samples/s, "
              f"{r['ratio_to_1_local']:.2f}× 1 local, worker cores {r['worker_cores_busy']:.2f}",
              flush=True)
      two = _fleet_name(2)
      if two in res["entries"]:
        ratio = res["entries"][two]["ratio_to_1_local"]
        res["goal"] = {"goal": "2 loopback workers >= 0.90 × 1 local worker",
                       "ratio": ratio, "met": bool(ratio >= 0.90)}
      brt._save(res, out_path)  # pylint: disable=protected-access

      if breakdown:
        bd = {"no_training": {}, "fits": {}}
        for n in breakdown_clients:
          bd["no_training"][str(n)] = interleaved(entries, process, w, n, breakdown_rounds,
                                                  epochs=0, serialize=True,
                                                  label=f"0 epochs, {n} clients, ")
          brt._save({**res, "breakdown_partial": bd}, out_path)  # pylint: disable=protected-access
        ns = list(breakdown_clients)
        for name in entries:
          pick = lambda key, name=name: [bd["no_training"][str(n)][name][key] for n in ns]
          bd["fits"][name] = {"round": _fit(ns, pick("round_s")),
                              "next": _fit(ns, pick("next_s")),
                              "driver_serialize": _fit(ns, pick("dataset_serialize_s"))}
        a0 = bd["fits"][BASELINE]["round"]["per_round_fixed_s"]
        b0 = bd["fits"][BASELINE]["round"]["per_client_s"]
        for name, f in bd["fits"].items():
          f["fixed_overhead_vs_1_local_s"] = f["round"]["per_round_fixed_s"] - a0
          f["per_client_overhead_vs_1_local_s"] = f["round"]["per_client_s"] - b0
        res["breakdown"] = bd
        res["projection"] = project(res)
  finally:
    res["workers_stopped"] = [worker.stop() for worker in workers]
    left = [wk.binary_pid for wk in workers if _alive(wk.binary_pid)]
    left += [wk.proc.pid for wk in workers if _alive(wk.proc.pid)]
    left += [pid for pid in local_pids if _alive(pid)]
    res["worker_processes_left"] = left
  res["load_avg_at_end"] = list(os.getloadavg())
  res["total_wall_s"] = time.perf_counter() - t_start
  return res


def tables(res: dict) -> str:
  c = res["config"]
  ws = c["worker_settings"]
  threads = ", ".join(f"{k}={v}" for k, v in ws["thread_env"].items() if v) or "TF defaults"
  lines = [
      f"{c['clients']} clients × {c['examples']} examples × {c['epochs']} local epochs, batch "
      f"{c['batch']}, inputs {'×'.join(map(str, c['shape']))}, median of {c['rounds']} rounds "
      f"after 1 warm-up, entries interleaved; {c['cpu_count']} cores shared by every worker "
      f"(loopback: no speed-up possible, this measures overhead); load average "
      f"{c['load_avg_at_start'][0]:.1f} at start, {res['load_avg_at_end'][0]:.1f} at end "
      f"(other jobs ran at the same time: timings are noisy); every worker: "
      f"max_concurrent_computation_calls={ws['max_concurrent_computation_calls']}, "
      f"threads: {threads}", "",
      "| entry | round s (range) | samples/s (range) | × 1 local | worker cores busy | "
      "driver cores busy |", "|---|---:|---:|---:|---:|---:|"]
  for name, r in res["entries"].items():
    lo, hi = r["samples_per_s_range"]
    lines.append(f"| {name} | {r['round_s']:.2f} ({min(r['rounds_s_all']):.2f}–"
                 f"{max(r['rounds_s_all']):.2f}) | {r['samples_per_s']:,.0f} ({lo:,.0f}–{hi:,.0f}) | "
                 f"{r['ratio_to_1_local']:.2f}× | {r['worker_cores_busy']:.2f} | "
                 f"{r['driver_cores_busy']:.2f} |")
  goal = res.get("goal")
  if goal:
    lines.append(f"\nGoal ({goal['goal']}): ratio {goal['ratio']:.2f}: "
                 f"{'met' if goal['met'] else 'NOT met'}.")
  bd = res.get("breakdown")
  if bd:
    ns = list(bd["no_training"])
    lines += ["", "0 local epochs (data shipped, nothing trained), median of "
              f"{c['breakdown_rounds']} rounds, fit round s ≈ a + b × clients:", "",
              "| entry | " + " | ".join(f"{n} clients s" for n in ns) +
              " | a: fixed s/round | b: ms/client | fleet overhead vs 1 local: fixed s, ms/client "
              "| driver serialisation ms/client |",
              "|---|" + "---:|" * (len(ns) + 4)]
    for name, f in bd["fits"].items():
      cells = " | ".join(f"{bd['no_training'][n][name]['round_s']:.3f}" for n in ns)
      lines.append(f"| {name} | {cells} | {f['round']['per_round_fixed_s']:.3f} | "
                   f"{f['round']['per_client_s'] * 1000:.1f} | "
                   f"{f['fixed_overhead_vs_1_local_s']:+.3f}, "
                   f"{f['per_client_overhead_vs_1_local_s'] * 1000:+.1f} | "
                   f"{f['driver_serialize']['per_client_s'] * 1000:.1f} |")
  p = res.get("projection")
  if p:
    lines += ["", f"Projection to k machines: t_k ≈ o + t_clients / k with o = "
              f"{p['o_fixed_per_round_s']:.3f} s ({p['o_from']}), t_clients = "
              f"{p['t_clients_s']:.2f} s (1 loopback worker's round − o; T1 = "
              f"{p['T1_samples_per_s_one_worker']:,.0f} samples/s per worker); assumes "
              f"{p['assumptions']}. Conservative: the whole shipping cost "
              f"{p['per_client_shipping_s'] * 1000:.1f} ms/client stays serial (of which the "
              f"driver's Python serialisation is {p['driver_serialize_per_client_s'] * 1000:.1f} "
              "ms/client; the rest is gRPC and the worker's side, which the machines split).", "",
              "| k machines | projected round s | projected samples/s | conservative round s "
              "| conservative samples/s |", "|---:|---:|---:|---:|---:|"]
    for k, r in p["k"].items():
      lines.append(f"| {k} | {r['round_s']:.2f} | {r['samples_per_s']:,.0f} | "
                   f"{r['round_s_shipping_serial']:.2f} | "
                   f"{r['samples_per_s_shipping_serial']:,.0f} |")
  lines.append(f"\ntotal {res['total_wall_s']:.0f} s; worker processes left: "
               f"{res['worker_processes_left'] or 'none'}")
  return "\n".join(lines)


def _ints(value: str) -> tuple:
  return tuple(int(v) for v in value.split(","))


def _parse(argv) -> dict:
  p = argparse.ArgumentParser(prog="python -m benchmarks.bench_workers",
                              description=__doc__.split("\n\n")[0])
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--clients", type=int, default=30)
  p.add_argument("--examples", type=int, default=100)
  p.add_argument("--epochs", type=int, default=5)
  p.add_argument("--shape", type=_ints, default=(32, 32, 3))
  p.add_argument("--fleet_sizes", type=_ints, default=(1, 2, 4),
                 help="loopback fleets to measure (number of workers each)")
  p.add_argument("--breakdown_clients", type=_ints, default=(4, 10, 20, 30))
  p.add_argument("--breakdown_rounds", type=int, default=5)
  p.add_argument("--no_breakdown", dest="breakdown", action="store_false")
  p.add_argument("--max_concurrent_computation_calls", dest="max_calls", type=int, default=-1)
  p.add_argument("--out", dest="out_path", default=None,
                 help=f"results JSON (default {RESULTS}; --quick: {QUICK_RESULTS})")
  p.add_argument("--quick", action="store_true",
                 help="smoke test: 12 clients × 20 examples × 1 epoch, 1 round")
  kw = vars(p.parse_args(argv))
  if kw["quick"]:
    kw.update(rounds=1, clients=12, examples=20, epochs=1, breakdown_clients=(4, 8, 12),
              breakdown_rounds=1)
  if kw["out_path"] is None:
    kw["out_path"] = QUICK_RESULTS if kw["quick"] else RESULTS
  if kw["rounds"] < 1 or kw["breakdown_rounds"] < 1 or len(kw["breakdown_clients"]) < 2:
    p.error("--rounds and --breakdown_rounds must be >= 1, --breakdown_clients needs 2+ sizes")
  return kw


if __name__ == "__main__":
  kwargs = _parse(sys.argv[1:])
  results = main(**kwargs)
  brt._save(results, kwargs["out_path"])  # pylint: disable=protected-access
  print(tables(results))
  print(f"written to {kwargs['out_path']}")
