"""Builds one federated split: source files -> partition -> sqlite + manifest.

IDP-FedAvg paper, Sec. V-B. `build_split(spec, data_dir, out_dir)`:

1. finds the source files locally (`datasets.sources`), failing at once with
   what to download when they are missing (or fetching them when
   `download=True`, after a 3-second connectivity check);
2. partitions the training examples with `np.random.default_rng(spec.seed)`
   (`datasets.partition`), so the same seed gives the same assignment,
   bit for bit;
3. writes `train.sqlite` and `test.sqlite` (TFF `SqlClientData`,
   `datasets.sql_split`) and finally `manifest.json`:

   format/version, dataset, partition, params, seed, source (files, splits,
   example count, SHA-256 of the source labels), num_clients, client_ids,
   client_sizes, client_label_counts, num_train_examples, unassigned_examples,
   test (clients, examples), assignment_sha256 (see
   `partition.Assignment.checksum`), numpy_version, sqlite_sha256 (per file,
   the SHA-256 of its rows, `sql_split.rows_sha256`) and, last, seal (SHA-256
   of every other field, `integrity.seal`), which `loader.open_split`
   verifies (see `datasets.integrity`).

Every source label must lie in [0, num_classes) (else `SourceFormatError`),
so the rows the checksums vouch for are valid.

While building, `out_dir/.incomplete` exists; the manifest is written last,
so a split with a manifest and no marker is complete.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.parse
from typing import Optional

import numpy as np

from datasets import integrity
from datasets import partition
from datasets import sources
from datasets import specs
from datasets import sql_split
from tff_idp import progress as progress_lib

MANIFEST = "manifest.json"
TRAIN_FILE = "train.sqlite"
TEST_FILE = "test.sqlite"
INCOMPLETE = ".incomplete"
FORMAT = "tff_idp.federated_split"
VERSION = 1          # the built-in datasets; splits with a `data_spec` are version 2
VERSION_DATA_SPEC = 2
SUPPORTED_VERSIONS = (1, 2)


def client_id(index: int, num_clients: int) -> str:
  width = max(4, len(str(num_clients - 1)))
  return f"client_{index:0{width}d}"


def locate(spec: specs.FederationSpec, data_dir: str, download: bool = False) -> dict:
  """Finds (or, with `download`, fetches) the source files; fast when offline."""
  spec = spec.resolved()
  finders = {
      "fmnist": (lambda: sources.locate_emnist(data_dir),
                 lambda: sources.download_emnist(data_dir), sources.EMNIST_URL),
      "cifar10": (lambda: sources.locate_cifar10(data_dir),
                  lambda: sources.download_cifar10(data_dir), sources.CIFAR10_URL),
      "svhn": (lambda: sources.locate_svhn(data_dir, spec.params["svhn_splits"]),
               lambda: sources.download_svhn(data_dir, spec.params["svhn_splits"]),
               sources.SVHN_URL),
  }
  find, fetch, url = finders[spec.dataset]
  try:
    return find()
  except sources.SourceNotFoundError:
    if not download:
      raise
  host = urllib.parse.urlparse(url).hostname
  if not sources.check_network(host):
    raise sources.SourceNotFoundError(
        f"--download was given, but {host} cannot be reached from this machine "
        "(checked for 3 s). Download the files on a machine with internet access "
        "and copy them here; run without --download to see which files.")
  os.makedirs(data_dir, exist_ok=True)
  fetch()
  return find()


def read_source(spec: specs.FederationSpec, location: dict) -> sources.SourceData:
  readers = {"fmnist": sources.read_emnist, "cifar10": sources.read_cifar10,
             "svhn": sources.read_svhn}
  return readers[spec.dataset](location)


def make_assignment(spec: specs.FederationSpec, src: sources.SourceData,
                    progress=None) -> tuple[partition.Assignment, list[str]]:
  """The partition of `src`'s training examples that `spec` asks for."""
  spec = spec.resolved()
  rng = np.random.default_rng(spec.seed)
  n = len(src.train_y)
  p = spec.params
  if spec.dataset == "fmnist":
    writers = src.group_ids
    k = len(writers)
    if spec.num_clients is not None and spec.num_clients != k:
      raise ValueError(f"FMNIST clients are its {k} writers; num_clients="
                       f"{spec.num_clients} does not fit (omit it or pass {k}).")
    natural = partition.from_groups(src.train_groups, k)
    if spec.partition == "natural":
      assignment = natural
    elif p["iid_sizes"] == "keep":
      assignment = partition.iid_keep_sizes(natural.sizes, rng)
    else:
      assignment = partition.iid_equal(n, k, rng)
    return assignment, list(writers)
  k = spec.num_clients
  ids = [client_id(i, k) for i in range(k)]
  if spec.partition == "iid":
    return partition.iid_equal(n, k, rng), ids
  if spec.partition == "pachinko":
    per_client = p["examples_per_client"] or n // k
    coarse = specs.CIFAR10_COARSE[p["coarse"]]
    return partition.pachinko(src.train_y, coarse, k, per_client, p["alpha"], p["beta"],
                              rng, progress=progress), ids
  if spec.partition == "dirichlet":
    return partition.dirichlet_turns(src.train_y, k, p["alpha"], rng, num_classes=10,
                                     progress=progress), ids
  raise ValueError(f"unknown partition {spec.partition!r}")


