"""What each federated dataset of the paper is, and how one split is specified.

IDP-FedAvg paper, Sec. V-B and Table I:

| dataset | clients | non-i.i.d. partition                    | i.i.d. partition            |
|---------|---------|-----------------------------------------|-----------------------------|
| fmnist  | 3,383   | `natural`: one client per EMNIST writer | `iid`: same writer ids      |
| cifar10 | 500     | `pachinko` (default) or `dirichlet`     | `iid`: 100 examples each    |
| svhn    | 725     | (none: the paper only uses i.i.d.)      | `iid`: 833 or 834 each      |

Choices made here (documented in the README too):

* i.i.d. sizes: `iid_sizes="equal"` (default) deals a random permutation into
  K chunks of ⌊n/K⌋ or ⌈n/K⌉ examples. The paper's code assigns every example
  to a uniformly random client (multinomial sizes, e.g. 101 ± 10 for FMNIST);
  equal sizes remove that size noise. FMNIST also offers `iid_sizes="keep"`:
  each writer keeps its own number of examples and only the labels become
  i.i.d., which isolates label skew from size skew.
* CIFAR-10 Pachinko: CIFAR-10 has no coarse labels, so `coarse="pairs"`
  (default) groups its ten classes into five coarse pairs, mirroring
  CIFAR-100's 20 coarse labels of 5 fine labels each:
    0 {airplane, ship}  1 {automobile, truck}  2 {bird, frog}
    3 {cat, dog}        4 {deer, horse}
  `coarse="vehicle_animal"` uses two coarse labels instead: vehicles
  {airplane, automobile, ship, truck} and animals (the other six). alpha = 0.1
  over coarse and beta = 10 over fine labels, 100 train examples per client,
  as TFF's CIFAR-100 (Reddi et al. 2021, App. C.4). 500 x 100 = 50,000 uses
  every training image exactly once.
* CIFAR-10 `dirichlet`: alpha = 0.1 per class, clients drawing labels in
  turns (see `datasets.partition.dirichlet_turns`), the procedure behind the
  paper's published CIFAR-10 split.
* SVHN: `svhn_splits=("train", "extra")`, 604,388 images ("over 600,000").
  The paper's code (`prepare_svhn_v2.ipynb`) dealt only the 73,257 `train`
  images; pass `svhn_splits=("train",)` to do the same.
* Test sets: the original test splits, centralized (FMNIST keeps its writers
  as test clients in `test.sqlite`; CIFAR-10 and SVHN store one client `test`).

Splits of other data (`datasets.from_arrays`, `tfds:<name>` sources) are not
in `DATASETS`; their manifest carries a `data_spec` (`data_spec(info)`:
sqlite feature spec, element shape, dtypes, number of classes, label names,
rescale factor), from which `info_from_data_spec` rebuilds their
`DatasetInfo`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Optional

from datasets import sources
from datasets import sql_split


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
  name: str
  input_shape: tuple[int, ...]
  num_classes: int
  rescale: float                 # the CNN's Rescaling factor for stored pixels
  features: dict                 # sqlite feature spec
  label_names: tuple[str, ...]
  num_clients: int               # the paper's client count
  partitions: tuple[str, ...]    # first = default (non-i.i.d. where there is one)


DATASETS = {
    "fmnist": DatasetInfo("fmnist", (28, 28, 1), 10, 1.0, sql_split.PIXEL_FEATURES,
                          sources.DIGIT_LABELS, 3383, ("natural", "iid")),
    "cifar10": DatasetInfo("cifar10", (32, 32, 3), 10, 1.0 / 255.0, sql_split.IMAGE_FEATURES,
                           sources.CIFAR10_LABELS, 500, ("pachinko", "dirichlet", "iid")),
    "svhn": DatasetInfo("svhn", (32, 32, 3), 10, 1.0 / 255.0, sql_split.IMAGE_FEATURES,
                        sources.DIGIT_LABELS, 725, ("iid",)),
}

# Fine CIFAR-10 label -> coarse label.
CIFAR10_COARSE = {
    "pairs": (0, 1, 2, 3, 4, 3, 2, 4, 0, 1),
    "vehicle_animal": (0, 0, 1, 1, 1, 1, 1, 1, 0, 0),
}

_DEFAULT_PARAMS = {
    ("fmnist", "natural"): {},
    ("fmnist", "iid"): {"iid_sizes": "equal"},
    ("cifar10", "pachinko"): {"alpha": 0.1, "beta": 10.0, "coarse": "pairs",
                              "examples_per_client": None},
    ("cifar10", "dirichlet"): {"alpha": 0.1},
    ("cifar10", "iid"): {},
    ("svhn", "iid"): {"svhn_splits": ["train", "extra"]},
}


def info(dataset: str) -> DatasetInfo:
  if dataset not in DATASETS:
    raise ValueError(f"unknown dataset {dataset!r}; choose one of {sorted(DATASETS)}.")
  return DATASETS[dataset]


def data_spec(d: DatasetInfo) -> dict:
  """The manifest's `data_spec` for a dataset that is not built in (JSON-ready)."""
  return {
      "features": {k: [kind, list(shape)] for k, (kind, shape) in sorted(d.features.items())},
      "element_shape": list(d.input_shape),
      "x_dtype": "float32",
      "y_dtype": "int32",
      "num_classes": int(d.num_classes),
      "label_names": list(d.label_names),
      "rescale": float(d.rescale),
  }


