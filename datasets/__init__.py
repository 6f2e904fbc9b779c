"""Datasets for `tff_idp` experiments.

* `datasets.synthetic`: the embedded Synthetic(α, β) federation (no files).
* The paper's federations (IDP-FedAvg, Sec. V-B): `datasets.partition`
  (pure-numpy partitioners), `datasets.sources` (local source files, offline
  errors), `datasets.builder` / `python -m datasets.build` (sqlite splits
  with a manifest), `datasets.loader.load_federated` (one call: train
  ClientData + test set) and `python -m datasets.plot` (Fig. 1).
"""
