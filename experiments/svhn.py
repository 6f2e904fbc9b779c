"""IDP-FedAvg on federated SVHN: the paper's presets.

IDP-FedAvg paper, Sec. V-B to V-D and Table I (SVHN column; the paper has
no non-i.i.d. SVHN): 725 i.i.d. clients over train + extra (604,388 images),
ε 10-20-30, δ = 1e-4, 420 rounds, c = 30, the 14-layer CNN. Defaults are in
`experiments/presets.py`.

  python -m experiments.svhn
  python -m experiments.svhn --data_dir=~/data/svhn --split_dir=splits/svhn-iid

The split is built on first use from `{train,extra,test}_32x32.mat` (or a
TFDS-prepared `svhn_cropped/`) in `--data_dir`.
"""
from absl import flags

from experiments import presets

PRESET = presets.PRESETS["svhn"]
presets.define_flags(PRESET)
flags.adopt_module_key_flags(presets)  # --help lists the preset's flags as this command's

if __name__ == "__main__":
  presets.main(PRESET)
