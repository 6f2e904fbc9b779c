"""Command line: build one of the paper's federated splits (Sec. V-B).

  python -m datasets.build --dataset=cifar10 --partition=pachinko \
      --num_clients=500 --seed=0 --data_dir=~/.tff --out=splits/cifar10-pachinko
  python -m datasets.build --dataset=fmnist --partition=iid --out=splits/fmnist-iid
  python -m datasets.build --dataset=svhn --out=splits/svhn-iid

Shows progress bars and prints the manifest summary (client count, sizes,
assignment checksum). Without local source files it stops at once and says
what to download; `--download` fetches them (on a machine with internet).
Exit codes: 0 built, 2 bad flags or missing/unreadable source files.
"""
from __future__ import annotations

import os
import shlex
import sys

from absl import flags

from tff_idp import cli
from tff_idp import console
from tff_idp.errors import ToolkitValueError

console.quiet_tensorflow()  # before the builders import TensorFlow; --verbose keeps its logs

# pylint: disable=g-import-not-at-top,wrong-import-position

from datasets import builder
from datasets import loader
from datasets import sources
from datasets import specs

_DATASET = flags.DEFINE_enum("dataset", None, sorted(specs.DATASETS), "Which dataset.")
_PARTITION = flags.DEFINE_string(
    "partition", None, "fmnist: natural|iid; cifar10: pachinko|dirichlet|iid; "
    "svhn: iid (default: the first).")
_NUM_CLIENTS = flags.DEFINE_integer(
    "num_clients", None, "Clients (default: the paper's 500 / 725; FMNIST: its writers).")
_SEED = flags.DEFINE_integer("seed", 0, "Partition seed; same seed, same split.")
_DATA_DIR = flags.DEFINE_string("data_dir", sources.DEFAULT_DATA_DIR,
                                "Where the source files are (see datasets/sources.py).")
_OUT = flags.DEFINE_string("out", None, "Split directory to write (default: "
                           f"{loader.DEFAULT_SPLITS_DIR}/<name>).")
_DOWNLOAD = flags.DEFINE_bool("download", False, "Fetch missing source files.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an existing split in --out.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show progress bars.")
_IID_SIZES = flags.DEFINE_enum("iid_sizes", None, ["equal", "keep"],
                               "FMNIST iid: equal sizes, or keep each writer's size.")
_ALPHA = flags.DEFINE_float("alpha", None, "Pachinko coarse / Dirichlet per-class α (0.1).")
_BETA = flags.DEFINE_float("beta", None, "Pachinko fine-label β (10).")
_COARSE = flags.DEFINE_enum("coarse", None, sorted(specs.CIFAR10_COARSE),
                            "CIFAR-10 Pachinko coarse labels (pairs).")
_EXAMPLES_PER_CLIENT = flags.DEFINE_integer(
    "examples_per_client", None, "Pachinko examples per client (n / K = 100).")
_SVHN_SPLITS = flags.DEFINE_list("svhn_splits", None,
                                 "SVHN training splits (train,extra = 604,388 images).")


def spec_from_flags() -> specs.FederationSpec:
  params = {"iid_sizes": _IID_SIZES.value, "alpha": _ALPHA.value, "beta": _BETA.value,
            "coarse": _COARSE.value, "examples_per_client": _EXAMPLES_PER_CLIENT.value,
            "svhn_splits": _SVHN_SPLITS.value}
  params = {k: v for k, v in params.items() if v is not None}
  return specs.FederationSpec(_DATASET.value, _PARTITION.value, _NUM_CLIENTS.value,
                              _SEED.value, params).resolved()


def check() -> specs.FederationSpec:
  """The data-free checks, before a source file is opened: the spec, and --out usable."""
  if _DATASET.value is None:
    raise ToolkitValueError("--dataset is required (fmnist, cifar10 or svhn).")
  spec = spec_from_flags()
  out = os.path.expanduser(_OUT.value or loader.default_split_dir(spec))
  cli.check_output_dir(out, flag="out")
  if loader.has_split(out) and not _OVERWRITE.value:
    raise ToolkitValueError(f"{out} already holds a split; pass --overwrite to rebuild it, "
                            "or another --out.")
  return spec


@cli.entry
def main(argv) -> int:
  del argv
  spec = check()
  out = os.path.expanduser(_OUT.value or loader.default_split_dir(spec))
  data_dir = os.path.expanduser(_DATA_DIR.value)
  command = "python -m datasets.build " + " ".join(shlex.quote(a) for a in sys.argv[1:])
  try:
    manifest = builder.build_split(spec, data_dir, out, download=_DOWNLOAD.value,
                                   progress=_PROGRESS.value, command=command)
  except (sources.SourceNotFoundError, sources.SourceFormatError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(builder.summary_text(manifest))
  print(f"written to     {out} (train.sqlite, test.sqlite, manifest.json)")
  return 0


if __name__ == "__main__":
  cli.launch(main, check, import_tensorflow=False)  # the builders import it when they run
