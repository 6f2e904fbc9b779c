"""Federated splits on disk as TFF `SqlClientData` sqlite files.

A split directory holds `train.sqlite`, `test.sqlite` and `manifest.json`.
Both sqlite files have the schema TFF's `SqlClientData` reads (see
`tff.simulation.datasets.save_to_sql_client_data` in TFF 0.87):

  examples(split_name TEXT, client_id TEXT, serialized_example_proto BLOB)
  client_metadata(client_id TEXT, split_name TEXT, num_examples INTEGER)

plus an index on `examples(client_id)`, so that `SqlClientData` fetches one
client without scanning the table. Every row is a serialized `tf.train.Example`
with the features

  CIFAR-10, SVHN: image  int64 [32, 32, 3] (0..255), label int64 []
  FMNIST:         pixels float [28, 28] ([0, 1]),   label int64 []

which is what TFF's EMNIST files and the paper's CIFAR-10/SVHN files
(luckyos-code/flidp, `load_and_parse_sql_client_data` with this spec) hold,
so files from either load here too. Examples are encoded by hand with numpy
(the `tf.train.Example` wire format, features in sorted key order), about
ten times faster than building protos one by one, and byte-for-byte
reproducible. `check_sqlite` turns a corrupt, truncated or foreign file into
a `SplitFormatError` that says what is wrong and how to rebuild.

Splits made from arrays (`datasets.from_arrays`, `tfds:` sources) use the
same schema with a feature spec recorded in their manifest:

  float features: x     float [*element_shape],  label int64 []
  uint8 images:   image int64 [*element_shape] (0..255), label int64 []

Integrity (see `datasets.integrity`): `write_sqlite` returns `rows_sha256`,
the SHA-256 of every row (split name, client id, example) in row order, which
the manifest records; `rows_sha256(path)` streams the same hash over a file
(about 250 MB/s, nothing materialised), and `scan_rows` decodes every row's
label in batches and names the client of the first row that does not decode
or whose label is out of range.
"""
from __future__ import annotations

import collections
import hashlib
import os
import sqlite3
import struct
from typing import Callable, Iterable, Optional, Sequence

import numpy as np

from tff_idp.errors import TffIdpError

# feature key -> (wire kind, shape)
IMAGE_FEATURES = {"image": ("int64", (32, 32, 3)), "label": ("int64", ())}
PIXEL_FEATURES = {"label": ("int64", ()), "pixels": ("float", (28, 28))}


class SplitFormatError(TffIdpError, ValueError):
  """A split file is corrupt, truncated, or not the split it should be."""


class SplitNotFoundError(TffIdpError, FileNotFoundError):
  """No (complete) split where one was expected."""


LABEL_KEY = "label"


def data_key(spec: dict) -> str:
  """The one feature of `spec` that is not the label ('image', 'pixels' or 'x')."""
  keys = [k for k in spec if k != LABEL_KEY]
  if len(keys) != 1 or LABEL_KEY not in spec:
    raise ValueError(f"a split feature spec has one data feature and {LABEL_KEY!r}; "
                     f"got {sorted(spec)}.")
  return keys[0]


# ----------------------------------------------------------------------------
# tf.train.Example wire format (protobuf), encoded with numpy.
# ----------------------------------------------------------------------------
def _varint(n: int) -> bytes:
  out = bytearray()
  while True:
    b = n & 0x7F
    n >>= 7
    if n:
      out.append(b | 0x80)
    else:
      out.append(b)
      return bytes(out)


def _packed_varints(values: np.ndarray) -> bytes:
  """Varint encoding of non-negative ints < 2**14, vectorised."""
  v = np.asarray(values, dtype=np.int64).ravel()
  if v.size and (v.min() < 0 or v.max() >= 1 << 14):
    return b"".join(_varint(int(i) & 0xFFFFFFFFFFFFFFFF) for i in v)
  two = v >= 128
  lens = 1 + two
  pos = np.cumsum(lens) - lens
  out = np.empty(int(lens.sum()), dtype=np.uint8)
  out[pos] = np.where(two, (v & 0x7F) | 0x80, v)
  out[pos[two] + 1] = (v[two] >> 7).astype(np.uint8)
  return out.tobytes()


def _len_field(tag: int, payload: bytes) -> bytes:
  return bytes([tag]) + _varint(len(payload)) + payload


