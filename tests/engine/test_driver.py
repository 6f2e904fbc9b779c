"""Round driver: exact resume, ledger enforcement, checkpoint safety (small TFF runs)."""
import collections
import json
import warnings

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
tff = pytest.importorskip("tensorflow_federated")

from datasets import synthetic  # pylint: disable=g-import-not-at-top
from tff_idp import models
from tff_idp.accounting.client import ledger as ledger_lib
from tff_idp.engine.privacy_randomness import NOT_PRIVATE_LABEL
from tff_idp.engine.privacy_randomness import PrivacyRandomness
from tff_idp.engine.sampling import PoissonClientSampler
from tff_idp.engine import checkpoint
from tff_idp.idp_fedavg import plan as privacy_plan
from tff_idp.engine.driver import RoundDriver
from tff_idp.engine.metrics import read_metrics
from tff_idp.idp_fedavg.process import build_idp_fedavg_process

pytestmark = pytest.mark.usefixtures("tff_runtime")

NUM_CLIENTS, COHORT, ROUNDS = 40, 8, 4
BUDGETS = [4.0, 8.0]


@pytest.fixture(scope="module")
def setup():
  train, _, central = synthetic.load_synthetic(
      synthetic.SyntheticConfig(num_clients=NUM_CLIENTS, iid=True, seed=3))
  test = next(iter(central.batch(100000)))
  builder = lambda: models.build_logistic_regression(60, 10, seed=0)
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 60], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  plan_args = dict(budgets=BUDGETS, num_clients=NUM_CLIENTS, clients_per_round=COHORT,
                   rounds=ROUNDS, delta=1e-3, accountant="rdp", seed=0)
  plan = privacy_plan.make_privacy_plan(
      privacy_plan.parse_run_spec("50-50", [0.5, 0.5], 2), **plan_args)
  process = build_idp_fedavg_process(
      models.tff_model_fn(builder, spec),
      client_optimizer=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0),
      noise_multiplier=plan.noise_multiplier,
      expected_clients_per_round=plan.expected_clients_per_round,
      aggregator_kwargs=dict(noise_seed=42, clipped_count_stddev=2.0))

  def evaluate(weights):
    model = builder()
    weights.assign_weights_to(model)
    logits = model(test["x"]).numpy()
    return {"accuracy": float(np.mean(np.argmax(logits, -1) == test["y"].numpy()))}

  return dict(train=train, plan=plan, plan_args=plan_args, process=process,
              evaluate=evaluate)


def _driver(setup, out_dir, fail_at_round=None, allow_overrun=False, calibrated=ROUNDS,
            pad=False, **driver_kwargs):
  train, plan = setup["train"], setup["plan"]

  def client_input(cid, round_num):
    if round_num == fail_at_round:
      raise KeyboardInterrupt("simulated kill")
    return train.create_tf_dataset_for_client(cid).shuffle(
        64, seed=round_num).batch(16)

  ledger = ledger_lib.GroupPrivacyLedger(
      plan.ledger.target_epsilons, plan.ledger.sampling_rates,
      plan.ledger.noise_multipliers, plan.ledger.delta, calibrated, "rdp",
      allow_overrun=allow_overrun)
  return RoundDriver(
      process=setup["process"],
      sampler=PoissonClientSampler(train.client_ids, plan.client_rates, seed=5),
      client_input_fn=client_input, output_dir=str(out_dir), ledger=ledger,
      group_names=["eps4", "eps8"], evaluate_fn=setup["evaluate"], eval_every=1,
      checkpoint_every=2, run_fingerprint=plan.summary(), progress=False,
      padding_input_fn=(lambda: train.create_tf_dataset_for_client(
          train.client_ids[0]).take(0).batch(16)) if pad else None,
      **dict(dict(tensorboard=False), **driver_kwargs))


