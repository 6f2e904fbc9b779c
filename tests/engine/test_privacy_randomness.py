"""Privacy randomness: secret by default, debug mode derivable, checkpointable (audit D2)."""
import subprocess
import sys

import pytest

from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL
from tff_idp.engine.privacy_randomness import PrivacyRandomness


def _seeds(r):
  return (r.aggregator_noise_seed(), r.sampling_seed(), r.client_seed("c1", 3),
          r.seed_counter_start())


def test_seed_counter_start_fits_the_counter_with_room_for_rounds():
  """62 uniform bits: never past 2^62, and (64 secrets) both the lowest and highest bit used.

  A mask that drops a bit fails: all 64 starts even, or all below 2^61, has
  probability 2^-64 each for the correct code.
  """
  starts = [PrivacyRandomness.secret().seed_counter_start() for _ in range(64)]
  assert all(0 <= s < 2**62 for s in starts)
  assert any(s % 2 for s in starts) and any(s >= 2**61 for s in starts)


def test_secret_randomness_differs_between_runs():
  a, b = PrivacyRandomness.secret(), PrivacyRandomness.secret()
  assert not a.reproducible
  for x, y in zip(_seeds(a), _seeds(b)):
    assert x != y


def test_debug_mode_is_a_function_of_seed_and_label_and_warns(caplog):
  with caplog.at_level("WARNING"):
    a = PrivacyRandomness.for_run(3, "idp_fedavg/50-50", reproducible=True)
  assert NOT_PRIVATE_LABEL in caplog.text
  assert a.reproducible
  assert _seeds(a) == _seeds(PrivacyRandomness.from_seed(3, "idp_fedavg/50-50"))
  # Another seed or another run (spec/method) never shares noise, even in debug mode.
  assert _seeds(a)[0] != PrivacyRandomness.from_seed(4, "idp_fedavg/50-50").aggregator_noise_seed()
  assert _seeds(a)[0] != PrivacyRandomness.from_seed(3, "idp_fedavg/100-0").aggregator_noise_seed()


def test_default_for_run_is_secret():
  a = PrivacyRandomness.for_run(3, "x")
  b = PrivacyRandomness.for_run(3, "x")
  assert not a.reproducible and a.aggregator_noise_seed() != b.aggregator_noise_seed()


def test_client_seeds_are_per_client_and_per_round_and_in_int64_range():
  r = PrivacyRandomness.secret()
  seeds = {r.client_seed(c, t) for c in ("a", "b", "c") for t in range(50)}
  assert len(seeds) == 150
  for pair in seeds:
    assert all(0 <= s < 2**63 for s in pair)
  assert 0 <= r.aggregator_noise_seed() < 2**63


def test_state_round_trip_restores_every_seed():
  a = PrivacyRandomness.secret()
  b = PrivacyRandomness.secret()
  b.set_state(a.get_state())
  assert _seeds(a) == _seeds(b)


def test_state_errors_say_what_to_do():
  r = PrivacyRandomness.secret()
  with pytest.raises(ValueError, match="fresh --output_dir"):
    r.set_state(None)
  with pytest.raises(ValueError, match="corrupt"):
    r.set_state({"secret": "ab", "reproducible": False})
  debug = PrivacyRandomness.from_seed(0, "x").get_state()
  with pytest.raises(ValueError, match="insecure_reproducible_noise"):
    r.set_state(debug)


def test_repr_hides_the_secret():
  r = PrivacyRandomness.secret()
  assert r.get_state()["secret"] not in repr(r)
  assert str(r.aggregator_noise_seed()) not in repr(r)


