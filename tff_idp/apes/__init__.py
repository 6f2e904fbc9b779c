"""APES / S-APES (shuffled personalized LDP federated learning) on TFF 0.87.

Public API:

* randomizers (:mod:`tff_idp.apes.clip_laplace`, :mod:`tff_idp.apes.sparsify`):
  :func:`perturb` (Clip-Laplace, Def. 4), :func:`laplace_perturb` (PLDP/UniS
  baseline), :func:`sparsify_perturb` (S-APES Alg. 2: the sound random
  b-subset by default, the paper's post-top-b as ``selection="top_b"``),
  :func:`expected_value`
  (Eq. (1)), :func:`client_seed`;
* server de-bias (:mod:`tff_idp.apes.debias`): :func:`build_grid`, :func:`invert`;
* :class:`ShuffledPersonalizedMeanFactory`, the analyzer as a TFF aggregator;
* :func:`build_ldp_client_work`, :func:`build_apes_process` and
  :func:`make_client_input` / :func:`make_round_inputs`, the learning process
  and its client inputs.

The privacy accounting (shuffle amplification, composition) lives in
``tff_idp.accounting.shuffle``.
"""
from tff_idp.apes.aggregator import ShuffledPersonalizedMeanFactory
from tff_idp.apes.clip_laplace import (client_seed, expected_value, laplace_perturb, perturb,
                                      round_seed, sample_from_uniforms)
from tff_idp.apes.client_work import (MECHANISMS, SPARSE_SELECTION, build_ldp_client_work,
                                     make_client_input, make_round_inputs, randomize)
from tff_idp.apes.debias import DebiasGrid, build_grid, invert
from tff_idp.apes.process import build_apes_process
from tff_idp.apes.sparsify import SELECTIONS, per_coordinate_epsilon, sparsify_perturb

__all__ = [
    "MECHANISMS", "SELECTIONS", "SPARSE_SELECTION", "DebiasGrid",
    "ShuffledPersonalizedMeanFactory", "build_apes_process", "build_grid",
    "build_ldp_client_work", "client_seed", "expected_value", "invert", "laplace_perturb",
    "make_client_input", "make_round_inputs", "per_coordinate_epsilon", "perturb",
    "randomize", "round_seed", "sample_from_uniforms", "sparsify_perturb",
]
