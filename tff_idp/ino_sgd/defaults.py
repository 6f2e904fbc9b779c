"""The defaults of an INO-SGD run (no TensorFlow: command lines list them before it loads).

Shared by ``experiments.ino_sgd``'s flags (directly, or through its default
``embedded`` preset) and :func:`tff_idp.runners.run_ino_sgd`'s arguments of
the same names (issue 34 item 2), so the command line and the library run the
same comparison on the same split unless told otherwise. The INO-SGD paper
publishes none of T, b, η, γ, α, β (notes §1.5): η = 8, T = 1,000 and the
Beta(4, 1) tail at γ = 0.5·E[Σ q C] come from the sweep on the embedded task
(docs/ino_sgd.md); γ ≤ ½·E[Σ q C] is the paper's guidance (D.4.2).

δ = 1e-5 is the INO-SGD paper's, for every owner and every setting (D.1.1;
notes §1.4-1.5), one tenth of the 1e-4 that the IDP-FedAvg, rPDP-FL (its paper's
§7, outside Heart) and APES (user level) defaults use. Each family keeps
its paper's δ so that its tables compare with the paper's; pass ``delta``
(``--delta=1e-4``) to run INO-SGD at the others' δ.

The command line's presets (:data:`PRESETS`, INO-SGD paper Table 3's settings
MN, CM and CL, and the embedded one) are here too, beside the defaults the
embedded preset takes.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from tff_idp.ino_sgd import methods

DEFAULTS = dict(
    budgets="0-4:0.1,5-9:1", methods=methods.METHODS,
    drop_percents=(10.0, 30.0, 50.0), seeds=(0, 1, 2, 3, 4), steps=1000, expected_batch=None,
    learning_rate=8.0, clip_norm=1.0, mechanism="sample", delta=1e-5, ino_gamma_ratio=0.5,
    ino_alpha=4.0, ino_beta=1.0, model="auto", eval_every=100, train_examples=0,
    test_examples=0, data_seed=0, budget_seed=0, progress=True, release_only=False)
"""Every setting's default; ``expected_batch=None`` is :func:`expected_batch`'s rule."""

# The embedded preset's data: how many Synthetic IID records it pools (its
# own size, not a subset of your data: with your split every record is used).
EMBEDDED_TRAIN_EXAMPLES = 20000
EMBEDDED_TEST_EXAMPLES = 5000


def expected_batch(given: Optional[float], records: int) -> float:
  """b = Σ_n q_n|D_n|: ``given``, else a tenth of the ``records``, at least 1, at most 1,000."""
  if given is not None:
    return float(given)
  return float(min(1000.0, max(1.0, records / 10)))


@dataclasses.dataclass(frozen=True)
class Preset:
  """One INO-SGD setting: data, owners (class → owner), budgets, mechanism, hyperparameters."""
  name: str
  dataset: str                       # "synthetic", "fmnist" or "cifar10"
  model: str                         # "logistic", "pc_mnist", "pc_cifar"
  owners: tuple[tuple[int, ...], ...]  # classes of each owner
  epsilons: tuple[float, ...]
  mechanism: str
  steps: int
  expected_batch: Optional[float]    # None: a tenth of the records, at most 1,000
  learning_rate: float
  clip_norm: float
  ino_gamma_ratio: float
  ino_alpha: float
  ino_beta: float
  train_examples: int
  test_examples: int
  paper: Optional[dict] = None       # Table 3 numbers, where the paper printed them

  @property
  def owner_names(self) -> tuple[str, ...]:
    return tuple(methods.classes_name(c) for c in self.owners)


_TEN = tuple((c,) for c in range(10))
PRESETS = {
    # The defaults above on the embedded data; its owners are those of DEFAULTS["budgets"].
    "embedded": Preset("embedded (MN setting, Synthetic IID)", "synthetic", "logistic",
                       ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)), (0.1, 1.0), DEFAULTS["mechanism"],
                       steps=DEFAULTS["steps"], expected_batch=DEFAULTS["expected_batch"],
                       learning_rate=DEFAULTS["learning_rate"], clip_norm=DEFAULTS["clip_norm"],
                       ino_gamma_ratio=DEFAULTS["ino_gamma_ratio"],
                       ino_alpha=DEFAULTS["ino_alpha"], ino_beta=DEFAULTS["ino_beta"],
                       train_examples=EMBEDDED_TRAIN_EXAMPLES,
                       test_examples=EMBEDDED_TEST_EXAMPLES),
    "mn": Preset("MN (EMNIST digits, 2 owners)", "fmnist", "pc_mnist",
                 ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)), (0.1, 1.0), "sample",
                 steps=1000, expected_batch=1000, learning_rate=2.0, clip_norm=1.0,
                 ino_gamma_ratio=0.5, ino_alpha=4.0, ino_beta=1.0,
                 train_examples=0, test_examples=0),
    "cm": Preset("CM (CIFAR-10, 10 owners, ε 0.5..5, SCALE)", "cifar10", "pc_cifar", _TEN,
                 tuple(np.round(np.linspace(0.5, 5, 10), 6)), "scale",
                 steps=1000, expected_batch=1024, learning_rate=2.0, clip_norm=1.0,
                 ino_gamma_ratio=0.5, ino_alpha=1.0, ino_beta=1.0,
                 train_examples=0, test_examples=0),
    "cl": Preset("CL (CIFAR-10, 10 owners, ε 6..15, SCALE)", "cifar10", "pc_cifar", _TEN,
                 tuple(np.round(np.linspace(6, 15, 10), 6)), "scale",
                 steps=1000, expected_batch=1024, learning_rate=2.0, clip_norm=1.0,
                 ino_gamma_ratio=0.5, ino_alpha=1.0, ino_beta=1.0,
                 train_examples=0, test_examples=0,
                 paper={"IDP-SGD": 63.35, "Drop 10%": 62.48, "Drop 20%": 61.64,
                        "Drop 30%": 60.41, "Drop 40%": 58.83, "Drop 50%": 56.47,
                        "INO-SGD": 66.73, "_source": "Table 3, CL-PC (5 runs)"}),
}
"""``--preset``'s settings (module doc of ``experiments.ino_sgd``, docs/ino_sgd.md)."""