def test_module_imports_no_tensorflow():
  code = ("import sys, tff_idp.engine.privacy_randomness; "
          "sys.exit(1 if 'tensorflow' in sys.modules else 0)")
  assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_secrets_do_not_follow_any_seedable_generator():
  """The run secret comes from OS entropy, not from Python's or NumPy's seedable RNGs (issue 32).

  Reseeding ``random`` and ``numpy.random`` identically before two
  constructions must still give two different secrets. Bug caught: drawing
  the secret from ``random`` (Mersenne Twister, seedable and predictable
  from its outputs) instead of ``secrets``.
  """
  import random  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  random.seed(0)
  np.random.seed(0)
  a = PrivacyRandomness.secret().get_state()["secret"]
  random.seed(0)
  np.random.seed(0)
  b = PrivacyRandomness.secret().get_state()["secret"]
  assert a != b


def test_constructor_checks_the_secret_and_defaults_to_not_reproducible():
  """Only a 32-byte ``bytes`` secret is accepted; a directly built one is not marked reproducible.

  Bugs caught: the length check joined to the type check with ``and`` (a
  short secret accepted, weakening the key), and the constructor's default
  flipped to ``reproducible=True`` (a secret run labelled and resumed as the
  insecure debug mode).
  """
  assert not PrivacyRandomness(bytes(32)).reproducible
  for bad in (bytes(31), bytes(33), "x" * 32):
    with pytest.raises(ValueError, match="must be 32 bytes"):
      PrivacyRandomness(bad)


def test_repr_names_the_mode():
  """``repr`` says "secret" for a secret run and the NOT PRIVATE label for the debug mode.

  Bugs caught: the mode lost or inverted in the repr (a debug-mode object
  that logs as if it were secret, or the reverse).
  """
  secret = repr(PrivacyRandomness.secret())
  debug = repr(PrivacyRandomness.from_seed(0, "x"))
  assert "<secret>" in secret and NOT_PRIVATE_LABEL not in secret
  assert f"<{NOT_PRIVATE_LABEL}>" in debug and "<secret>" not in debug


def test_debug_warning_names_the_run_and_the_seed(caplog):
  """The insecure mode's warning says which run and which seed make the noise derivable.

  Bug caught: the label or the seed dropped from the warning's arguments.
  """
  with caplog.at_level("WARNING"):
    PrivacyRandomness.from_seed(1234567, "rpdp/some-run")
  assert "'rpdp/some-run'" in caplog.text and "1234567" in caplog.text
  assert "remove the noise" in caplog.text


def test_seeds_are_the_documented_keyed_blake2b_derivation():
  """Every seed is recomputed here from the secret with hashlib, as the module doc describes.

  Property: the aggregator seed is 8 bytes of BLAKE2b keyed by the secret
  (63 bits kept), the sampling seed 16 bytes (128 bits), and a client's
  round seed two 63-bit halves of a 16-byte BLAKE2b keyed by that client's
  own key, itself a 32-byte keyed hash of the secret (so a deployment where
  each client holds only its key derives the same seeds); the debug mode's
  secret is BLAKE2b of "tff_idp/insecure/<seed>/<label>". Bugs caught: a
  changed digest size or slice (seeds of another width, the two halves of a
  client seed overlapping), a purpose label changed (a reproducible run no
  longer re-derives its noise), the per-client key skipped.
  """
  import hashlib  # pylint: disable=g-import-not-at-top
  mask = (1 << 63) - 1
  r = PrivacyRandomness.from_seed(11, "a/b")
  secret = hashlib.blake2b(b"tff_idp/insecure/11/a/b", digest_size=32).digest()
  assert r.get_state()["secret"] == secret.hex()

  def keyed(msg, key, size):
    return hashlib.blake2b(msg.encode(), key=key, digest_size=size).digest()

  assert r.aggregator_noise_seed() == int.from_bytes(keyed("aggregator-noise", secret, 8),
                                                     "big") & mask
  assert r.sampling_seed() == int.from_bytes(keyed("client-sampling", secret, 16), "big")
  client_key = keyed("client-key/c7", secret, 32)
  digest = keyed("round/5", client_key, 16)
  assert r.client_seed("c7", 5) == (int.from_bytes(digest[:8], "big") & mask,
                                    int.from_bytes(digest[8:], "big") & mask)
