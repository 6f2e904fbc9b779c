"""TF-free privacy accounting for APES / S-APES (shuffled personalized LDP).

Imports NumPy, SciPy and dp-accounting only. Modules, one job each:

* ``clip_laplace_reference`` — NumPy Clip-Laplace randomizer and de-bias grid.
* ``echoes`` — Lemma 4 and exact clone probabilities, EoN's S in O(n log n).
* ``reduction`` — the clone reduction: clone-count pmfs, exact hockey-stick δ(ε).
* ``fmt22`` — FMT22 closed form, the paper's Eq. (2), Apple's numeric loops.
* ``eon`` — EoN Thm 4 and the tables' numeric procedure (as published, unverified).
* ``per_user`` — the sound per-user / population bound (and the soundness findings).
* ``soundness`` — true shuffled δ(ε) for tiny n, rigorous lower bounds for large n.
* ``composition`` — user-level composition: exact, dp-accounting PLD, the paper's.
* ``ledger`` — :class:`ApesLedger`, per-round and cumulative accounts.
"""
from tff_idp.accounting.shuffle import clip_laplace_reference
from tff_idp.accounting.shuffle import composition
from tff_idp.accounting.shuffle import echoes
from tff_idp.accounting.shuffle import eon
from tff_idp.accounting.shuffle import fmt22
from tff_idp.accounting.shuffle import per_user
from tff_idp.accounting.shuffle import reduction
from tff_idp.accounting.shuffle import soundness
from tff_idp.accounting.shuffle.composition import Composed
from tff_idp.accounting.shuffle.echoes import eon_sums
from tff_idp.accounting.shuffle.echoes import exact_clone_probability
from tff_idp.accounting.shuffle.ledger import BOUNDS
from tff_idp.accounting.shuffle.ledger import ApesLedger
from tff_idp.accounting.shuffle.ledger import CumulativeAccount
from tff_idp.accounting.shuffle.ledger import RoundAccount
from tff_idp.accounting.shuffle.per_user import PerUserBound
from tff_idp.accounting.shuffle.per_user import PopulationBound
from tff_idp.accounting.shuffle.per_user import population_bound

__all__ = [
    "clip_laplace_reference", "composition", "echoes", "eon", "fmt22", "per_user",
    "reduction", "soundness", "ApesLedger", "BOUNDS", "Composed", "CumulativeAccount",
    "RoundAccount", "PerUserBound", "PopulationBound", "eon_sums",
    "exact_clone_probability", "population_bound",
]
