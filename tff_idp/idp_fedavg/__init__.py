"""IDP-FedAvg (paper: idp-fedavg-client-sampling.md): DP-FedAvg with adaptive
clipping and per-group client sampling rates from SAMPLE (Alg. 1); SCALE and the
non-private and uniform-DP baselines.

Modules: aggregators (the adaptive-clip DP mean, SCALE's weighting), process
(the learning process), in_process (the fast client execution), plan (a run
specification's calibration), runs (the run template for this family),
calibrate (the ε ⇄ σ, q command line).
"""
