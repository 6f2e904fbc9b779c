"""The defaults of an APES / S-APES run (no TensorFlow: command lines list them before it loads).

Shared by ``experiments.apes``'s flags and :func:`tff_idp.runners.run_apes`'s
arguments of the same names (issue 34 item 2). The training settings are the
APES paper's reference code's (notes §2.4: 10 local FedProx epochs, batch 32,
learning rate 1, μ = 0.01, C = 0.1) with fewer rounds than its 40, so that the
embedded run finishes in minutes on 2 cores (the ``paper`` preset restores
40). ``shuffle_delta=None`` is :func:`tff_idp.apes.runs.default_shuffle_delta`'s
δ/(10·d·T); ``delta`` is the user-level δ^{uc} (the paper's Table 4: 3.6e-5).
"""
from __future__ import annotations

from tff_idp.apes import runs

# The command line's presets: the users and rounds each runs (users=None: all
# the data holds). The runner takes your users; its rounds are the embedded one's.
PRESETS = {
    "embedded": dict(users=1000, rounds=5),
    "paper": dict(users=None, rounds=40),  # 10,000, or what the data holds
}

DEFAULTS = dict(
    frameworks=tuple(runs.FRAMEWORKS), distribution="uniform2", epsilon_seed=0,
    rounds=PRESETS["embedded"]["rounds"], local_epochs=10, batch_size=32,
    client_learning_rate=1.0, proximal_strength=0.01, clip=0.1, keep_fraction=0.2,
    bound="per_user", shuffle_delta=None, delta=1e-4, seed=0, eval_every=1,
    checkpoint_every=2, device="cpu", progress=True, restart=False,
    insecure_reproducible_noise=False, client_execution="auto")
"""Every training, privacy and output setting's default (the data's are the command line's)."""

DATA_DEFAULTS = dict(preset="embedded", users=PRESETS["embedded"]["users"], samples_per_user=12,
                     data_seed=0)
"""The command line's data settings (``datasets.shuffle_users`` builds the users from them)."""
