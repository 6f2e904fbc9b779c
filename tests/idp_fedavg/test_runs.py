"""IDP-FedAvg's run template: what each seed's driver is built with (issue 32)."""
import collections
import types

import pytest
import tensorflow as tf

from tff_idp.idp_fedavg import config as config_lib
from tff_idp.idp_fedavg import runs


class _Built(Exception):
  """Raised by the stand-in driver once it has seen what the run built."""


def _capture_driver(monkeypatch):
  seen = []

  class Driver:  # the RoundDriver stand-in: records its sampler, runs nothing
    def __init__(self, **kwargs):
      seen.append(kwargs["sampler"])
      raise _Built()

  monkeypatch.setattr(runs, "RoundDriver", Driver)
  monkeypatch.setattr(runs._IdpFedAvgRuns, "_build_process",  # pylint: disable=protected-access
                      lambda self, *a, **k: object())
  monkeypatch.setattr(runs, "_ProcessWithSecretNoise", lambda *a, **k: None)
  return seen


def _family(tmp_path, insecure=False):
  config = config_lib.TrainingConfig(
      budgets=[1.0, 2.0, 3.0], ratios=[0.34, 0.43, 0.23], runs=["34-43-23"], seeds=[0],
      rounds=5, clients_per_round=10, local_epochs=1, batch_size=8,
      client_learning_rate=0.1, server_learning_rate=1.0, client_optimizer="sgd",
      delta=1e-4, accountant="rdp", output_dir=str(tmp_path), eval_every=1,
      checkpoint_every=0, progress=False, insecure_reproducible_noise=insecure)
  train_data = types.SimpleNamespace(
      client_ids=[f"c{i}" for i in range(200)],
      element_type_structure=collections.OrderedDict(
          x=tf.TensorSpec([4], tf.float32), y=tf.TensorSpec([], tf.int32)))
  return runs._IdpFedAvgRuns(config, train_data, None, None, None, None, ())  # pylint: disable=protected-access


def _first_cohorts(sampler, rounds=3):
  return [tuple(sampler.sample()) for _ in range(rounds)]


def test_client_sampler_is_seeded_from_the_run_secret_not_the_public_seed(monkeypatch, tmp_path):
  """Two runs with the same ``--seeds`` draw different cohorts unless the insecure mode is on.

  Bug caught: the Poisson client sampler seeded from the public seed (or
  anything derivable from it) instead of the run's secret: the cohorts, part
  of the privacy randomness, would then be predictable. Cohorts of 200
  clients at c = 10 over 3 rounds coincide by chance with negligible
  probability. The insecure debug mode reproduces them (the control).
  """
  seen = _capture_driver(monkeypatch)
  spec = runs.privacy_plan.parse_run_spec("34-43-23", [0.34, 0.43, 0.23], 3)
  for insecure in (False, False, True, True):
    family = _family(tmp_path, insecure)
    family.begin_spec(spec)
    with pytest.raises(_Built):
      family.run_seed(spec, 0)
  secret_a, secret_b, debug_a, debug_b = (_first_cohorts(s) for s in seen)
  assert secret_a != secret_b
  assert debug_a == debug_b
  assert secret_a != debug_a


def test_default_count_noise_is_feasible_whenever_the_calibration_is(tmp_path):
  """Issue 33 item 6: --rounds=200 was refused for 100-0-0 (σ >= 2·0.05·c); the default now
  falls back to σ_b = σ (z_Δ = σ/√0.75), and settings where 0.05·c works are unchanged."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  import math  # pylint: disable=g-import-not-at-top
  family = _family(tmp_path)
  long = dataclasses.replace(family.config, rounds=200, runs=["100-0-0"])
  spec = runs.privacy_plan.parse_run_spec("100-0-0", [0.34, 0.43, 0.23], 3)
  plan = runs.privacy_plan.make_privacy_plan(spec, long.budgets, 200, long.clients_per_round,
                                             long.rounds, long.delta, long.accountant, seed=0)
  assert plan.noise_multiplier >= 2 * 0.05 * long.clients_per_round  # the old default fails
  sigma_b, z_value = runs.noise_split(long, plan)
  assert sigma_b == plan.noise_multiplier
  assert z_value == pytest.approx(plan.noise_multiplier / math.sqrt(0.75), rel=1e-9)
  short = dataclasses.replace(family.config, rounds=2, runs=["nonprivate"], budgets=[8.0, 8.0, 8.0])
  easy = runs.privacy_plan.make_privacy_plan(spec, short.budgets, 200, short.clients_per_round,
                                             short.rounds, short.delta, short.accountant, seed=0)
  assert easy.noise_multiplier < 2 * 0.05 * easy.expected_clients_per_round
  assert runs.noise_split(short, easy)[0] == pytest.approx(0.05 * easy.expected_clients_per_round)
  explicit = dataclasses.replace(long, clipped_count_stddev=0.1)
  with pytest.raises(ValueError, match="--clipped_count_stddev > σ/2"):
    runs.noise_split(explicit, plan)


def test_the_table_opens_with_the_training_settings():
  """Issue 34 item 3: the table says what it trained with (defaults included)."""
  config = config_lib.TrainingConfig(
      budgets=[1.0], ratios=[1.0], runs=["nonprivate"], seeds=[0, 1], rounds=12,
      clients_per_round=7.0, local_epochs=1, batch_size=8, client_learning_rate=0.25,
      server_learning_rate=0.9, client_optimizer="adam", delta=1e-5, accountant="rdp",
      output_dir="unused", eval_every=1, checkpoint_every=1, initial_clip=3.0)
  line = runs.training_line(config)
  for text in ("12 rounds", "7 expected clients", "1 local epoch at batch 8", "adam lr 0.25",
               "server lr 0.9", "clip from 3", "δ=1e-05"):
    assert text in line, (text, line)
