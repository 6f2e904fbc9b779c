"""Integrity of a split directory: its manifest, and its sqlite files against it.

`datasets.loader.open_split` runs these checks, in this order, whenever it
opens a split with a manifest; each failure is a `SplitFormatError` (a
`tff_idp.errors.TffIdpError`) whose message names what is wrong (the missing
key, the edited field, the client whose rows are bad) and ends with what to
do (`rebuild_advice`: the `python -m datasets.build ... --overwrite` command,
or deleting the directory).

1. `check_keys`: every key the loader and the experiments read is present
   (version 2 manifests, of splits made from arrays, also need `data_spec`).
2. `check_consistency`: num_clients, client_ids, client_sizes and
   client_label_counts agree with each other and with num_train_examples.
3. `check_files`: both sqlite files have the schema, the example and client
   counts of the manifest, and every client exactly its client_sizes rows
   (`client_metadata` and `examples`).
4. `check_seal`: the manifest's `seal` (SHA-256 of every field, written last
   by the builder) still matches, so a flipped `assignment_sha256`,
   `source.labels_sha256` or any other edited field is caught and named.
5. `check_rows`: the SHA-256 of every row of each file, streamed over the
   sqlite rows (`sql_split.rows_sha256`, ~250 MB/s, nothing materialised),
   equals the manifest's `sqlite_sha256`. Only when it does not is every row
   decoded (`sql_split.scan_rows`) to name the client of the first bad row,
   an out-of-range label, or the client whose label counts changed. Rows
   equal to the checksummed ones were validated when written (every label in
   [0, num_classes), every feature of the spec's shape).

Manifests written before these checks existed (no `seal`, no
`sqlite_sha256`) are still opened: steps 1-3 run, and step 5 decodes every
row's label instead (structure and label range; ~80,000 rows/s) and compares
the label counts per client with the manifest. Rebuilding such a split adds
the checksums.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Optional

from datasets import specs
from datasets import sql_split

SplitFormatError = sql_split.SplitFormatError

SEAL = "seal"
ROWS_SHA256 = "sqlite_sha256"
DATA_SPEC = "data_spec"

# Keys `open_split`, the experiments and the plots read.
REQUIRED_KEYS = ("format", "version", "name", "dataset", "partition", "params", "seed",
                 "source", "num_clients", "num_train_examples", "assignment_sha256",
                 "test", "client_ids", "client_sizes", "client_label_counts")
REQUIRED_NESTED = {"source": ("num_examples", "labels_sha256"),
                   "test": ("num_clients", "num_examples")}


# ----------------------------------------------------------------------------
# What to do about a bad split.
# ----------------------------------------------------------------------------
def rebuild_command(m: dict, directory: str) -> Optional[str]:
  """`python -m datasets.build ... --overwrite` for a built-in split, else None."""
  dataset = m.get("dataset")
  if dataset not in specs.DATASETS:
    return None
  parts = ["python -m datasets.build", f"--dataset={dataset}"]
  if isinstance(m.get("partition"), str):
    parts.append(f"--partition={m['partition']}")
  if isinstance(m.get("num_clients"), int) and dataset != "fmnist":
    parts.append(f"--num_clients={m['num_clients']}")
  if isinstance(m.get("seed"), int):
    parts.append(f"--seed={m['seed']}")
  params = m.get("params") if isinstance(m.get("params"), dict) else {}
  for key, value in params.items():
    if value is None:
      continue
    if isinstance(value, list):
      value = ",".join(str(v) for v in value)
    parts.append(f"--{key}={value}")
  parts += [f"--out={directory}", "--overwrite"]
  return " ".join(parts)


def rebuild_advice(m: Optional[dict], directory: str) -> str:
  """The sentence that ends every integrity error: how to get a good split back."""
  m = m if isinstance(m, dict) else {}
  directory = os.path.abspath(directory)
  dataset = m.get("dataset")
  command = rebuild_command(m, directory)
  if command is not None:
    return (f" Rebuild it with `{command}` (add --data_dir=<source files>), or delete "
            f"{directory} and let the experiment build it again.")
  if isinstance(dataset, str) and dataset.startswith("tfds:"):
    return (f" Delete {directory}; `datasets.resolve({dataset!r}, split_dir=...)` (or "
            "the experiment) builds it again from the prepared TFDS data.")
  if dataset is not None:
    return (f" Delete {directory} and save the split again "
            f"(`datasets.from_arrays(...).save({directory!r})`).")
  return (f" Delete {directory} and rebuild it with `python -m datasets.build ...` "
          "(or let the experiment build it).")


# ----------------------------------------------------------------------------
# The manifest on its own.
# ----------------------------------------------------------------------------
def _canonical(value) -> bytes:
  return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _field_digests(m: dict) -> dict:
  """path -> 16 hex digits of SHA-256, for every top-level field (one level into dicts)."""
  out = {}
  for key, value in m.items():
    if key == SEAL:
      continue
    items = value.items() if isinstance(value, dict) and value else [(None, value)]
    for sub, v in items:
      path = key if sub is None else f"{key}.{sub}"
      out[path] = hashlib.sha256(path.encode() + b"\0" + _canonical(v)).hexdigest()[:16]
  return out


def seal(m: dict) -> dict:
  """The `seal` of a manifest: SHA-256 of all of it, and a digest per field.

  Computed on the JSON form (what `json.load` gives back), without `seal`.
  """
  m = json.loads(json.dumps({k: v for k, v in m.items() if k != SEAL}))
  return {"sha256": hashlib.sha256(_canonical(m)).hexdigest(),
          "fields": _field_digests(m)}


def check_keys(m: dict, path: str, advice: str) -> None:
  """Raises naming the first missing key (`test.num_examples` for nested ones)."""
  required = list(REQUIRED_KEYS)
  if m.get("version") == 2:
    required.append(DATA_SPEC)
  for key in required:
    if key not in m:
      raise SplitFormatError(f"{path} lacks the key {key!r}, which every split manifest "
                             "has; it is damaged, edited or not a tff_idp manifest." + advice)
  for key, subkeys in REQUIRED_NESTED.items():
    if not isinstance(m[key], dict):
      raise SplitFormatError(f"{path}: {key!r} must be an object, got "
                             f"{type(m[key]).__name__}." + advice)
    for sub in subkeys:
      if sub not in m[key]:
        raise SplitFormatError(f"{path} lacks the key '{key}.{sub}'." + advice)


def check_seal(m: dict, path: str, advice: str) -> None:
  """Raises naming the fields edited after the build (no-op for unsealed manifests)."""
  if SEAL not in m:
    return
  s = m[SEAL]
  if not (isinstance(s, dict) and isinstance(s.get("fields"), dict)
          and isinstance(s.get("sha256"), str)):
    raise SplitFormatError(f"{path}: its {SEAL!r} is malformed." + advice)
  want = s["fields"]
  got = seal(m)
  changed = sorted(p for p in set(want) | set(got["fields"])
                   if want.get(p) != got["fields"].get(p))
  if changed:
    shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6
                                      else "")
    raise SplitFormatError(
        f"{path}: {shown} changed after the split was built (the manifest's {SEAL} "
        "says otherwise); the manifest was edited or damaged, so its checksums cannot "
        "vouch for the data." + advice)
  if got["sha256"] != s["sha256"]:
    raise SplitFormatError(f"{path}: the manifest does not match its {SEAL}.sha256; it "
                           "was edited or damaged." + advice)


def _int(m: dict, key: str, path: str, advice: str, minimum: int = 0) -> int:
  value = m[key]
  if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
    raise SplitFormatError(f"{path}: {key} must be an integer >= {minimum}, got "
                           f"{value!r}." + advice)
  return value


def check_consistency(m: dict, num_classes: int, path: str, advice: str) -> None:
  """num_clients, client_ids, client_sizes, client_label_counts agree; names the client."""
  k = _int(m, "num_clients", path, advice, 1)
  n = _int(m, "num_train_examples", path, advice, 1)
  _int(m["test"], "num_examples", path, advice)
  _int(m["test"], "num_clients", path, advice)
  ids, sizes, counts = m["client_ids"], m["client_sizes"], m["client_label_counts"]
  for key, value in (("client_ids", ids), ("client_sizes", sizes),
                     ("client_label_counts", counts)):
    if not isinstance(value, list) or len(value) != k:
      got = len(value) if isinstance(value, list) else type(value).__name__
      raise SplitFormatError(f"{path}: num_clients is {k} but {key} has {got} entries."
                             + advice)
  if not all(isinstance(c, str) for c in ids) or len(set(ids)) != k:
    seen, dup = set(), None
    for c in ids:
      if c in seen or not isinstance(c, str):
        dup = c
        break
      seen.add(c)
    raise SplitFormatError(f"{path}: client_ids must be {k} distinct strings; {dup!r} "
                           "is repeated or not a string." + advice)
  for cid, size, row in zip(ids, sizes, counts):
    if (isinstance(size, bool) or not isinstance(size, int) or size < 0
        or not isinstance(row, list) or len(row) != num_classes
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in row)):
      raise SplitFormatError(
          f"{path}: client {cid!r} has client_sizes {size!r} and client_label_counts "
          f"{row!r}; expected an integer >= 0 and {num_classes} integers >= 0." + advice)
    if sum(row) != size:
      raise SplitFormatError(
          f"{path}: client {cid!r} has client_sizes {size} but its client_label_counts "
          f"add up to {sum(row)}; the manifest was edited or damaged." + advice)
  if sum(sizes) != n:
    raise SplitFormatError(f"{path}: client_sizes add up to {sum(sizes)} but "
                           f"num_train_examples is {n}." + advice)


# ----------------------------------------------------------------------------
# The sqlite files against the manifest.
# ----------------------------------------------------------------------------
def check_files(m: dict, train_path: str, test_path: str, features: dict,
                advice: str) -> None:
  """Schema, totals, and every client's row count against the manifest."""
  sql_split.check_sqlite(train_path, features, m["num_clients"], m["num_train_examples"],
                         hint=advice)
  sql_split.check_sqlite(test_path, features, m["test"]["num_clients"],
                         m["test"]["num_examples"], hint=advice)
  counts = sql_split.example_counts(train_path, hint=advice)
  name = os.path.basename(train_path)
  for cid, size in zip(m["client_ids"], m["client_sizes"]):
    meta = counts["metadata"].get(cid)
    rows = counts["rows"].get(cid, 0)
    if meta is None:
      raise SplitFormatError(f"{train_path}: client {cid!r} of the manifest is missing "
                             "from its client_metadata table." + advice)
    if meta != size:
      raise SplitFormatError(
          f"{train_path}: client {cid!r} has num_examples {meta} in client_metadata but "
          f"{size} in the manifest's client_sizes." + advice)
    if rows != size:
      raise SplitFormatError(
          f"{train_path}: client {cid!r} has {rows} examples in {name} but {size} in the "
          "manifest's client_sizes." + advice)
  extra = sorted(set(counts["rows"]) - set(m["client_ids"]))
  if extra:
    raise SplitFormatError(f"{train_path} holds examples of client(s) {extra[:5]} that "
                           "the manifest does not list." + advice)


