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
"""
from __future__ import annotations

from typing import Optional

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