def _comparable(rows):
  return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_killed_and_resumed_run_equals_uninterrupted_run(setup, tmp_path):
  straight = _driver(setup, tmp_path / "straight")
  straight.run(ROUNDS)
  expected = read_metrics(tmp_path / "straight" / "metrics.csv")

  interrupted = _driver(setup, tmp_path / "resumed", fail_at_round=4)
  with pytest.raises(KeyboardInterrupt):
    interrupted.run(ROUNDS)  # rounds 1-3 ran; the last checkpoint is round 2
  assert checkpoint.latest_round(str(tmp_path / "resumed" / "checkpoints")) == 2
  assert len(read_metrics(tmp_path / "resumed" / "metrics.csv")) == 3

  resumed = _driver(setup, tmp_path / "resumed")
  resumed.run(ROUNDS)
  for name in ("metrics.csv", "diagnostics.csv"):
    expected = read_metrics(tmp_path / "straight" / name)
    got = read_metrics(tmp_path / "resumed" / name)
    assert [r["round"] for r in got] == [1, 2, 3, 4]
    for e, g in zip(_comparable(expected), _comparable(got)):
      assert e.keys() == g.keys()
      for k in e:
        if e[k] is None:
          assert g[k] is None, k
        else:
          assert g[k] == pytest.approx(e[k], rel=1e-5, abs=1e-7), (k, e["round"])
  got = read_metrics(tmp_path / "resumed" / "metrics.csv")
  # Spent privacy was restored, not reset.
  assert resumed.ledger.rounds_done == ROUNDS
  assert got[-1]["epsilon_eps4"] == pytest.approx(resumed.ledger.spent()[0])
  assert got[-1]["epsilon_eps4"] <= BUDGETS[0]


def test_ledger_refuses_to_run_past_calibrated_rounds(setup, tmp_path):
  driver = _driver(setup, tmp_path, calibrated=2)
  with pytest.raises(ledger_lib.BudgetExhaustedError, match="calibrated for 2 rounds"):
    driver.run(3)
  assert checkpoint.latest_round(str(tmp_path / "checkpoints")) is None


def test_overrun_when_allowed_is_reported(setup, tmp_path):
  driver = _driver(setup, tmp_path, calibrated=1, allow_overrun=True)
  with pytest.warns(ledger_lib.BudgetOverrunWarning):
    driver.run(2)
  rows = read_metrics(tmp_path / "metrics.csv")
  assert rows[-1]["epsilon_eps4"] > BUDGETS[0] or driver.ledger.spent()[0] > rows[0]["epsilon_eps4"]
  assert driver.ledger.rounds_done == 2


def test_checkpoint_from_other_calibration_is_refused(setup, tmp_path):
  _driver(setup, tmp_path).run(2)
  other = _driver(setup, tmp_path)
  other.run_fingerprint = {"different": True}
  other.__post_init__()
  with pytest.raises(checkpoint.CheckpointMismatchError, match="other"):
    other.run(ROUNDS)


def test_corrupt_checkpoint_gives_clear_error(setup, tmp_path):
  _driver(setup, tmp_path).run(2)
  npz = tmp_path / "checkpoints" / "ckpt_000002.npz"
  npz.write_bytes(b"not a checkpoint")
  with pytest.raises(checkpoint.CorruptCheckpointError,
                     match="ckpt_000002.npz does not match its seal.*--restart"):
    _driver(setup, tmp_path).run(ROUNDS)


def _sealed_run(setup, tmp_path, rounds=4):
  _driver(setup, tmp_path).run(rounds)  # checkpoint_every=2 keeps rounds 2 and 4
  return tmp_path / "checkpoints"


def test_an_older_rounds_npz_copied_over_the_latest_is_refused(setup, tmp_path):
  """Issue 33: a swapped .npz (round 2's over round 4's) resumed silently with a wrong model."""
  ckpt = _sealed_run(setup, tmp_path)
  (ckpt / "ckpt_000004.npz").write_bytes((ckpt / "ckpt_000002.npz").read_bytes())
  with pytest.raises(checkpoint.CorruptCheckpointError,
                     match="ckpt_000004.npz does not match its seal"):
    _driver(setup, tmp_path).run(ROUNDS)


@pytest.mark.parametrize("edit", ["ledger", "sampler", "round", "seal_removed"])
def test_an_edited_checkpoint_json_is_refused(setup, tmp_path, edit):
  """Issue 33: an edited ledger (rounds_done 4 → 1) made a resumed run report a lower ε."""
  ckpt = _sealed_run(setup, tmp_path)
  path = ckpt / "ckpt_000004.json"
  meta = json.load(open(path))
  if edit == "ledger":
    meta["ledger"]["rounds_done"] = 1
  elif edit == "sampler":
    meta["sampler"]["state"]["state"] += 1
  elif edit == "round":
    meta["round"] = 3
  else:
    del meta["seal"]
  path.write_text(json.dumps(meta, indent=1))
  with pytest.raises(checkpoint.CorruptCheckpointError, match="ckpt_000004.json"):
    _driver(setup, tmp_path).run(ROUNDS)


