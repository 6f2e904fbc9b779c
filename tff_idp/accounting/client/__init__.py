"""Client-level accounting (IDP-FedAvg): SAMPLE (Alg. 1), SCALE and the
per-group ledger. No TensorFlow.
"""
