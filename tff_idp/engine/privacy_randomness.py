"""Privacy randomness (DP noise and sampling seeds): secret by default.

A DP guarantee holds only if the adversary cannot predict the mechanism's
randomness. Knowing a noise seed, anyone can subtract the noise and read the
clipped sums; knowing a sampling seed, anyone can replay who was sampled.
So the seeds of every private random choice come from a per-run secret of
256 bits drawn from OS entropy (:func:`secrets.token_bytes`), never from the
user's ``--seeds`` (which keep controlling model init, data order, budget
assignment and synthetic data). Each (run spec, method, seed) draws its own
secret, so no two runs share noise.

Which party holds which seed (IDP-FedAvg Alg. 2; rPDP-FL Alg. 3):

* **server / trusted aggregator**: :meth:`PrivacyRandomness.aggregator_noise_seed`
  (the Gaussian noise of DP-FedAvg and of the adaptive-clipping bit; kept in
  the aggregator's server state) and :meth:`PrivacyRandomness.sampling_seed`
  (Poisson client sampling, kept in the driver's sampler);
* **each client**: :meth:`PrivacyRandomness.client_seed` (its record-level
  Poisson sampling and DP-SGD noise, rPDP-FL). Under rPDP-FL's Type I threat
  model (honest-but-curious server) the server must not be able to predict
  it. The seed travels in the client's data, which TFF places at
  ``tff.CLIENTS``: no server computation sees it. A simulation holds every
  client in one process, so the per-client keys derive from one run-level
  secret with a keyed hash (BLAKE2b); in a deployment each client draws its
  own key and never sends it.

The secret is kept only in checkpoints, which exact resume needs: **a
checkpoint is as sensitive as the raw data**. It never appears in
summaries, metrics, TensorBoard or logs (``repr`` hides it).

``reproducible=True`` (the experiments' ``--insecure_reproducible_noise``)
derives the secret from the user's seed and a run label instead. That is for
debugging and tests only: it logs a loud warning, and the experiments mark
every output with :data:`NOT_PRIVATE_LABEL`.

This module imports no TensorFlow.
"""
from __future__ import annotations

import hashlib
import logging
import secrets
from typing import Optional

NOT_PRIVATE_LABEL = "NOT PRIVATE: noise derivable from seed"
_SECRET_BYTES = 32
_INT63 = (1 << 63) - 1


class PrivacyRandomness:
  """The source of one run's noise and sampling seeds (see module docstring).

  Build it with :meth:`secret` (the default) or :meth:`for_run`. It is mutable
  only through :meth:`set_state`, which a resumed run uses to get back the
  checkpointed secret.
  """

  def __init__(self, secret: bytes, reproducible: bool = False):
    if not isinstance(secret, bytes) or len(secret) != _SECRET_BYTES:
      raise ValueError(f"the privacy secret must be {_SECRET_BYTES} bytes.")
    self._secret = secret
    self.reproducible = bool(reproducible)

  @classmethod
  def secret(cls) -> "PrivacyRandomness":
    """Fresh randomness from OS entropy: nobody can derive it."""
    return cls(secrets.token_bytes(_SECRET_BYTES), reproducible=False)

  @classmethod
  def from_seed(cls, seed: int, label: str) -> "PrivacyRandomness":
    """INSECURE debug mode: randomness derivable from (seed, label)."""
    logging.warning(
        "%s (run %r, seed %s): privacy noise and sampling are derived from the "
        "seed, so anyone who knows it can remove the noise. Use this for "
        "debugging and tests only.", NOT_PRIVATE_LABEL, label, seed)
    digest = hashlib.blake2b(f"tff_idp/insecure/{int(seed)}/{label}".encode(),
                             digest_size=_SECRET_BYTES).digest()
    return cls(digest, reproducible=True)

  @classmethod
  def for_run(cls, seed: int, label: str, reproducible: bool = False
              ) -> "PrivacyRandomness":
    """Secret randomness, or (``reproducible``) the insecure debug derivation."""
    return cls.from_seed(seed, label) if reproducible else cls.secret()

  # -- derived seeds ---------------------------------------------------------
  def _derive(self, purpose: str, size: int = 8) -> bytes:
    return hashlib.blake2b(purpose.encode(), key=self._secret, digest_size=size).digest()

  def aggregator_noise_seed(self) -> int:
    """Seed of the server-side (aggregator) Gaussian noise, in [0, 2^63)."""
    return int.from_bytes(self._derive("aggregator-noise"), "big") & _INT63

  def sampling_seed(self) -> int:
    """128-bit seed of the server's Poisson client sampler."""
    return int.from_bytes(self._derive("client-sampling", 16), "big")

  def seed_counter_start(self) -> int:
    """Secret start of rPDP-FL's / APES's client-work seed counter, in [0, 2^62).

    Every client seed of the run has the counter folded in
    (``tff_idp.engine.tff_composition.round_counter``), so two runs on the
    same client dataset objects draw different noise (issue 48).
    """
    return int.from_bytes(self._derive("seed-counter-start"), "big") & ((1 << 62) - 1)

  def client_seed(self, client_id: str, round_num: int) -> tuple[int, int]:
    """A client's stateless seed for one round (record sampling, DP-SGD noise).

    Keyed by a per-client key, itself a keyed hash of the run secret: a
    client's seeds reveal nothing about another client's.
    """
    client_key = self._derive(f"client-key/{client_id}", _SECRET_BYTES)
    digest = hashlib.blake2b(f"round/{int(round_num)}".encode(), key=client_key,
                             digest_size=16).digest()
    return (int.from_bytes(digest[:8], "big") & _INT63,
            int.from_bytes(digest[8:], "big") & _INT63)

  # -- checkpointing -----------------------------------------------------------
  def get_state(self) -> dict:
    """For checkpoints only (they are then as sensitive as the raw data)."""
    return {"secret": self._secret.hex(), "reproducible": self.reproducible}

  def set_state(self, state: Optional[dict]) -> None:
    if not state or "secret" not in state:
      raise ValueError("the checkpoint holds no privacy randomness; it was written by "
                       "an older tff_idp. Use a fresh --output_dir.")
    secret = bytes.fromhex(state["secret"])
    if len(secret) != _SECRET_BYTES:
      raise ValueError("the checkpoint's privacy secret is corrupt; use a fresh "
                       "--output_dir.")
    if bool(state.get("reproducible")) != self.reproducible:
      raise ValueError(
          "the checkpoint was written with --insecure_reproducible_noise "
          f"{'on' if state.get('reproducible') else 'off'}; resume it with the same "
          "setting or use a fresh --output_dir.")
    self._secret = secret

  def __repr__(self) -> str:
    mode = NOT_PRIVATE_LABEL if self.reproducible else "secret"
    return f"PrivacyRandomness(<{mode}>)"