def info_from_data_spec(name: str, spec: dict, num_clients: int,
                        partition: str) -> DatasetInfo:
  """The `DatasetInfo` a manifest's `data_spec` describes; ValueError if malformed."""
  try:
    features = {str(k): (str(kind), tuple(int(n) for n in shape))
                for k, (kind, shape) in spec["features"].items()}
    shape = tuple(int(n) for n in spec["element_shape"])
    num_classes = int(spec["num_classes"])
    rescale = float(spec["rescale"])
    names = tuple(str(n) for n in spec.get("label_names") or range(num_classes))
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(f"data_spec is malformed ({type(e).__name__}: {e}).") from None
  sql_split.data_key(features)                    # one data feature and a label
  if any(kind not in ("int64", "float") for kind, _ in features.values()):
    raise ValueError(f"data_spec features must be int64 or float, got {features}.")
  if num_classes < 1 or len(names) != num_classes or not rescale > 0:
    raise ValueError(f"data_spec has num_classes={num_classes}, {len(names)} label "
                     f"names and rescale={rescale}; they do not fit together.")
  if features[sql_split.data_key(features)][1] != shape:
    raise ValueError(f"data_spec element_shape {list(shape)} differs from its feature "
                     f"shape {list(features[sql_split.data_key(features)][1])}.")
  return DatasetInfo(name, shape, num_classes, rescale, features, names,
                     int(num_clients), (partition,))


@dataclasses.dataclass(frozen=True)
class FederationSpec:
  """One federated split: dataset, partition, clients, seed, parameters.

  `num_clients=None` means the paper's count (FMNIST: every writer).
  `params` holds the partition's parameters; missing ones take the defaults
  listed in the module docstring, unknown ones are an error.
  """
  dataset: str
  partition: Optional[str] = None
  num_clients: Optional[int] = None
  seed: int = 0
  params: dict = dataclasses.field(default_factory=dict)

  def resolved(self) -> "FederationSpec":
    """A copy with defaults filled in and every field checked."""
    d = info(self.dataset)
    partition = self.partition or d.partitions[0]
    if partition not in d.partitions:
      raise ValueError(f"{self.dataset} has partitions {list(d.partitions)}, "
                       f"not {partition!r}.")
    if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
      raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}.")
    k = self.num_clients
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
      raise ValueError(f"num_clients must be an integer >= 1, got {k!r}.")
    if k is None and self.dataset != "fmnist":
      k = d.num_clients
    defaults = _DEFAULT_PARAMS[(self.dataset, partition)]
    unknown = set(self.params) - set(defaults)
    if unknown:
      raise ValueError(f"{self.dataset}/{partition} takes parameters "
                       f"{sorted(defaults) or 'none'}, not {sorted(unknown)}.")
    params = dict(defaults, **{key: v for key, v in self.params.items() if v is not None})
    _check_params(self.dataset, partition, params)
    return FederationSpec(self.dataset, partition, k, self.seed, params)

  @property
  def name(self) -> str:
    """Directory name, e.g. 'cifar10-pachinko-k500-seed0' or
    'fmnist-natural-seed0' (+ a hash of
    non-default parameters)."""
    s = self.resolved()
    k = "" if s.num_clients is None else f"-k{s.num_clients}"
    name = f"{s.dataset}-{s.partition}{k}-seed{s.seed}"
    defaults = dict(_DEFAULT_PARAMS[(s.dataset, s.partition)])
    if s.params != defaults:
      blob = json.dumps(s.params, sort_keys=True).encode()
      name += "-" + hashlib.sha1(blob).hexdigest()[:8]
    return name


def _check_params(dataset: str, partition: str, p: dict) -> None:
  if "iid_sizes" in p and p["iid_sizes"] not in ("equal", "keep"):
    raise ValueError(f"iid_sizes must be 'equal' or 'keep', got {p['iid_sizes']!r}.")
  for key in ("alpha", "beta"):
    if key in p:
      v = p[key]
      if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
        raise ValueError(f"{key} must be a finite number > 0, got {v!r}.")
      p[key] = float(v)
  if "coarse" in p and p["coarse"] not in CIFAR10_COARSE:
    raise ValueError(f"coarse must be one of {sorted(CIFAR10_COARSE)}, got {p['coarse']!r}.")
  epc = p.get("examples_per_client")
  if epc is not None and (isinstance(epc, bool) or not isinstance(epc, int) or epc < 1):
    raise ValueError(f"examples_per_client must be an integer >= 1, got {epc!r}.")
  if "svhn_splits" in p:
    splits = list(p["svhn_splits"])
    if not splits or set(splits) - {"train", "extra"} or len(set(splits)) != len(splits):
      raise ValueError("svhn_splits must be a non-empty subset of train, extra; "
                       f"got {splits!r}.")
    p["svhn_splits"] = [s for s in ("train", "extra") if s in splits]
