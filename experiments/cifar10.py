"""IDP-FedAvg on federated CIFAR-10: the paper's presets.

IDP-FedAvg paper, Sec. V-B to V-D and Table I (CIFAR-10 columns): 500
clients, Pachinko allocation (non-i.i.d., default), `--partition=dirichlet`
(the published split's procedure) or `--iid`; ε 10-20-30, δ = 1e-4, 420
rounds, c = 30, the 14-layer CNN. Defaults are in `experiments/presets.py`.

  python -m experiments.cifar10                         # Pachinko
  python -m experiments.cifar10 --partition=dirichlet
  python -m experiments.cifar10 --iid
  python -m experiments.cifar10 --data_dir=~/data --split_dir=splits/cifar10-pachinko

The split is built on first use from `cifar-10-python.tar.gz` (or
`cifar-10-batches-py/`) in `--data_dir` (see `python -m datasets.build --help`).
"""
from absl import flags

from experiments import presets

PRESET = presets.PRESETS["cifar10"]
presets.define_flags(PRESET)
flags.adopt_module_key_flags(presets)  # --help lists the preset's flags as this command's

if __name__ == "__main__":
  presets.main(PRESET)
