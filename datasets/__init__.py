"""Datasets for `tff_idp` experiments (embedded, no network access needed)."""
