"""The defaults of an rPDP-FL run (no TensorFlow: command lines list them before it loads).

Shared by ``experiments.rpdp``'s flags and :func:`tff_idp.runners.run_rpdp`, so
that the CLI and the library run the same experiment unless told otherwise
(rPDP-FL §7.2's setting: T, τ, λ, σ, L, η, δ).
"""

DEFAULTS = dict(rounds=30, local_steps=10, client_rate=0.5, noise_multiplier=2.0,
                clip_norm=1.0, learning_rate=1.0, delta=1e-4, threat_model="type2",
                privacy_free_batch=64.0, eval_every=5, checkpoint_every=5)
