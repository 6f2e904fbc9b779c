"""IDP-FedAvg on federated EMNIST digits ("FMNIST"): the paper's presets.

IDP-FedAvg paper, Sec. V-B to V-D and Table I (FMNIST columns): 3,383
writers, ε 1-2-3, δ = 1e-5, 420 rounds, c = 30, the 14-layer CNN. Defaults
are in `experiments/presets.py`.

  python -m experiments.fmnist                          # non-i.i.d. (writers)
  python -m experiments.fmnist --iid                    # i.i.d. over the writers
  python -m experiments.fmnist --comparison=aldaghri    # ε 0.6-∞-∞ at 95-0-5
  python -m experiments.fmnist --data_dir=~/.tff --split_dir=splits/fmnist-natural

The split is built on first use from TFF's `emnist_all.sqlite` in
`--data_dir` (see `python -m datasets.build --help`).
"""
from absl import flags

from experiments import presets

PRESET = presets.PRESETS["fmnist"]
presets.define_flags(PRESET)
flags.adopt_module_key_flags(presets)  # --help lists the preset's flags as this command's

if __name__ == "__main__":
  presets.main(PRESET)
