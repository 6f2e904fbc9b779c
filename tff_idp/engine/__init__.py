"""The family-agnostic engine: round driver, checkpoints, metrics, evaluation,
client sampling, privacy randomness and the TFF composition helpers.

It imports no algorithm family and no audit (a contract test checks it).
"""
