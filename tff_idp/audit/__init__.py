"""Empirical privacy audit: canaries and the one-shot ε estimator (Andrew et al., ICLR 2024)."""
