"""``--workers`` and its companions, shared by every TFF experiment module.

Without ``--workers`` nothing changes: one local TFF worker, started and owned
by the run. With ``--workers=host:port,...`` the run uses those workers (start
each with ``python -m tff_idp.execution.worker --port=P``): every round's cohort is split
across them by TFF's mergeable-comp context and the partial sums are merged
before the server adds the DP noise once (README "Running on several machines").
"""
from __future__ import annotations

from typing import Optional

from absl import flags

from tff_idp.execution import fleet

WORKERS = "workers"
_NAMES = ("workers", "worker_retries", "worker_connect_timeout_s", "worker_rpc_timeout_s",
          "worker_tls_ca", "worker_tls_cert", "worker_tls_key", "worker_tls_server_name")
# IDP-FedAvg's, rPDP-FL's and APES's modules only (``define_client_execution``).
EXECUTION_NAMES = ("client_execution", "parallel_clients")


def define() -> None:
  """Defines the flags (once per process)."""
  if WORKERS in flags.FLAGS:
    return
  flags.DEFINE_list(
      WORKERS, None,
      "Run on these TFF workers (host:port,...; start each with `python -m "
      "tff_idp.execution.worker --port=P`) instead of one local worker. Each round's cohort is "
      "split across them; the DP noise is added once, after the merge.")
  flags.DEFINE_integer(
      "worker_retries", 0,
      "With --workers: rerun a computation that fails on a worker on the workers left, "
      "up to this many times (0: fail at once). A failed attempt releases nothing and "
      "the rerun adds the same noise (README).")
  flags.DEFINE_float("worker_connect_timeout_s", fleet.DEFAULT_CONNECT_TIMEOUT_S,
                     "With --workers: every worker must answer within this at start-up.")
  flags.DEFINE_float("worker_rpc_timeout_s", fleet.DEFAULT_RPC_TIMEOUT_S,
                     "With --workers: deadline of every call to a worker (a round's "
                     "client work on one worker must finish within it).")
  flags.DEFINE_string("worker_tls_ca", None,
                      "With --workers: connect over TLS, trusting this PEM CA.")
  flags.DEFINE_string("worker_tls_cert", None, "Client certificate (PEM) for mutual TLS.")
  flags.DEFINE_string("worker_tls_key", None, "Key (PEM) of --worker_tls_cert.")
  flags.DEFINE_string("worker_tls_server_name", None,
                      "Name to check the workers' certificates against (default: the host).")


def define_client_execution() -> None:
  """``--client_execution`` and ``--parallel_clients`` (IDP-FedAvg, rPDP-FL and APES modules; once
  per process)."""
  if "client_execution" in flags.FLAGS:
    return
  flags.DEFINE_enum(
      "client_execution", "auto", ["auto", "in_process", "vectorized", "tff"],
      "Where the clients train. in_process (IDP-FedAvg, rPDP-FL): in this process, several "
      "at once (faster for conv nets; the aggregator and server update still run in TFF, "
      "unchanged); vectorized (logreg and MLP): in this process, the whole cohort as one "
      "computation on stacked weights (rPDP-FL and APES: each client's sampling and noise "
      "from its own seed included), the server step unchanged; tff: as TFF client "
      "computations on the worker(s). auto: tff with --workers or --audit_canaries "
      "(IDP-FedAvg; rPDP-FL's canary runs always use tff), vectorized for the logreg and "
      "MLP, tff for other models under 10,000 parameters, "
      "in_process otherwise (APES: tff).")
  flags.DEFINE_integer(
      "parallel_clients", None,
      "With in-process client execution: clients trained at once, each on its own "
      "model copy (default: the core count, at most 4).")


def values() -> dict:
  """The flags' values by name (for modules that resolve flags into a dict)."""
  return {name: flags.FLAGS[name].value for name in _NAMES + EXECUTION_NAMES
          if name in flags.FLAGS}


def training_kwargs(v: Optional[dict] = None, audit_canaries: int = 0) -> dict:
  """``client_execution`` and ``parallel_clients`` of ``TrainingConfig``.

  ``auto`` becomes ``tff`` with ``--workers`` (the clients must train on the
  fleet); otherwise ``TrainingConfig`` resolves it (``tff`` with
  ``--audit_canaries`` or a small model, ``in_process`` otherwise).
  """
  v = values() if v is None else v
  execution = v["client_execution"]
  if execution == "auto" and v["workers"]:
    execution = "tff"
  elif execution in ("in_process", "vectorized") and v["workers"]:
    raise ValueError(f"--client_execution={execution} trains the clients in this process, "
                     "not on --workers; use --client_execution=tff (or auto) with --workers.")
  elif execution in ("in_process", "vectorized") and audit_canaries:
    raise ValueError("--audit_canaries needs --client_execution=tff (or auto): the canary "
                     "clients run as TFF client work.")
  if v["parallel_clients"] is not None and execution == "tff":
    raise ValueError("--parallel_clients applies to in-process client execution only; "
                     "drop it, or use --client_execution=in_process (or auto).")
  return dict(client_execution=execution, parallel_clients=v["parallel_clients"])


def runtime_kwargs(v: Optional[dict] = None) -> dict:
  """Keyword arguments of ``tff_idp.execution.runtime.ExecutionRuntime`` from the flags."""
  v = values() if v is None else v
  workers = v["workers"]
  tls_given = [n for n in ("worker_tls_ca", "worker_tls_cert", "worker_tls_key",
                           "worker_tls_server_name") if v[n]]
  if not workers:
    extra = [f"--{n}" for n in tls_given]
    if v["worker_retries"]:
      extra.append("--worker_retries")
    if extra:
      raise ValueError(f"{', '.join(extra)} apply to remote workers only; give "
                       "--workers=host:port,... (or drop them).")
    return {}
  tls = None
  if tls_given:
    if not v["worker_tls_ca"]:
      raise ValueError("TLS needs --worker_tls_ca (the CA that signed the workers' "
                       "certificates).")
    tls = fleet.TlsConfig(v["worker_tls_ca"], v["worker_tls_cert"], v["worker_tls_key"],
                          v["worker_tls_server_name"])
  return dict(workers=fleet.parse_addresses(workers), worker_retries=v["worker_retries"],
              connect_timeout_s=v["worker_connect_timeout_s"],
              rpc_timeout_s=v["worker_rpc_timeout_s"], tls=tls)