def check_labels(src: sources.SourceData, num_classes: int, files: list) -> None:
  """Raises `SourceFormatError` unless every label lies in [0, num_classes)."""
  for split, y in (("train", src.train_y), ("test", src.test_y)):
    y = np.asarray(y)
    bad = np.flatnonzero((y < 0) | (y >= num_classes))
    if bad.size:
      raise sources.SourceFormatError(
          f"the {split} labels read from {', '.join(files)} include {int(y[bad[0]])} "
          f"(example {int(bad[0])}), outside the dataset's {num_classes} classes "
          f"[0, {num_classes}); the source files are damaged or of another dataset. "
          "Download them again.")


def write_manifest(out_dir: str, manifest: dict) -> dict:
  """Seals `manifest` and writes it atomically; removes the unfinished-build marker."""
  manifest = dict(manifest)
  manifest.pop(integrity.SEAL, None)
  manifest[integrity.SEAL] = integrity.seal(manifest)
  manifest_path = os.path.join(out_dir, MANIFEST)
  tmp = manifest_path + ".partial"
  with open(tmp, "w") as f:
    f.write(_dump_manifest(manifest))
  os.replace(tmp, manifest_path)
  marker = os.path.join(out_dir, INCOMPLETE)
  if os.path.exists(marker):
    os.remove(marker)
  return manifest


def _progress_bar(total: int, desc: str, enabled: bool):
  if not enabled:
    return None, (lambda n: None)
  bar = progress_lib.progress(total, desc=desc, unit="ex")  # plain lines in a log
  return bar, bar.update


