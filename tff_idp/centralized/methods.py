"""The centralized comparison's methods (rPDP-FL §7.1), without TensorFlow (for flag checks)."""

DP_SGD_METHODS = ("scf", "binary_search", "exact")
"""rPDP-SGD with per-record rates from SCF (Alg. 2), BinarySearch (IDP-SGD) or the exact inverse."""
METHODS = DP_SGD_METHODS + ("filter",)
"""... and private full-batch GD with an individual Rényi filter (Feldman & Zrnic 2021)."""
METHOD_NAMES = {"scf": "SCF", "binary_search": "BinarySearch", "exact": "Exact",
                "filter": "Filter"}
"""Each method's name in the tables."""
