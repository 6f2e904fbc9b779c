"""Finds privacy secrets (from checkpoints) anywhere they must not be (audit D2)."""
import json
import pathlib

from tff_idp.engine.privacy_randomness import PrivacyRandomness


def checkpoint_secrets(output_dir) -> list[str]:
  """Every secret a run's checkpoints hold, as the strings an output could leak."""
  found = []
  for meta_path in pathlib.Path(output_dir).rglob("checkpoints/ckpt_*.json"):
    meta = json.loads(meta_path.read_text())
    state = meta.get("privacy_randomness")
    assert state and state.get("secret"), f"{meta_path} holds no privacy secret"
    randomness = PrivacyRandomness.secret()
    randomness.set_state(state)
    found += [state["secret"], str(randomness.aggregator_noise_seed()),
              str(randomness.sampling_seed()), hex(randomness.sampling_seed())[2:]]
    sampler = meta["sampler"]["state"]
    found += [str(sampler["state"]), str(sampler["inc"])]
  assert found, f"no checkpoints under {output_dir}"
  return found


def assert_no_secret_outside_checkpoints(output_dir, *texts: str) -> None:
  secrets = checkpoint_secrets(output_dir)
  for path in pathlib.Path(output_dir).rglob("*"):
    if path.is_file() and "checkpoints" not in path.parts:
      data = path.read_bytes()
      for secret in secrets:
        assert secret.encode() not in data, f"secret material in {path}"
  for text in texts:
    for secret in secrets:
      assert secret not in text, "secret material in the console output"