def _compare_label_counts(m: dict, counts: dict, path: str, advice: str) -> None:
  for cid, want in zip(m["client_ids"], m["client_label_counts"]):
    got = counts.get(cid)
    got = [0] * len(want) if got is None else [int(c) for c in got]
    if got != list(want):
      raise SplitFormatError(
          f"{path}: client {cid!r} holds label counts {got}, but the manifest's "
          f"client_label_counts says {list(want)}; its examples were changed." + advice)


def check_rows(m: dict, name: str, path: str, features: dict, num_classes: int,
               advice: str) -> None:
  """Verifies every row of file `name` ('train' or 'test'); see the module doc."""
  digests = m.get(ROWS_SHA256)
  train = name == "train"
  if not isinstance(digests, dict) or name not in digests:
    counts = sql_split.scan_rows(path, features, num_classes, hint=advice)
    if train:
      _compare_label_counts(m, counts, path, advice)
    return
  digest, _ = sql_split.rows_sha256(path, hint=advice)
  if digest == digests[name]:
    return
  # Something changed: find out what, to name the client.
  counts = sql_split.scan_rows(path, features, num_classes, hint=advice)
  if train:
    _compare_label_counts(m, counts, path, advice)
  sql_split.scan_rows(path, features, num_classes, full=True, hint=advice)
  raise SplitFormatError(
      f"{path}: its rows do not match the manifest's {ROWS_SHA256}.{name} (every example "
      "still decodes and its label is in range, so some example's features, a client "
      "id or the row order changed); the file was modified after the build." + advice)