def encode_example(features: dict) -> bytes:
  """Serialized `tf.train.Example` for {key: (kind, array)}, kind int64|float."""
  entries = []
  for key in sorted(features):
    kind, value = features[key]
    if kind == "int64":
      # Feature.int64_list = 3; Int64List.value = 1 (packed).
      feature = _len_field(0x1A, _len_field(0x0A, _packed_varints(value)))
    elif kind == "float":
      # Feature.float_list = 2; FloatList.value = 1 (packed fixed32).
      raw = np.asarray(value, dtype="<f4").ravel().tobytes()
      feature = _len_field(0x12, _len_field(0x0A, raw))
    else:
      raise ValueError(f"unknown feature kind {kind!r}")
    entry = _len_field(0x0A, key.encode()) + _len_field(0x12, feature)
    entries.append(_len_field(0x0A, entry))          # Features.feature map entry
  return _len_field(0x0A, b"".join(entries))         # Example.features


def feature_spec_for(x_example: np.ndarray) -> dict:
  return PIXEL_FEATURES if x_example.dtype == np.float32 else IMAGE_FEATURES


def _packed_rows_uint8(x: np.ndarray) -> list[bytes]:
  """Packed varint payload of every row of a uint8 batch (vectorised).

  A byte v < 128 is the varint [v]; v >= 128 is [v, 1] (its low 7 bits with
  the continuation bit set are v itself). So interleave every byte with a 1
  and keep the 1 only where v >= 128.
  """
  v = x.reshape(len(x), -1)
  pairs = np.empty(v.shape + (2,), dtype=np.uint8)
  pairs[..., 0] = v
  pairs[..., 1] = 1
  keep = np.empty(v.shape + (2,), dtype=bool)
  keep[..., 0] = True
  keep[..., 1] = v >= 128
  buf = pairs[keep].tobytes()
  ends = np.cumsum(keep.reshape(len(x), -1).sum(axis=1))
  starts = np.concatenate([[0], ends[:-1]])
  return [buf[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def encode_batch(x: np.ndarray, y: np.ndarray, spec: dict) -> list[bytes]:
  """Serialized examples for a batch; equals `encode_example` row by row."""
  if len(x) == 0:
    return []
  label_field = [_len_field(0x1A, _len_field(0x0A, _varint(int(v)))) for v in y]
  key = data_key(spec)
  if spec[key][0] == "float":
    raw = np.ascontiguousarray(x, dtype="<f4").reshape(len(x), -1)
    payloads = [_len_field(0x12, _len_field(0x0A, r.tobytes())) for r in raw]
  else:
    if x.dtype == np.uint8:
      rows = _packed_rows_uint8(x)
    else:
      rows = [_packed_varints(r) for r in x]
    payloads = [_len_field(0x1A, _len_field(0x0A, r)) for r in rows]
  data_entry_head = _len_field(0x0A, key.encode())
  label_entry_head = _len_field(0x0A, LABEL_KEY.encode())
  data_first = key < LABEL_KEY        # map entries in sorted key order
  out = []
  for data_feature, label_feature in zip(payloads, label_field):
    data_entry = _len_field(0x0A, data_entry_head + _len_field(0x12, data_feature))
    label_entry = _len_field(0x0A, label_entry_head + _len_field(0x12, label_feature))
    body = (data_entry + label_entry) if data_first else (label_entry + data_entry)
    out.append(_len_field(0x0A, body))
  return out


# ----------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------
def _hash_row(h, split_name: str, client_id: str, blob: bytes) -> None:
  s, c = split_name.encode(), client_id.encode()
  h.update(struct.pack("<IIQ", len(s), len(c), len(blob)))
  h.update(s)
  h.update(c)
  h.update(blob)


def write_sqlite(path: str, client_ids: Sequence[str], indices: Sequence[np.ndarray],
                 x: np.ndarray, y: np.ndarray, split_name: str,
                 progress: Optional[Callable[[int], None]] = None,
                 spec: Optional[dict] = None) -> str:
  """Writes clients (each: the examples x[idx], y[idx] in order) to `path`.

  The file is written next to `path` and renamed into place when complete,
  so an interrupted build never leaves a half-written split behind.
  `spec` defaults to the CIFAR/SVHN image spec (uint8 x) or the EMNIST pixel
  spec (float32 x). Returns the rows' SHA-256 (see `rows_sha256`).
  """
  spec = spec if spec is not None else feature_spec_for(x[:1])
  h = hashlib.sha256()
  tmp = path + ".partial"
  if os.path.exists(tmp):
    os.remove(tmp)
  con = sqlite3.connect(tmp)
  try:
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("CREATE TABLE examples (split_name TEXT NOT NULL, client_id TEXT NOT NULL, "
                "serialized_example_proto BLOB NOT NULL)")
    con.execute("CREATE TABLE client_metadata (client_id TEXT NOT NULL, "
                "split_name TEXT NOT NULL, num_examples INTEGER NOT NULL)")
    for cid, idx in zip(client_ids, indices):
      idx = np.asarray(idx, dtype=np.int64)
      rows = [(split_name, cid, blob) for blob in encode_batch(x[idx], y[idx], spec)]
      for row in rows:
        _hash_row(h, *row)
      con.executemany("INSERT INTO examples VALUES (?, ?, ?)", rows)
      con.execute("INSERT INTO client_metadata VALUES (?, ?, ?)",
                  (cid, split_name, len(idx)))
      if progress is not None:
        progress(len(idx))
    con.execute("CREATE INDEX examples_client_id ON examples (client_id)")
    con.commit()
  finally:
    con.close()
  os.replace(tmp, path)
  return h.hexdigest()


# ----------------------------------------------------------------------------
# Checking and reading
# ----------------------------------------------------------------------------
def _connect_ro(path: str) -> sqlite3.Connection:
  if not os.path.isfile(path):
    raise SplitNotFoundError(f"no such split file: {path}")
  return sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)


def _rebuild_hint(path: str) -> str:
  return (f" Delete {os.path.dirname(os.path.abspath(path))} and rebuild it with "
          "`python -m datasets.build ...` (or let the experiment build it).")


def check_sqlite(path: str, spec: dict, num_clients: Optional[int] = None,
                 num_examples: Optional[int] = None, hint: Optional[str] = None) -> None:
  """Raises `SplitFormatError` unless `path` is a complete split of this kind.

  Checks: SQLite header and schema (TFF's `examples` and `client_metadata`),
  that a stored example has exactly the features of `spec` with the right
  lengths (catches a CIFAR split passed for FMNIST, or any other sqlite), and,
  when given, the client and example counts the manifest promises (catches
  truncation). `hint` (default: rebuild with `python -m datasets.build`) ends
  every message.
  """
  hint = _rebuild_hint(path) if hint is None else hint
  try:
    con = _connect_ro(path)
    try:
      tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
      missing = {"examples", "client_metadata"} - tables
      if missing:
        raise SplitFormatError(
            f"{path} is a SQLite file but not a TFF SqlClientData split: tables "
            f"{sorted(missing)} are missing (found {sorted(tables) or 'none'})."
            + hint)
      cols = {r[1] for r in con.execute("PRAGMA table_info(examples)")}
      need = {"split_name", "client_id", "serialized_example_proto"}
      if need - cols:
        raise SplitFormatError(f"{path}: table `examples` lacks columns "
                               f"{sorted(need - cols)}." + hint)
      row = con.execute("SELECT serialized_example_proto FROM examples LIMIT 1").fetchone()
      if row is None and num_examples != 0:
        raise SplitFormatError(f"{path} holds no examples." + hint)
      if row is not None:
        _check_example(path, row[0], spec, hint)
      if num_examples is not None:
        n = con.execute("SELECT COUNT(*) FROM examples").fetchone()[0]
        if n != num_examples:
          raise SplitFormatError(f"{path} holds {n} examples but its manifest says "
                                 f"{num_examples} (truncated or replaced?)."
                                 + hint)
      if num_clients is not None:
        k = con.execute("SELECT COUNT(DISTINCT client_id) FROM client_metadata").fetchone()[0]
        if k != num_clients:
          raise SplitFormatError(f"{path} has {k} clients but its manifest says "
                                 f"{num_clients}." + hint)
    finally:
      con.close()
  except sqlite3.DatabaseError as e:
    raise SplitFormatError(f"{path} is not a readable SQLite database ({e}); the file "
                           "is corrupt, truncated or not a split." + hint) from None


def _check_example(path: str, blob: bytes, spec: dict, hint: str) -> None:
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  try:
    ex = example_pb2.Example.FromString(blob)
  except Exception as e:  # pylint: disable=broad-except
    raise SplitFormatError(f"{path}: rows are not tf.train.Example protos ({e})."
                           + hint) from None
  found = {}
  for key, feat in ex.features.feature.items():
    kind = feat.WhichOneof("kind")
    n = len(getattr(feat, kind).value) if kind else 0
    found[key] = (kind, n)
  want = {k: ({"int64": "int64_list", "float": "float_list"}[kind],
              int(np.prod(shape)) if shape else 1) for k, (kind, shape) in spec.items()}
  if found != want:
    raise SplitFormatError(
        f"{path} holds examples with features {found}, but this dataset needs "
        f"{want} (a split of another dataset?)." + hint)


def parse_spec(spec: dict):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  dtypes = {"int64": tf.int64, "float": tf.float32}
  return {k: tf.io.FixedLenFeature(shape, dtypes[kind]) for k, (kind, shape) in spec.items()}


def read_arrays(path: str, spec: dict, keys: Iterable[str] = ("x", "y", "client")):
  """All examples of a split file as numpy arrays (x, y, client ids), in row order.

  x is uint8 for int64 image features (0..255) and float32 otherwise; a file
  without rows gives x of shape [0, *feature shape].
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  keys = tuple(keys)
  con = _connect_ro(path)
  try:
    rows = con.execute("SELECT client_id, serialized_example_proto FROM examples "
                       "ORDER BY rowid").fetchall()
  finally:
    con.close()
  clients = [r[0] for r in rows]
  key = data_key(spec)
  kind, shape = spec[key]
  pspec = parse_spec(spec if "x" in keys else {LABEL_KEY: spec[LABEL_KEY]})
  xs, ys = [], []
  for lo in range(0, len(rows), 8192):
    parsed = tf.io.parse_example([r[1] for r in rows[lo:lo + 8192]], pspec)
    ys.append(parsed[LABEL_KEY].numpy())
    if "x" in keys:
      x = parsed[key].numpy()
      xs.append(x.astype(np.uint8) if kind == "int64" else x)   # images are 0..255
  out = {"client": clients, "y": np.concatenate(ys).astype(np.int64) if ys else
         np.zeros(0, np.int64)}
  if "x" in keys:
    out["x"] = np.concatenate(xs) if xs else np.zeros(
        (0,) + tuple(shape), np.uint8 if kind == "int64" else np.float32)
  return out


# ----------------------------------------------------------------------------
# Streaming integrity checks (one pass over the rows, nothing materialised)
# ----------------------------------------------------------------------------
_SCAN_BATCH = 4096


def rows_sha256(path: str, hint: Optional[str] = None) -> tuple[str, int]:
  """(SHA-256 of every row as `write_sqlite` returns it, number of rows), streamed."""
  hint = _rebuild_hint(path) if hint is None else hint
  h = hashlib.sha256()
  n = 0
  try:
    con = _connect_ro(path)
    try:
      cur = con.execute("SELECT split_name, client_id, serialized_example_proto "
                        "FROM examples ORDER BY rowid")
      while True:
        rows = cur.fetchmany(_SCAN_BATCH)
        if not rows:
          break
        for split, cid, blob in rows:
          if isinstance(split, str) and isinstance(cid, str) and isinstance(blob, bytes):
            _hash_row(h, split, cid, blob)
          else:           # a value of the wrong type can never match the checksum
            h.update(b"\xff" + repr((split, cid, type(blob).__name__)).encode())
        n += len(rows)
    finally:
      con.close()
  except sqlite3.DatabaseError as e:
    raise SplitFormatError(f"{path} is not a readable SQLite database ({e}); the file "
                           "is corrupt, truncated or not a split." + hint) from None
  return h.hexdigest(), n


def _tf_reason(e: Exception) -> str:
  if isinstance(e, UnicodeDecodeError):
    return "not a well-formed serialized proto"
  text = str(getattr(e, "message", e)).split("}}")[-1].split(" [Op:")[0].strip()
  return text[:200]


def scan_rows(path: str, spec: dict, num_classes: int, full: bool = False,
              hint: Optional[str] = None) -> "collections.OrderedDict[str, np.ndarray]":
  """Decodes every row; returns client id -> [num_classes] label counts.

  Rows are parsed in batches of 4,096 with `tf.io.parse_example`: only the
  label by default (which still checks that the row is a well-formed
  `tf.train.Example`; about 80,000 rows/s), or every feature of `spec` with
  `full=True` (which also checks each feature's type and length; about ten
  times slower). Raises `SplitFormatError` naming the client, and the
  example's position in it, of the first row that does not decode or whose
  label is outside [0, num_classes).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  hint = _rebuild_hint(path) if hint is None else hint
  pspec = parse_spec(spec if full else {LABEL_KEY: spec[LABEL_KEY]})
  counts: "collections.OrderedDict[str, np.ndarray]" = collections.OrderedDict()

  def fail(rows, i, what):
    cid = rows[i][0]
    position = int(counts[cid].sum()) if cid in counts else 0
    position += sum(1 for r in rows[:i] if r[0] == cid)
    raise SplitFormatError(
        f"{path}: example {position} of client {cid!r} (row {rows[i][2]} of table "
        f"`examples`) {what}; the file is corrupt or was edited." + hint)

  try:
    con = _connect_ro(path)
    try:
      cur = con.execute("SELECT client_id, serialized_example_proto, rowid FROM examples "
                        "ORDER BY rowid")
      while True:
        rows = cur.fetchmany(_SCAN_BATCH)
        if not rows:
          break
        labels = None
        if all(isinstance(r[1], bytes) and isinstance(r[0], str) for r in rows):
          try:
            labels = tf.io.parse_example([r[1] for r in rows], pspec)[LABEL_KEY].numpy()
          except (tf.errors.InvalidArgumentError, UnicodeDecodeError):
            labels = None     # (TF's message quotes the bad bytes: UnicodeDecodeError)
        if labels is None:                      # find the first row that fails
          for i, r in enumerate(rows):
            if not isinstance(r[0], str):
              fail(rows, i, f"has a client id of type {type(r[0]).__name__}")
            if not isinstance(r[1], bytes):
              fail(rows, i, f"holds a {type(r[1]).__name__}, not a serialized "
                   "tf.train.Example")
            try:
              tf.io.parse_example([r[1]], pspec)
            except (tf.errors.InvalidArgumentError, UnicodeDecodeError) as e:
              want = ({k: f"{kind} {list(shape)}" for k, (kind, shape) in spec.items()}
                      if full else {LABEL_KEY: "int64 []"})
              fail(rows, i, f"does not decode as a tf.train.Example with features {want} "
                   f"({_tf_reason(e)})")
          raise SplitFormatError(f"{path}: a batch of rows does not decode." + hint)
        bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
        if bad.size:
          i = int(bad[0])
          fail(rows, i, f"has label {int(labels[i])}, outside the {num_classes} "
               f"classes [0, {num_classes})")
        ids = np.asarray([r[0] for r in rows], dtype=object)
        uniq, inverse = np.unique(ids, return_inverse=True)
        batch = np.zeros((len(uniq), num_classes), dtype=np.int64)
        np.add.at(batch, (inverse, labels), 1)
        for cid, row in zip(uniq.tolist(), batch):
          if cid in counts:
            counts[cid] += row
          else:
            counts[cid] = row
    finally:
      con.close()
  except sqlite3.DatabaseError as e:
    raise SplitFormatError(f"{path} is not a readable SQLite database ({e}); the file "
                           "is corrupt, truncated or not a split." + hint) from None
  return counts


def example_counts(path: str, hint: Optional[str] = None) -> dict:
  """{"rows": client id -> rows in `examples`, "metadata": client id -> num_examples}."""
  hint = _rebuild_hint(path) if hint is None else hint
  try:
    con = _connect_ro(path)
    try:
      rows = dict(con.execute("SELECT client_id, COUNT(*) FROM examples GROUP BY client_id"))
      meta = dict(con.execute("SELECT client_id, SUM(num_examples) FROM client_metadata "
                              "GROUP BY client_id"))
    finally:
      con.close()
  except sqlite3.DatabaseError as e:
    raise SplitFormatError(f"{path} is not a readable SQLite database ({e}); the file "
                           "is corrupt, truncated or not a split." + hint) from None
  return {"rows": rows, "metadata": meta}


def client_sizes(path: str) -> collections.OrderedDict:
  """client id -> number of examples, from `client_metadata` (sorted by id)."""
  con = _connect_ro(path)
  try:
    rows = con.execute("SELECT client_id, SUM(num_examples) FROM client_metadata "
                       "GROUP BY client_id ORDER BY client_id").fetchall()
  finally:
    con.close()
  return collections.OrderedDict((r[0], int(r[1])) for r in rows)


def load_client_data(path: str, spec: dict, channels_last: bool = True):
  """TFF `ClientData` of OrderedDict(x=float32 [H, W, C], y=int32) per example.

  Pixels keep their stored scale (0..255 for images, [0, 1] for EMNIST); the
  paper's CNN rescales inside the model. Features of splits made from arrays
  keep their shape ([d] for tabular data).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  dtypes = {"int64": tf.int64, "float": tf.float32}
  element_spec = collections.OrderedDict(
      (k, tf.TensorSpec(shape, dtypes[kind])) for k, (kind, shape) in sorted(spec.items()))
  raw = tff.simulation.datasets.load_and_parse_sql_client_data(
      path, element_spec=element_spec, split_name=None)
  key = data_key(spec)

  def to_xy(element):
    x = tf.cast(element[key], tf.float32)
    if channels_last and key == "pixels":      # EMNIST [28, 28] -> [28, 28, 1]
      x = tf.expand_dims(x, -1)
    return collections.OrderedDict(x=x, y=tf.cast(element[LABEL_KEY], tf.int32))

  return raw.preprocess(lambda ds: ds.map(to_xy))
