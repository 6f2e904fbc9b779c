"""Record-level runs: per-method plans, the record accountant in the driver, exact resume."""
import collections
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_idp import models
from tff_idp import preferences
from tff_idp.accounting.record import rdp_two_stage
from tff_idp.accounting.record.rdp_two_stage import TwoStageParams
from tff_idp.rpdp.client_work import build_rpdp_fedavg_process
from tff_idp.errors import ToolkitValueError
from tff_idp.rpdp import record_level
from tff_idp.engine.metrics import read_metrics

PARAMS = TwoStageParams(noise_multiplier=2.0, local_steps=2, rounds=4, client_rate=0.7,
                        delta=1e-4)
# What _process builds with: the runner cannot read them from the process.
HP = {"client_optimizer": "sgd", "client_learning_rate": 0.5, "server_optimizer": "sgd",
      "server_learning_rate": 1.0}


def _federation(sizes=(30, 45, 25), seed=0):
  rng = np.random.default_rng(seed)
  x = {f"c{i}": rng.normal(size=(n, 5)).astype(np.float32) for i, n in enumerate(sizes)}
  y = {f"c{i}": rng.integers(0, 3, n).astype(np.int32) for i, n in enumerate(sizes)}
  return record_level.RecordFederation(x, y)


def _process(local_steps):
  """rPDP-FedAvg on logistic regression over 5 features, 3 classes (σ = 2, L = 1)."""
  spec = collections.OrderedDict(x=tf.TensorSpec([None, 5], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(lambda: models.build_logistic_regression(5, 3, seed=0), spec)
  return build_rpdp_fedavg_process(
      model_fn, client_optimizer=tff.learning.optimizers.build_sgdm(0.5),
      server_optimizer=tff.learning.optimizers.build_sgdm(1.0), local_steps=local_steps,
      noise_multiplier=2.0, clip_norm=1.0)


def _budgets(fed, seed=0):
  return preferences.assign_record_budgets(preferences.ThreeLevels(), fed.sizes, seed)


def test_plans_per_method():
  fed = _federation()
  budgets = _budgets(fed)
  flat = np.concatenate(list(budgets.values()))
  ours = record_level.make_record_plan("ours", budgets, PARAMS, 1.0)
  q_ours = np.concatenate(list(ours.rates.values()))
  eps = rdp_two_stage.epsilon(q_ours, PARAMS)
  assert np.all(eps <= flat)
  assert len(np.unique(q_ours)) == 3  # one rate per ThreeLevels budget
  minimum = record_level.make_record_plan("minimum", budgets, PARAMS, 1.0)
  q_min = np.concatenate(list(minimum.rates.values()))
  assert np.all(q_min == q_min[0])
  assert rdp_two_stage.epsilon(q_min[0], PARAMS) <= flat.min()
  assert rdp_two_stage.epsilon(q_min[0] * 1.01, PARAMS) > flat.min()  # tight (exact inverse)
  dropout = record_level.make_record_plan("dropout", budgets, PARAMS, 1.0)
  q_drop = np.concatenate(list(dropout.rates.values()))
  mod = flat.mean()
  assert np.all(q_drop[flat < mod] == 0) and np.all(q_drop[flat >= mod] > 0)
  assert rdp_two_stage.epsilon(q_drop.max(), PARAMS) <= mod
  free = record_level.make_record_plan("privacy_free", budgets, PARAMS, 1.0,
                                       privacy_free_batch=10)
  assert free.new_accountant() is None and free.noise_multiplier == 0.0
  assert free.rates["c0"][0] == pytest.approx(10 / 30)
  with pytest.raises(ValueError, match="method"):
    record_level.make_record_plan("bogus", budgets, PARAMS, 1.0)


@pytest.mark.usefixtures("tff_runtime")
def test_resume_is_exact_and_restores_record_ledger(tmp_path):
  fed = _federation()
  budgets = _budgets(fed)
  plan = record_level.make_record_plan("ours", budgets, PARAMS, 1.0)
  proc = _process(local_steps=2)

  def evaluate(weights):
    return {"loss": float(np.sum(weights.trainable[0])), "accuracy": 0.0}

  state_a, _, acc_a = record_level.run_record_level(
      proc, fed, plan, 3, str(tmp_path / "a"), evaluate, eval_every=1, checkpoint_every=2,
      progress=False, hyperparameters=HP)
  # A crash after round 3 leaves the round-2 checkpoint; resuming from it must
  # reproduce the uninterrupted run exactly. The privacy randomness is secret
  # (a fresh secret per run), so this holds only if the resumed run takes the
  # checkpointed secret rather than drawing a new one.
  shutil.copytree(tmp_path / "a", tmp_path / "b")
  for path in (tmp_path / "b" / "checkpoints").glob("ckpt_000004.*"):
    path.unlink()
  calls = {"n": 0}

  def counting(weights):
    calls["n"] += 1
    return evaluate(weights)

  state_b, _, acc_b = record_level.run_record_level(
      proc, fed, plan, 3, str(tmp_path / "b"), counting, eval_every=1, checkpoint_every=2,
      progress=False, hyperparameters=HP)
  assert calls["n"] == 2  # rounds 3 and 4 only: it resumed
  for u, v in zip(proc.get_model_weights(state_a).trainable,
                  proc.get_model_weights(state_b).trainable):
    np.testing.assert_array_equal(u, v)
  np.testing.assert_array_equal(acc_a.charged, acc_b.charged)
  assert acc_b.rounds_done == 4 - 2 + 2  # restored at 2, then two more rounds
  for name, keys in [("metrics.csv", ["round", "eval_loss", "epsilon_spent_max",
                                      "records_active"]),
                     ("diagnostics.csv", ["round", "clients_sampled", "sampled_records"])]:
    rows_a = read_metrics(str(tmp_path / "a" / name))
    rows_b = read_metrics(str(tmp_path / "b" / name))
    assert [[r[k] for k in keys] for r in rows_a] == [[r[k] for k in keys] for r in rows_b]
  assert np.all(acc_a.spent() <= np.concatenate(list(budgets.values())))
  assert read_metrics(str(tmp_path / "a" / "metrics.csv"))[-1]["epsilon_spent_max"] > 0


@pytest.mark.usefixtures("tff_runtime")
def test_resume_under_other_budgets_is_refused(tmp_path):
  from tff_idp.engine import checkpoint  # pylint: disable=g-import-not-at-top
  fed = _federation()
  params = TwoStageParams(2.0, 1, 2, 1.0, 1e-4)
  proc = _process(local_steps=1)
  plan_a = record_level.make_record_plan("ours", _budgets(fed, seed=0), params, 1.0)
  record_level.run_record_level(proc, fed, plan_a, 0, str(tmp_path), None,
                                checkpoint_every=1, progress=False, hyperparameters=HP)
  plan_b = record_level.make_record_plan("ours", _budgets(fed, seed=1), params, 1.0)
  with pytest.raises(checkpoint.CheckpointMismatchError, match="other privacy"):
    record_level.run_record_level(proc, fed, plan_b, 0, str(tmp_path), None,
                                  checkpoint_every=1, progress=False, hyperparameters=HP)


@pytest.mark.usefixtures("tff_runtime")
def test_same_seed_draws_fresh_noise_unless_insecure_mode(tmp_path):
  """Audit D2: client-side noise and sampling must not follow from the run seed."""
  fed = _federation()
  params = TwoStageParams(2.0, 1, 1, 1.0, 1e-4)
  proc = _process(local_steps=1)
  plan = record_level.make_record_plan("ours", _budgets(fed), params, 1.0)

  def final_weights(name, insecure):
    mode = {} if insecure is None else {"insecure_reproducible_noise": insecure}  # None: default
    state, _, _ = record_level.run_record_level(
        proc, fed, plan, 7, str(tmp_path / name), None, progress=False, hyperparameters=HP,
        **mode)
    return np.concatenate([np.ravel(w) for w in proc.get_model_weights(state).trainable])

  # The default is secret noise: two default runs with the same seed differ.
  assert not np.allclose(final_weights("secret1", None), final_weights("secret2", None))
  np.testing.assert_array_equal(final_weights("debug1", True), final_weights("debug2", True))
  assert "NOT PRIVATE" in (tmp_path / "debug1" / "metrics.csv").read_text()
  assert "NOT PRIVATE" not in (tmp_path / "secret1" / "metrics.csv").read_text()


@pytest.mark.usefixtures("tff_runtime")
def test_extra_eval_metrics_are_release_columns(tmp_path):
  """Per-group utility of the released model on held-out data goes to metrics.csv."""
  fed = _federation()
  params = TwoStageParams(2.0, 1, 2, 1.0, 1e-4)
  plan = record_level.make_record_plan("ours", _budgets(fed), params, 1.0)

  def evaluate(weights):
    del weights
    return {"loss": 1.0, "accuracy": 0.5, "acc/eps=0.1": 0.25, "recall/eps=0.1": 0.2,
            "imbalance": 0.1, "not_written": 7.0}

  record_level.run_record_level(_process(local_steps=1), fed, plan, 0, str(tmp_path),
                                evaluate, eval_every=2, progress=False, hyperparameters=HP,
                                eval_metrics=["acc/eps=0.1", "recall/eps=0.1", "imbalance"])
  release = read_metrics(str(tmp_path / "metrics.csv"))
  assert [r["eval_acc/eps=0.1"] for r in release] == [None, 0.25]  # evaluation rounds only
  assert release[-1]["eval_recall/eps=0.1"] == 0.2 and release[-1]["eval_imbalance"] == 0.1
  assert release[-1]["eval_accuracy"] == 0.5
  assert "eval_not_written" not in release[-1] and "not_written" not in release[-1]
  diagnostics = (tmp_path / "diagnostics.csv").read_text().splitlines()[0]
  assert "eval_" not in diagnostics


def test_plans_are_reexported_from_the_tf_free_module():
  """Calibration lives in tff_idp.accounting.record.plan; old imports keep working."""
  from tff_idp.accounting.record import plan as record_plan  # pylint: disable=g-import-not-at-top
  assert record_level.make_record_plan is record_plan.make_record_plan
  assert record_level.RecordPlan is record_plan.RecordPlan
  assert record_level.METHODS is record_plan.METHODS


@pytest.mark.usefixtures("tff_runtime")
def test_minimum_run_reports_budget_used_vs_effective_and_vs_own(tmp_path):
  """metrics.csv (Type II: release) names both usages; Minimum leaves own budget unused."""
  fed = _federation()
  budgets = _budgets(fed)
  params = TwoStageParams(2.0, 1, 2, 1.0, 1e-4)
  plan = record_level.make_record_plan("minimum", budgets, params, 1.0)
  _, _, accountant = record_level.run_record_level(
      _process(local_steps=1), fed, plan, 0, str(tmp_path), progress=False, hyperparameters=HP)
  last = read_metrics(str(tmp_path / "metrics.csv"))[-1]
  own = np.concatenate(list(budgets.values()))
  spent = accountant.spent()
  assert last["budget_used_max_vs_effective"] == pytest.approx(1.0, abs=3e-3)
  assert last["budget_used_max_vs_own"] == pytest.approx(np.max(spent / own))
  assert last["budget_used_mean_vs_own"] == pytest.approx(np.mean(spent / own))
  # ThreeLevels: 30% of the records asked for ε 1 or 5 but spent only ε_min = 0.1.
  assert np.all(spent[own > 0.1] / own[own > 0.1] <= 0.1 + 1e-12)
  assert last["budget_used_mean_vs_own"] < 0.8


@pytest.mark.usefixtures("tff_runtime")
def test_rerun_returns_stored_rows_and_refuses_other_learning_rate(tmp_path):
  """Issue 9: a finished run returns its rows; the learning rate is fingerprinted."""
  from tff_idp.engine import checkpoint  # pylint: disable=g-import-not-at-top
  fed = _federation()
  params = TwoStageParams(2.0, 1, 2, 1.0, 1e-4)
  proc = _process(local_steps=1)
  plan = record_level.make_record_plan("ours", _budgets(fed), params, 1.0)
  calls = {"n": 0}

  def evaluate(weights):
    calls["n"] += 1
    return {"loss": float(np.sum(weights.trainable[0])), "accuracy": 0.5}

  out = str(tmp_path / "run")
  state, rows, _ = record_level.run_record_level(
      proc, fed, plan, 0, out, evaluate, eval_every=1, progress=False, hyperparameters=HP)
  assert [r["round"] for r in rows] == [1, 2] and calls["n"] == 2
  # The same run again (a trailing slash, another eval_every): nothing trains, the
  # stored rows come back, typed as written.
  state2, rows2, _ = record_level.run_record_level(
      proc, fed, plan, 0, out + "/", evaluate, eval_every=2, checkpoint_every=1,
      progress=False, hyperparameters=HP)
  assert calls["n"] == 2
  assert rows2 == rows and isinstance(rows2[0]["clients_sampled"], int)
  for u, v in zip(proc.get_model_weights(state).trainable,
                  proc.get_model_weights(state2).trainable):
    np.testing.assert_array_equal(u, v)
  with pytest.raises(checkpoint.CheckpointMismatchError,
                     match=r"other privacy.*client_learning_rate"):
    record_level.run_record_level(
        proc, fed, plan, 0, out, evaluate, progress=False,
        hyperparameters=dict(HP, client_learning_rate=0.05))
  with pytest.raises(ToolkitValueError, match="hyperparameters="):
    record_level.run_record_level(proc, fed, plan, 0, out, evaluate, progress=False)


def test_client_data_follows_the_ledger_past_the_affordable_rounds():
  """Exhausted records are never sampled again: the client data's rates are the ledger's (issue 32).

  A plan calibrated for T = 4 rounds is run for 8 (every client sampled each
  round), so the ledger excludes records. Property: after that, each
  client's dataset gives every excluded record q = 0 and the others their
  calibrated rate, read from the data actually sent. Bug caught: client data
  built from the calibrated rates, ignoring the ledger's exclusions.
  """
  from tff_idp.engine.privacy_randomness import PrivacyRandomness  # pylint: disable=g-import-not-at-top
  fed = _federation()
  plan = record_level.make_record_plan("ours", _budgets(fed), PARAMS, 1.0)
  accountant = plan.new_accountant()
  for _ in range(8):
    accountant.begin_round()
    accountant.end_round(fed.client_ids)
  accountant.begin_round()
  make = record_level.record_input_fn(fed, plan, accountant, PrivacyRandomness.secret())
  # The vectorized execution's inputs (arrays) carry the same ledger rates.
  make_arrays = record_level.record_input_fn(fed, plan, accountant,
                                             PrivacyRandomness.secret(), arrays=True)
  excluded = 0
  for cid in fed.client_ids:
    sent = np.concatenate([b["q"].numpy() for b in make(cid, 8)])
    np.testing.assert_array_equal(sent, accountant.current_rates(cid).astype(np.float32))
    np.testing.assert_array_equal(make_arrays(cid, 8).q, sent)
    gone = (sent == 0) & (np.asarray(plan.rates[cid]) > 0)
    excluded += int(gone.sum())
  assert excluded > 0  # the property is exercised: some records ran out of budget


# --- fast checks of the data plumbing (no TFF runtime) -------------------------

def test_federation_converts_and_checks_its_arrays():
  """Property: the federation holds float32 features and int32 labels per client
  and refuses mismatched clients, no clients, or a length mismatch, naming the
  client. Bugs caught: a missing check (records silently paired with the wrong
  labels or dropped), features or labels left unconverted, or the labels
  checked under the wrong client, a bad feature array's refusal not naming it."""
  fed = record_level.RecordFederation({"a": np.ones((2, 3)), "b": np.zeros((1, 3))},
                                      {"a": [1.0, 0.0], "b": np.array([2])})
  assert fed.client_ids == ["a", "b"] and fed.sizes == {"a": 2, "b": 1}
  assert fed.x["a"].dtype == np.float32 and fed.y["a"].dtype == np.int32
  np.testing.assert_array_equal(fed.y["a"], [1, 0])
  np.testing.assert_array_equal(fed.y["b"], [2])
  with pytest.raises(ToolkitValueError, match="same client ids"):
    record_level.RecordFederation({"a": np.ones((1, 2))}, {"b": [0]})
  with pytest.raises(ToolkitValueError, match="no clients"):
    record_level.RecordFederation({}, {})
  with pytest.raises(ToolkitValueError, match="client 'b': 2 features vs 1 labels"):
    record_level.RecordFederation({"a": np.ones((1, 2)), "b": np.ones((2, 2))},
                                  {"a": [0], "b": [1]})
  with pytest.raises(ToolkitValueError, match=r"y\['b'\]"):
    record_level.RecordFederation({"a": np.ones((1, 2)), "b": np.ones((1, 2))},
                                  {"a": [0], "b": [0.5]})
  with pytest.raises(ToolkitValueError, match=r"x\['b'\]"):  # features named too
    record_level.RecordFederation({"a": np.ones((1, 2)), "b": np.ones(2)},
                                  {"a": [0], "b": [0]})


class _FakeCanaries:
  """Appends one canary record (row 0, rate 0.25) after client c1's real records."""

  def client_records(self, client_id, x, y, q):
    if client_id != "c1":
      return x, y, q, np.full(len(y), -1, np.int32)
    return (np.concatenate([x, np.full((1, x.shape[1]), 9.0, np.float32)]),
            np.concatenate([y, [1]]).astype(np.int32),
            np.concatenate([q, [0.25]]).astype(np.float32),
            np.array([-1] * len(y) + [0], np.int32))


def _collect(dataset):
  return {k: np.concatenate([b[k].numpy() for b in dataset]) for k in dataset.element_spec}


def test_client_data_carries_records_rates_and_the_clients_own_round_seed():
  """Property: a client's dataset holds its records, its plan rates (without an
  accountant), in batches of ``batch_size``, and the seed
  ``randomness.client_seed(client, round)`` on every record; the client's own
  canaries are appended with their index, batched like the records. Bugs
  caught: another client's or round's seed (noise shared or repeated), rates
  or records of another client, canaries dropped, asked for without the
  client id, or their index lost."""
  from tff_idp.engine.privacy_randomness import PrivacyRandomness  # pylint: disable=g-import-not-at-top
  fed = _federation(sizes=(5, 3))
  plan = record_level.make_record_plan("ours", _budgets(fed), PARAMS, 1.0)
  randomness = PrivacyRandomness.secret()
  make = record_level.record_input_fn(fed, plan, None, randomness, batch_size=2)
  data = make("c0", 3)
  assert [int(b["y"].shape[0]) for b in data] == [2, 2, 1]
  got = _collect(data)
  np.testing.assert_array_equal(got["x"], fed.x["c0"])
  np.testing.assert_array_equal(got["y"], fed.y["c0"])
  np.testing.assert_array_equal(got["q"], np.asarray(plan.rates["c0"], np.float32))
  assert np.all(got["seed"] == np.asarray(randomness.client_seed("c0", 3)))
  other = _collect(make("c1", 3))["seed"][0]
  later = _collect(make("c0", 4))["seed"][0]
  assert not np.array_equal(other, got["seed"][0])
  assert not np.array_equal(later, got["seed"][0])
  audited = record_level.record_input_fn(fed, plan, None, randomness, batch_size=3,
                                         canaries=_FakeCanaries())
  assert [int(b["y"].shape[0]) for b in audited("c1", 0)] == [3, 1]
  np.testing.assert_array_equal(_collect(audited("c0", 0))["canary"], np.full(5, -1))
  got = _collect(audited("c1", 0))
  np.testing.assert_array_equal(got["canary"], [-1, -1, -1, 0])
  np.testing.assert_array_equal(got["q"], np.concatenate([plan.rates["c1"], [0.25]])
                                .astype(np.float32))
  np.testing.assert_array_equal(got["x"][:3], fed.x["c1"])
  assert np.all(got["seed"] == np.asarray(randomness.client_seed("c1", 0)))


def test_padding_client_has_no_records():
  """Property: the cohort-padding client sends no record (so weight 0, update 0),
  with the canary field exactly when the process is an audit one. Bug caught:
  padding that sends a real client's records (trained on without being
  sampled or charged)."""
  fed = _federation()
  for with_canaries in (False, True):
    data = record_level.empty_input_fn(fed, with_canaries=with_canaries)()
    assert ("canary" in data.element_spec) == with_canaries
    assert data.element_spec["x"].shape[1:] == (5,)
    assert sum(int(b["y"].shape[0]) for b in data) == 0
  assert "canary" not in record_level.empty_input_fn(fed)().element_spec


def test_padding_client_as_arrays_has_no_records():
  """Property: the vectorized execution's padding client (``arrays=True``) is a
  ``RecordArrays`` with zero records of the federation's feature shape and dtypes, and
  equals the padding dataset. Bug caught: padding that carries a record or a rate (a
  record trained on without being sampled or charged), or a malformed input."""
  fed = _federation()
  padding = record_level.empty_input_fn(fed, arrays=True)()
  assert isinstance(padding, record_level.RecordArrays)
  assert padding.x.shape == (0, 5) and padding.x.dtype == fed.x["c0"].dtype
  assert padding.y.shape == (0,) and padding.y.dtype == fed.y["c0"].dtype
  assert padding.q.shape == (0,) and padding.q.dtype == np.float32
  assert padding.seed.shape == (2,)
  assert sum(int(b["y"].shape[0]) for b in padding.dataset()) == 0
  one_client = _federation(sizes=(3,))  # a silo of one client pads too
  assert record_level.empty_input_fn(one_client, arrays=True)().x.shape == (0, 5)
  assert sum(int(b["y"].shape[0]) for b in record_level.empty_input_fn(one_client)()) == 0


def test_rates_digest_tells_plans_apart():
  """Property: the checkpoint's rate digest changes with any client's rates, with
  which client has them, and with the budgets and own budgets (None stays
  None). Bug caught: a resume under other rates or budgets not refused."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  fed = _federation(sizes=(4, 3))
  plan = record_level.make_record_plan("ours", _budgets(fed), PARAMS, 1.0)
  base = record_level._rates_digest(plan)  # pylint: disable=protected-access
  assert base == record_level._rates_digest(dataclasses.replace(plan))  # pylint: disable=protected-access
  rates = dict(plan.rates, c1=np.asarray(plan.rates["c1"]) * (1 + 1e-12))
  renamed = {("d0" if k == "c0" else k): v for k, v in plan.rates.items()}
  budgets = dict(plan.budgets, c0=np.asarray(plan.budgets["c0"]) * 2)
  variants = [
      dataclasses.replace(plan, rates=rates),
      dataclasses.replace(plan, rates=renamed),
      dataclasses.replace(plan, budgets=budgets),
      dataclasses.replace(plan, own_budgets=budgets),
  ]
  digests = [record_level._rates_digest(v) for v in variants]  # pylint: disable=protected-access
  assert digests[0]["rates"] != base["rates"] and digests[1]["rates"] != base["rates"]
  assert digests[2]["budgets"] != base["budgets"] and digests[2]["rates"] == base["rates"]
  assert digests[3]["own_budgets"] not in (None, base["own_budgets"])
  none = record_level._rates_digest(dataclasses.replace(plan, budgets=None, own_budgets=None))  # pylint: disable=protected-access
  assert none["budgets"] is None and none["own_budgets"] is None


@pytest.mark.usefixtures("tff_runtime")
def test_release_only_writes_no_diagnostics(tmp_path):
  """``release_only=True``: the run writes the release file and no un-noised diagnostics.

  The diagnostics (sampled and clipped record counts, losses) are not covered
  by the DP guarantee, so a release-only run must leave no file of them.
  Bug caught: the flag not passed on to the round driver.
  """
  fed = _federation()
  plan = record_level.make_record_plan("ours", _budgets(fed), TwoStageParams(2.0, 1, 1, 1.0, 1e-4),
                                       1.0)
  record_level.run_record_level(_process(local_steps=1), fed, plan, 0, str(tmp_path / "r"),
                                None, progress=False, hyperparameters=HP, release_only=True)
  record_level.run_record_level(_process(local_steps=1), fed, plan, 0, str(tmp_path / "d"),
                                None, progress=False, hyperparameters=HP)
  assert (tmp_path / "r" / "metrics.csv").exists()
  assert not (tmp_path / "r" / "diagnostics.csv").exists()
  assert (tmp_path / "d" / "diagnostics.csv").exists()  # the test can fail


def test_run_record_level_refuses_hyperparameters_it_cannot_fingerprint():
  """Property: ``hyperparameters`` must be a non-empty mapping: an empty one or another
  type would leave the learning rates out of the checkpoint fingerprint (a resume under
  other ones unnoticed). Refused before any TensorFlow work. Bug caught: the check's
  ``or`` as ``and`` (an empty dict, or a non-mapping, accepted)."""
  fed = _federation()
  plan = record_level.make_record_plan("ours", _budgets(fed),
                                       TwoStageParams(2.0, 1, 1, 1.0, 1e-4), 1.0)
  for bad in ({}, [("client_learning_rate", 0.5)]):
    with pytest.raises(ToolkitValueError, match="hyperparameters="):
      record_level.run_record_level(None, fed, plan, 0, "unused", progress=False,
                                    hyperparameters=bad)


@pytest.mark.usefixtures("tff_runtime")
def test_insecure_mode_reproduces_the_client_sampling_too(tmp_path):
  """Property: the NOT PRIVATE debug mode reproduces a whole run from its seed, the
  clients sampled each round (λ = 0.5) included, not only the noise. Bug caught: the
  client sampler seeded from OS entropy instead of the run's randomness (two debug runs
  then sample other cohorts; the same ones in all 3 rounds with probability (1/8)^3,
  under 0.2%, the rate at which this test would miss that bug)."""
  fed = _federation()
  params = TwoStageParams(2.0, 1, 3, 0.5, 1e-4)
  proc = _process(local_steps=1)
  plan = record_level.make_record_plan("ours", _budgets(fed), params, 1.0)

  def run(name):
    state, rows, _ = record_level.run_record_level(
        proc, fed, plan, 7, str(tmp_path / name), None, progress=False, hyperparameters=HP,
        insecure_reproducible_noise=True)
    return ([r["clients_sampled"] for r in rows],
            np.concatenate([np.ravel(w) for w in proc.get_model_weights(state).trainable]))

  (n1, w1), (n2, w2) = run("a"), run("b")
  assert n1 == n2
  np.testing.assert_array_equal(w1, w2)


class _Stop(Exception):
  """Raised by _fake_driver's run: everything it was given is in hand by then."""


def _fake_driver(monkeypatch) -> dict:
  """Replaces run_record_level's RoundDriver; returns the dict of what it is given."""
  seen = {}

  class FakeDriver:
    def __init__(self, **kwargs):
      seen.clear()
      seen.update(kwargs)

    def run(self, rounds):
      raise _Stop(rounds)

  monkeypatch.setattr(record_level, "RoundDriver", FakeDriver)
  return seen


def test_run_record_level_defaults_are_the_shared_rpdp_defaults(monkeypatch):
  """Property: one set of defaults: the library runner evaluates and checkpoints as often
  as ``experiments.rpdp``'s flags (``tff_idp.rpdp.defaults``) and shows progress unless
  told not to, as its driver receives them. Bug caught: a cadence or progress default
  drifting from the shared one."""
  from tff_idp.rpdp.defaults import DEFAULTS  # pylint: disable=g-import-not-at-top
  seen = _fake_driver(monkeypatch)
  fed = _federation()
  plan = record_level.make_record_plan("ours", _budgets(fed), PARAMS, 1.0)
  with pytest.raises(_Stop):
    record_level.run_record_level(object(), fed, plan, 0, "unused", hyperparameters=HP)
  assert seen["eval_every"] == DEFAULTS["eval_every"]
  assert seen["checkpoint_every"] == DEFAULTS["checkpoint_every"]
  assert seen["progress"] is True


def test_run_record_level_hands_the_driver_its_settings_and_whole_fingerprint(monkeypatch):
  """Property: what ``run_record_level`` gives its round driver, read without running:
  ``progress`` and ``restart`` as asked, a padding client with no records, and a
  fingerprint holding the records, the caller's name for them, the model's layers, the
  debug mode and the calibration under the checkpoint format's keys (a renamed key
  would refuse every existing checkpoint; a dropped piece would let a resume under other
  data, another model or the other noise mode through).
  The clients' rates follow the run's ledger, an audit's canaries reach the clients'
  data, and a cohort-vectorized process gets arrays for its clients and padding.
  Bugs caught: progress or restart dropped or None, no padding, data/model/noise mode
  left out of the fingerprint, the calibration's keys renamed, the ledger not handed to
  the client data (the plan's rates used: exhausted records keep being sampled), the
  canaries dropped, the vectorized process not recognised (datasets handed to it)."""
  from tff_idp.engine import fingerprint as fingerprint_lib  # pylint: disable=g-import-not-at-top
  seen = _fake_driver(monkeypatch)
  fed = _federation()
  plan = record_level.make_record_plan("ours", _budgets(fed), PARAMS, 1.0)
  builder = lambda: models.build_logistic_regression(5, 3, seed=0)
  with pytest.raises(_Stop):
    record_level.run_record_level(object(), fed, plan, 3, "unused", progress=False,
                                  fingerprint="my-data", insecure_reproducible_noise=True,
                                  hyperparameters=HP, keras_builder=builder, restart=True)
  assert seen["progress"] is False and seen["restart"] is True
  padding = list(seen["padding_input_fn"]())
  assert padding == []
  fp = seen["run_fingerprint"]
  assert fp["data"] == fingerprint_lib.canonical(
      {"records": fingerprint_lib.records_identity(fed.x, fed.y), "name": "my-data"})
  assert fp["model"] == fingerprint_lib.canonical(
      fingerprint_lib.keras_model_identity(builder()))
  assert fp["insecure_reproducible_noise"] is True and fp["run_seed"] == 3
  assert set(fp["calibration"]) == {"method", "noise_multiplier", "clip_norm", "params",
                                    "summary", "rates", "budgets", "own_budgets"}
  assert fp["calibration"]["method"] == "ours"
  assert fp["calibration"]["noise_multiplier"] == plan.noise_multiplier
  assert fp["calibration"]["clip_norm"] == plan.clip_norm
  # The calibration's summary without its wall time (a recalibration takes another time).
  assert "seconds" in plan.calibration and "seconds" not in fp["calibration"]["summary"]
  assert fp["calibration"]["summary"] == fingerprint_lib.canonical(
      {k: v for k, v in plan.calibration.items() if k != "seconds"})
  # The clients' rates come from the run's ledger (its exclusions), not the plan.
  ledger = seen["ledger"]
  monkeypatch.setattr(ledger, "current_rates",
                      lambda cid: np.zeros(fed.sizes[cid], np.float32))
  np.testing.assert_array_equal(_collect(seen["client_input_fn"]("c1", 1))["q"],
                                np.zeros(fed.sizes["c1"]))
  # An audit's canaries reach the clients' data and the padding has their field.

  class Canaries(_FakeCanaries):
    def identity(self):
      return {"canaries": 1}

  with pytest.raises(_Stop):
    record_level.run_record_level(object(), fed, plan, 3, "unused", progress=False,
                                  hyperparameters=HP, canaries=Canaries())
  np.testing.assert_array_equal(_collect(seen["client_input_fn"]("c1", 1))["canary"],
                                [-1] * fed.sizes["c1"] + [0])
  assert "canary" in seen["padding_input_fn"]().element_spec
  assert seen["run_fingerprint"]["data"]["canaries"] == {"canaries": 1}
  # A cohort-vectorized process gets its clients, and the padding, as arrays.
  import types  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import records, vectorized  # pylint: disable=g-import-not-at-top
  cohort = types.SimpleNamespace(
      cohort_update=object.__new__(vectorized.VectorizedRecordDpUpdate))
  with pytest.raises(_Stop):
    record_level.run_record_level(cohort, fed, plan, 3, "unused", progress=False,
                                  hyperparameters=HP)
  client = seen["client_input_fn"]("c1", 1)
  assert isinstance(client, records.RecordArrays) and len(client.y) == fed.sizes["c1"]
  padding = seen["padding_input_fn"]()
  assert isinstance(padding, records.RecordArrays) and len(padding.y) == 0
