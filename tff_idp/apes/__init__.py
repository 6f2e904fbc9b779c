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
  and its client inputs;
* :func:`build_apes_driver_process`, the same round with every user's client
  work vectorized in this process (:class:`VectorizedLdpUpdate`, inputs
  :class:`LdpClientArrays`) for dense models.

The privacy accounting (shuffle amplification, composition) lives in
``tff_idp.accounting.shuffle``. The names load their module (and TensorFlow)
on first use, so ``tff_idp.apes.runs`` can be imported before TensorFlow.
"""
from tff_idp import lazy_exports as _lazy_exports

_EXPORTS = {
    "ShuffledPersonalizedMeanFactory": "tff_idp.apes.aggregator",
    **dict.fromkeys(("client_seed", "expected_value", "laplace_perturb", "perturb",
                     "round_seed", "sample_from_uniforms"), "tff_idp.apes.clip_laplace"),
    **dict.fromkeys(("MECHANISMS", "SPARSE_SELECTION", "build_ldp_client_work",
                     "make_client_input", "make_round_inputs", "randomize"),
                    "tff_idp.apes.client_work"),
    **dict.fromkeys(("DebiasGrid", "build_grid", "invert"), "tff_idp.apes.debias"),
    **dict.fromkeys(("build_apes_process", "build_apes_driver_process"),
                    "tff_idp.apes.process"),
    **dict.fromkeys(("LdpClientArrays", "VectorizedLdpUpdate"), "tff_idp.apes.vectorized"),
    **dict.fromkeys(("SELECTIONS", "per_coordinate_epsilon", "sparsify_perturb"),
                    "tff_idp.apes.sparsify"),
}
__all__ = sorted(_EXPORTS)
__getattr__ = _lazy_exports.getattr_for(__name__, _EXPORTS)
