"""Command line: Fig. 1 of the paper for any built split(s).

  python -m datasets.plot --split_dir=splits/cifar10-pachinko --out=fig1.png
  python -m datasets.plot --split_dir=a,b,c --num_clients=30 --out=fig1.png

One row per split: on the left, the label distribution of its first
`--num_clients` clients as stacked bars (fraction of each label; the bar
width is the same for every client, its size is printed above it when there
is room); on the right, a histogram of all client sizes. Label counts come
from the manifest, or from `train.sqlite` for splits without one (pass
`--dataset` then). Uses matplotlib's Agg backend (no display needed).
"""
from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from absl import flags
import numpy as np

from datasets import loader
from datasets import specs
from tff_idp import cli
from tff_idp.errors import ToolkitValueError

_SPLIT_DIR = flags.DEFINE_list("split_dir", None, "Split directories (one row each).")
_OUT = flags.DEFINE_string("out", "fig1_label_distribution.png", "PNG to write.")
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 30, "Clients shown as bars.")
_DATASET = flags.DEFINE_enum("dataset", None, sorted(specs.DATASETS),
                             "Dataset of splits without a manifest.")
_BINS = flags.DEFINE_integer("bins", 40, "Histogram bins.")


def plot_splits(split_dirs: Sequence[str], out: str, num_clients: int = 30,
                dataset: Optional[str] = None, bins: int = 40) -> str:
  """Draws Fig. 1 for `split_dirs` into `out` (PNG); returns `out`."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

  rows = len(split_dirs)
  fig, axes = plt.subplots(rows, 2, figsize=(13, 3.4 * rows), squeeze=False,
                           gridspec_kw={"width_ratios": [3, 1.2]})
  for row, directory in enumerate(split_dirs):
    split = loader.open_split(directory, dataset=dataset)
    ids, counts = split.label_counts()
    sizes = counts.sum(axis=1)
    names = split.info.label_names
    title = split.manifest["name"] if split.manifest else os.path.basename(
        os.path.normpath(directory))
    shown = counts[:num_clients]
    frac = shown / np.maximum(shown.sum(axis=1, keepdims=True), 1)
    ax = axes[row, 0]
    cmap = plt.get_cmap("tab10")
    bottom = np.zeros(len(shown))
    xs = np.arange(len(shown))
    for c in range(counts.shape[1]):
      ax.bar(xs, frac[:, c], bottom=bottom, color=cmap(c % 10), width=0.85,
             label=names[c] if c < len(names) else str(c))
      bottom += frac[:, c]
    if len(shown) <= 40:
      for x, n in zip(xs, shown.sum(axis=1)):
        ax.text(x, 1.01, str(int(n)), ha="center", va="bottom", fontsize=6)
    ax.set_xlim(-0.6, len(shown) - 0.4)
    ax.set_ylim(0, 1.08)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(i) for i in xs], fontsize=6)
    ax.set_xlabel(f"client (first {len(shown)} of {len(ids)})")
    ax.set_ylabel("label fraction")
    ax.set_title(f"{title}: label distribution per client", fontsize=10)
    ax.legend(fontsize=7, ncol=1, loc="center left", bbox_to_anchor=(1.0, 0.5),
              frameon=False)
    hx = axes[row, 1]
    hx.hist(sizes, bins=bins, color="#4c72b0")
    hx.set_xlabel("examples per client")
    hx.set_ylabel("clients")
    hx.set_title(f"client sizes (n={int(sizes.sum()):,}, K={len(sizes):,})", fontsize=10)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  fig.savefig(out, dpi=130)
  plt.close(fig)
  return out


def check() -> None:
  """The data-free checks, before anything is read: the splits named, --out writable."""
  if not _SPLIT_DIR.value:
    raise ToolkitValueError(
        "--split_dir is required (one or more built split directories).")
  cli.check_output_file(_OUT.value, flag="out")


@cli.entry(rules={"num_clients": cli.Rule("int", low=1, meaning="clients shown as bars")})
def main(argv) -> int:
  del argv
  check()
  try:
    path = plot_splits([os.path.expanduser(d) for d in _SPLIT_DIR.value], _OUT.value,
                       _NUM_CLIENTS.value, _DATASET.value, _BINS.value)
  except (FileNotFoundError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"wrote {path}")
  return 0


if __name__ == "__main__":
  cli.launch(main, check, import_tensorflow=False)