def build_split(spec: specs.FederationSpec, data_dir: str, out_dir: str,
                download: bool = False, progress: bool = True,
                command: Optional[str] = None) -> dict:
  """Builds the split into `out_dir`; returns its manifest (see module doc)."""
  spec = spec.resolved()
  location = locate(spec, data_dir, download)
  t0 = time.time()
  os.makedirs(out_dir, exist_ok=True)
  marker = os.path.join(out_dir, INCOMPLETE)
  open(marker, "w").close()
  manifest_path = os.path.join(out_dir, MANIFEST)
  if os.path.exists(manifest_path):
    os.remove(manifest_path)
  if progress:
    print(f"reading {spec.dataset} from {', '.join(location['files'])}", flush=True)
  src = read_source(spec, location)
  info = specs.info(spec.dataset)
  check_labels(src, info.num_classes, location["files"])

  bar, update = _progress_bar(len(src.train_y), f"partition ({spec.partition})",
                              progress and spec.partition in ("pachinko", "dirichlet"))
  assignment, ids = make_assignment(spec, src, progress=update)
  if bar is not None:
    bar.close()
  used = np.concatenate(assignment.indices) if assignment.num_clients else np.zeros(0)
  if len(np.unique(used)) != len(used):
    raise AssertionError("partition used an example twice")   # never expected

  bar, update = _progress_bar(assignment.num_examples, "train.sqlite", progress)
  train_sha = sql_split.write_sqlite(os.path.join(out_dir, TRAIN_FILE), ids,
                                     assignment.indices, src.train_x, src.train_y,
                                     "train", progress=update)
  if bar is not None:
    bar.close()
  if src.test_groups is not None:
    test = partition.from_groups(src.test_groups, len(src.group_ids))
    test_ids = [w for w, s in zip(src.group_ids, test.sizes) if s > 0]
    test_idx = [i for i in test.indices if len(i)]
  else:
    test_ids, test_idx = ["test"], [np.arange(len(src.test_y), dtype=np.int64)]
  bar, update = _progress_bar(len(src.test_y), "test.sqlite", progress)
  test_sha = sql_split.write_sqlite(os.path.join(out_dir, TEST_FILE), test_ids, test_idx,
                                    src.test_x, src.test_y, "test", progress=update)
  if bar is not None:
    bar.close()

  label_counts = assignment.label_counts(src.train_y, info.num_classes)
  manifest = {
      "format": FORMAT,
      "version": VERSION,
      "name": spec.name,
      "dataset": spec.dataset,
      "partition": spec.partition,
      "params": spec.params,
      "seed": spec.seed,
      "source": {
          "files": [os.path.basename(f) for f in location["files"]],
          "splits": src.splits,
          "num_examples": int(len(src.train_y)),
          "labels_sha256": hashlib.sha256(
              np.ascontiguousarray(src.train_y, dtype="<i8").tobytes()).hexdigest(),
      },
      "num_clients": assignment.num_clients,
      "num_train_examples": assignment.num_examples,
      "unassigned_examples": int(len(src.train_y) - assignment.num_examples),
      "assignment_sha256": assignment.checksum(),
      "test": {"split": "digits_only_test" if spec.dataset == "fmnist" else "test",
               "num_clients": len(test_ids), "num_examples": int(len(src.test_y))},
      "client_sizes_summary": _size_summary(assignment.sizes),
      "numpy_version": np.__version__,
      "build_seconds": round(time.time() - t0, 1),
      "command": command,
      integrity.ROWS_SHA256: {"train": train_sha, "test": test_sha},
      "client_ids": ids,
      "client_sizes": assignment.sizes.tolist(),
      "client_label_counts": label_counts.tolist(),
  }
  return write_manifest(out_dir, manifest)


def _size_summary(sizes: np.ndarray) -> dict:
  return {"min": int(sizes.min()), "median": float(np.median(sizes)),
          "mean": round(float(sizes.mean()), 3), "max": int(sizes.max())}


def _dump_manifest(m: dict) -> str:
  """Pretty JSON with the long per-client lists kept on one line each."""
  short = {k: v for k, v in m.items() if not k.startswith("client_") or k.endswith("summary")}
  text = json.dumps(short, indent=1, sort_keys=False)
  long_parts = ",\n".join(f' "{k}": {json.dumps(v, separators=(",", ":"))}'
                          for k, v in m.items() if k not in short)
  return text[:-2] + ",\n" + long_parts + "\n}\n"


def summary_text(m: dict) -> str:
  """The manifest in a few lines (what the build CLI prints)."""
  s = m["client_sizes_summary"]
  params = ", ".join(f"{k}={v}" for k, v in m["params"].items() if v is not None) or "none"
  lines = [
      f"split          {m['name']}",
      f"source         {m['dataset']} ({'+'.join(m['source']['splits'])}; "
      f"{m['source']['num_examples']:,} train examples; files "
      f"{', '.join(m['source']['files']) or 'none (from arrays)'})",
      f"partition      {m['partition']} ({params}), seed {m['seed']}",
      f"clients        {m['num_clients']:,}; sizes min {s['min']}, median "
      f"{s['median']:g}, mean {s['mean']:g}, max {s['max']}",
      f"train / test   {m['num_train_examples']:,} / {m['test']['num_examples']:,} "
      f"examples ({m['unassigned_examples']} unassigned; test: "
      f"{m['test']['num_clients']} client(s))",
      f"assignment     sha256 {m['assignment_sha256']}",
  ]
  return "\n".join(lines)
