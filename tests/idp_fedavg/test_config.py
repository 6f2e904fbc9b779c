"""IDP-FedAvg's training settings: refusals that say what to change (tff_idp.idp_fedavg.config)."""
import pytest

from tff_idp.idp_fedavg import config as config_lib


def _config(**overrides):
  settings = dict(
      budgets=[1.0, 2.0, 3.0], ratios=[0.34, 0.43, 0.23], runs=["34-43-23"], seeds=[0],
      rounds=5, clients_per_round=10, local_epochs=1, batch_size=8,
      client_learning_rate=0.1, server_learning_rate=1.0, client_optimizer="sgd",
      delta=1e-4, accountant="rdp", output_dir="unused", eval_every=1,
      checkpoint_every=0, progress=False)
  settings.update(overrides)
  return config_lib.TrainingConfig(**settings)


def test_a_release_refuses_the_run_without_noise():
  """Privacy (issue 48): release_only=True holds no un-accounted training, from the library too.

  Bug caught: runners.run_idp_fedavg(release_only=True, runs=[..., "nonprivate"]) releasing a
  model trained without noise (only the command lines refused it).
  """
  with pytest.raises(ValueError, match="drop nonprivate from --runs"):
    config_lib.check_settings(_config(runs=["nonprivate", "34-43-23"], release_only=True))
  config_lib.check_settings(_config(runs=["34-43-23", "scale"], release_only=True))
  config_lib.check_settings(_config(runs=["nonprivate", "34-43-23"]))