@pytest.mark.parametrize("damage", ["truncated", "deleted", "edited"])
def test_damaged_metric_rows_refuse_the_resume(setup, tmp_path, damage):
  """Issue 33: metrics.csv truncated (rounds lost) or deleted was resumed with exit 0."""
  _sealed_run(setup, tmp_path)
  path = tmp_path / "metrics.csv"
  lines = path.read_text().splitlines(keepends=True)
  if damage == "truncated":
    path.write_text("".join(lines[:-2]))
  elif damage == "deleted":
    path.unlink()
  else:
    path.write_text("".join(lines[:-1]) + lines[-1].replace(",", ",9", 1))
  with pytest.raises(checkpoint.DamagedOutputsError, match="metrics.csv.*--restart"):
    _driver(setup, tmp_path).run(ROUNDS)


def test_a_ledger_behind_the_checkpoint_round_is_refused(setup, tmp_path, monkeypatch):
  """The ledger must have charged exactly the checkpoint's rounds, even under a valid seal."""
  _sealed_run(setup, tmp_path)
  original = checkpoint._check_seal  # pylint: disable=protected-access
  monkeypatch.setattr(checkpoint, "_check_seal", lambda *a: None)
  path = tmp_path / "checkpoints" / "ckpt_000004.json"
  meta = json.load(open(path))
  meta["ledger"]["rounds_done"] = 1
  path.write_text(json.dumps(meta))
  with pytest.raises(checkpoint.CheckpointMismatchError, match="charged 1 rounds"):
    _driver(setup, tmp_path).run(ROUNDS)
  assert original is not None


def test_an_intact_sealed_checkpoint_resumes(setup, tmp_path):
  _sealed_run(setup, tmp_path, rounds=2)
  _driver(setup, tmp_path).run(ROUNDS)
  assert len(read_metrics(tmp_path / "metrics.csv")) == ROUNDS


def test_padding_cohorts_with_empty_clients_changes_nothing(setup, tmp_path):
  _driver(setup, tmp_path / "plain").run(2)
  padded = _driver(setup, tmp_path / "padded", pad=True)
  padded.pad_multiple = 16
  padded.run(2)
  plain = _comparable(read_metrics(tmp_path / "plain" / "metrics.csv"))
  got = _comparable(read_metrics(tmp_path / "padded" / "metrics.csv"))
  for e, g in zip(plain, got):
    for k in e:
      if e[k] is None:
        assert g[k] is None, k
      else:
        assert g[k] == pytest.approx(e[k], rel=1e-5, abs=1e-7), k


def test_release_and_diagnostics_are_separate_files(setup, tmp_path):
  """Audit D3: un-noised statistics never land in the private release."""
  _driver(setup, tmp_path / "both", tensorboard=True).run(2)
  release = read_metrics(tmp_path / "both" / "metrics.csv")
  diagnostics = read_metrics(tmp_path / "both" / "diagnostics.csv")
  un_noised = {"clients_sampled", "num_clients", "train_loss", "train_accuracy", "seconds"}
  assert not un_noised & set(release[0])
  assert un_noised <= set(diagnostics[0])
  assert {"clip", "unclipped_fraction", "eval_accuracy", "epsilon_eps4"} <= set(release[0])
  assert {r["clients_sampled"] for r in diagnostics} != {None}
  assert (tmp_path / "both" / "tensorboard" / "release").is_dir()
  assert (tmp_path / "both" / "tensorboard" / "diagnostics").is_dir()

  _driver(setup, tmp_path / "release", tensorboard=True, release_only=True).run(2)
  assert not (tmp_path / "release" / "diagnostics.csv").exists()
  assert not (tmp_path / "release" / "tensorboard" / "diagnostics").exists()
  assert read_metrics(tmp_path / "release" / "metrics.csv")[0].keys() == release[0].keys()


def test_privacy_randomness_is_checkpointed_and_restored(setup, tmp_path):
  first = PrivacyRandomness.secret()
  _driver(setup, tmp_path, privacy_randomness=first).run(2)
  meta = json.load(open(tmp_path / "checkpoints" / "ckpt_000002.json"))
  assert meta["privacy_randomness"] == first.get_state()
  # Nothing outside the checkpoints holds the secret.
  for path in tmp_path.rglob("*"):
    if path.is_file() and "checkpoints" not in path.parts:
      assert first.get_state()["secret"].encode() not in path.read_bytes(), path
  fresh = PrivacyRandomness.secret()
  _driver(setup, tmp_path, privacy_randomness=fresh).run(ROUNDS)
  assert fresh.client_seed("c", 3) == first.client_seed("c", 3)


def test_insecure_randomness_labels_every_row(setup, tmp_path):
  debug = PrivacyRandomness.from_seed(0, "test")
  _driver(setup, tmp_path, privacy_randomness=debug).run(1)
  for name in ("metrics.csv", "diagnostics.csv"):
    rows = read_metrics(tmp_path / name)
    assert rows and all(r["privacy_warning"] == NOT_PRIVATE_LABEL for r in rows)
