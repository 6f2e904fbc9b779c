"""IdpFedAvgDataSource is made from its calibration and spends its rounds once (issue 48).

The auditor's findings: ``train_model`` run twice on one source ran 2T rounds
(each ``iterator()`` started at round 0 with a fresh secret), and a source
built with rounds=10 from rates calibrated for 3 was accepted. Here the
source takes rates and rounds from one plan (SAMPLE's GroupCalibration,
SCALE's ScaleCalibration, the experiments' PrivacyPlan), refuses a rounds that
disagrees, and refuses the round past T, whichever iterator asks, naming the
ε per group it would reach; restore-and-continue after a crash still works.
Training uses a 195-parameter logistic regression on 8 clients for 3 rounds.
"""
import asyncio
import collections
import dataclasses
import logging
import re

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

import tff_idp
from tff_idp.accounting.client.ledger import GroupPrivacyLedger
from tff_idp.errors import ToolkitValueError
from tff_idp.idp_fedavg import plan as privacy_plan
from tff_idp.idp_fedavg.program_data import IdpFedAvgDataSource

FEATURES, CLASSES = 12, 15
SPEC = collections.OrderedDict(x=tf.TensorSpec([None, FEATURES], tf.float32),
                               y=tf.TensorSpec([None], tf.int32))
GROUPS = np.arange(8) % 2                      # group 0 at ε = 1, group 1 at ε = 4


def clients(num=8, examples=6, seed=0):
  rng = np.random.default_rng(seed)
  return [(rng.normal(size=(examples, FEATURES)).astype(np.float32),
           rng.integers(0, CLASSES, examples).astype(np.int32)) for _ in range(num)]


@pytest.fixture(name="cal", scope="module")
def calibration_fixture():
  """SAMPLE (Alg. 1) for ε = (1, 4), δ = 1e-3, 3 rounds, 4 clients per round."""
  return tff_idp.get_group_sampling_rates([1.0, 4.0], [4, 4], 1e-3, 3, 4.0)


def rates_of(source):
  """Each client's sampling rate in the source's iterators."""
  return source.iterator()._rates  # pylint: disable=protected-access


def test_the_plan_gives_the_source_its_rates_and_rounds(cal):
  source = IdpFedAvgDataSource.from_plan(clients(), cal, groups=GROUPS, batch_size=4)
  assert source.rounds == 3 and source.rounds_spent == 0
  assert source.clients_per_round == round(cal.expected_clients_per_round)
  rates = rates_of(source)
  np.testing.assert_allclose(rates, np.asarray(cal.sampling_rates)[GROUPS])
  # The plan as the positional argument is the same source; rounds equal to T is fine.
  same = IdpFedAvgDataSource(clients(), cal, groups=GROUPS, rounds=3)
  np.testing.assert_allclose(rates_of(same), rates)


def test_a_source_cannot_disagree_with_its_calibration(cal):
  """Auditor item 2: rounds=10 with rates calibrated for 3 cannot be built; nor can a
  grouping the plan was not solved for, or a no-limit source from a plan."""
  data = clients()
  with pytest.raises(ToolkitValueError, match=r"rounds=10 disagrees with the plan, calibrated "
                     r"for 3 rounds \(ε \(1, 4\) at δ=0.001\): drop rounds= or calibrate"):
    IdpFedAvgDataSource.from_plan(data, cal, groups=GROUPS, rounds=10)
  with pytest.raises(ToolkitValueError, match="rounds=None disagrees"):
    IdpFedAvgDataSource(data, cal, groups=GROUPS, rounds=None)
  with pytest.raises(ToolkitValueError, match=r"group sizes \[4, 4\]"):
    IdpFedAvgDataSource.from_plan(data, cal, groups=[0] * 6 + [1] * 2)
  with pytest.raises(ToolkitValueError, match="give groups="):
    IdpFedAvgDataSource.from_plan(data, cal)
  with pytest.raises(ToolkitValueError, match="drop clip_scales="):
    IdpFedAvgDataSource(data, cal, groups=GROUPS, clip_scales=[0.5] * 8)
  with pytest.raises(ToolkitValueError, match="plan must be a GroupCalibration"):
    IdpFedAvgDataSource.from_plan(data, [0.5] * 8)
  with pytest.raises(ToolkitValueError, match="groups= goes with"):
    IdpFedAvgDataSource(data, [0.5] * 8, groups=GROUPS, rounds=3)


def test_scale_and_experiment_plans():
  """SCALE's clip scales and the experiments' PrivacyPlan travel with their rounds."""
  scale = tff_idp.get_group_clip_scales([1.0, 4.0], [4, 4], 1e-3, 3, 4.0)
  source = IdpFedAvgDataSource.from_plan(clients(), scale, groups=GROUPS)
  assert source.rounds == 3
  assert source.iterator().options["clip_scales"] == [
      pytest.approx(s) for s in np.asarray(scale.clip_scales)[GROUPS]]
  spec = privacy_plan.parse_run_spec("50-50", [0.5, 0.5], 2)
  plan = privacy_plan.make_privacy_plan(spec, [1.0, 4.0], 8, 4.0, 3, 1e-3, "rdp", seed=0)
  source = IdpFedAvgDataSource.from_plan(clients(), plan)
  assert source.rounds == 3
  np.testing.assert_allclose(rates_of(source), plan.client_rates)
  with pytest.raises(ToolkitValueError, match="disagrees"):
    IdpFedAvgDataSource.from_plan(clients(), plan, rounds=4)
  # A non-private plan has no T: the source needs rounds as before.
  free = privacy_plan.make_privacy_plan(privacy_plan.parse_run_spec("nonprivate", [1.0], 1),
                                        [1.0], 8, 4.0, 3, 1e-3, "rdp", seed=0)
  with pytest.raises(ToolkitValueError, match="give rounds=T"):
    IdpFedAvgDataSource.from_plan(clients(), free)
  assert IdpFedAvgDataSource.from_plan(clients(), free, rounds=3).rounds == 3


def test_the_auditors_sample_plan_is_refused_past_t_naming_the_epsilon():
  """Auditor item 1 without TFF: SAMPLE for ε (1, 2, 4), T = 50; one iterator runs the 50
  rounds, and a second iterator() (what a second train_model asks for) is refused at its
  first select, the source's round 51, with the ε per group that round would spend (the
  calibration's own accountant: GroupPrivacyLedger at 51 rounds), each over its budget."""
  cal = tff_idp.get_group_sampling_rates([1.0, 2.0, 4.0], [4, 4, 4], 1e-3, 50, 4.0)
  groups = np.repeat([0, 1, 2], 4)
  source = IdpFedAvgDataSource.from_plan(clients(12, examples=2), cal, groups=groups)
  first = source.iterator()
  for _ in range(50):
    first.select(source.clients_per_round)
  with pytest.raises(ToolkitValueError) as refusal:
    source.iterator().select(source.clients_per_round)
  message = str(refusal.value)
  assert "\n" not in message and "already selected 50" in message, message
  reached = re.search(r"round 51 would spend ε per group \(([^)]*)\)", message)
  assert reached, message
  spent = [float(v) for v in reached.group(1).split(",")]
  expected = GroupPrivacyLedger(cal.target_epsilons, cal.sampling_rates,
                                [cal.noise_multiplier] * 3, cal.delta, 50).spent(51)
  np.testing.assert_allclose(spent, expected, rtol=5e-3)
  assert all(s > t for s, t in zip(spent, cal.target_epsilons))


# -- under tff.learning.programs.train_model -------------------------------------------

@pytest.fixture(name="program_context")
def program_context_fixture(tff_runtime):
  with tff_runtime.program_context() as context:
    yield context


def model_fn():
  keras = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
                               tf.keras.layers.Dense(CLASSES)])
  return tff.learning.models.from_keras_model(
      keras, loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=SPEC)


def build_process(cal):
  sgd = tff.learning.optimizers.build_sgdm
  return tff_idp.build_idp_fedavg_process(
      model_fn, client_optimizer=sgd(0.1), server_optimizer=sgd(1.0),
      noise_multiplier=cal.noise_multiplier,
      expected_clients_per_round=cal.expected_clients_per_round,
      aggregator_kwargs=dict(clipped_count_stddev=cal.noise_multiplier))


def train(process, source, rounds, manager, initial_state=None):
  asyncio.run(tff.learning.programs.train_model(
      train_process=process, initial_train_state=initial_state, train_data_source=source,
      train_per_round_clients=source.clients_per_round, train_total_rounds=rounds,
      program_state_manager=manager, model_output_manager=tff.program.MemoryReleaseManager(),
      evaluation_manager=None, evaluation_periodicity=1))


def versions(manager):
  return sorted(asyncio.run(manager.get_versions()) or [])


def test_train_model_twice_on_one_source_is_refused_at_round_t_plus_1(cal, tmp_path,
                                                                      program_context):
  """Auditor item 1 under train_model: 2 rounds, then a second train_model with a fresh
  program state runs the source's round 3 and is refused at its round 2 (the source's
  round 4); a third, from the first run's final state, is refused at its first round."""
  source = IdpFedAvgDataSource.from_plan(clients(), cal, groups=GROUPS, batch_size=4)
  process = build_process(cal)
  first = tff.program.FileProgramStateManager(str(tmp_path / "first"))
  train(process, source, 2, first)
  assert versions(first) == [0, 1, 2] and source.rounds_spent == 2
  second = tff.program.FileProgramStateManager(str(tmp_path / "second"))
  with pytest.raises(ToolkitValueError, match=r"already selected 3 of them.*round 4 would "
                     r"spend ε per group"):
    train(process, source, 3, second)
  assert source.rounds_spent == 3   # its round 1 ran (the source's 3rd); its round 2 did not
  async def final_state():
    initial = await tff.program.materialize_value(process.initialize())
    return (await first.load(2, _structure(initial, source)))[0]
  final = asyncio.run(final_state())
  with pytest.raises(ToolkitValueError, match="no fresh budget"):
    train(process, source, 1, tff.program.FileProgramStateManager(str(tmp_path / "third")),
          initial_state=final)


def _structure(state, source):
  # The structure train_model saves (TFF 0.87 does not export it).
  from tensorflow_federated.python.learning.programs import (  # pylint: disable=g-import-not-at-top
      training_program_logic)
  return training_program_logic.ProgramState(state, 0, 0, source.iterator())


class CrashingProcess:
  """The process, dying in ``next`` of round ``crash_at`` (after that round's select)."""

  def __init__(self, process, crash_at):
    self._process, self._crash_at, self._calls = process, crash_at, 0

  def initialize(self):
    return self._process.initialize()

  def next(self, state, data):
    self._calls += 1
    if self._calls == self._crash_at:
      raise RuntimeError("simulated crash")
    return self._process.next(state, data)


def test_restore_and_continue_after_a_crash(cal, tmp_path, program_context):
  """The run dies in round 3 after its select (3 rounds charged); resuming from the saved
  program state re-selects the rounds after it with the restored iterator (same secret: the
  same cohorts, free) and finishes. A new run on the source is then refused."""
  source = IdpFedAvgDataSource.from_plan(clients(), cal, groups=GROUPS, batch_size=4)
  process = build_process(cal)
  manager = tff.program.FileProgramStateManager(str(tmp_path / "run"))
  with pytest.raises(RuntimeError, match="simulated crash"):
    train(CrashingProcess(process, 3), source, 3, manager)
  # train_model awaits the initial state's save (version 0) but saves each round in a task,
  # so rounds 1 and 2 may or may not be saved when round 3 crashes (a fresh-clone run on
  # 2026-11-29 had only version 0); the resume starts from whichever is the latest.
  saved = versions(manager)
  assert saved[:1] == [0] and saved == list(range(len(saved))) and len(saved) <= 3, saved
  assert source.rounds_spent == 3
  train(process, source, 3, manager)
  assert versions(manager) == [0, 1, 2, 3] and source.rounds_spent == 3
  with pytest.raises(ToolkitValueError, match="round 4 would spend"):
    train(process, source, 1, tff.program.FileProgramStateManager(str(tmp_path / "again")))



class _RoundSavesLost(tff.program.FileProgramStateManager):
  """Keeps only the initial state's save: a crash before any round's save task ran."""

  async def save(self, program_state, version):
    if version == 0:
      await super().save(program_state, version)


def test_a_crash_before_any_round_was_saved_resumes_from_the_start_for_free(cal, tmp_path,
                                                                            program_context):
  """The other end of the race above, made deterministic: only version 0 on disk. The resume
  re-selects rounds 1-3 with the restored iterator (the same cohorts, not charged again)."""
  source = IdpFedAvgDataSource.from_plan(clients(), cal, groups=GROUPS, batch_size=4)
  process = build_process(cal)
  with pytest.raises(RuntimeError, match="simulated crash"):
    train(CrashingProcess(process, 3), source, 3, _RoundSavesLost(str(tmp_path / "run")))
  manager = tff.program.FileProgramStateManager(str(tmp_path / "run"))
  assert versions(manager) == [0] and source.rounds_spent == 3
  train(process, source, 3, manager)
  assert versions(manager) == [0, 1, 2, 3] and source.rounds_spent == 3

# -- the client inputs and the source's arguments, without TFF ---------------------------

def batches(dataset):
  return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


def epoch_orders(client_input, data, examples):
  """The order each epoch visits the client's examples in (indices into its x), in one
  iteration of its dataset (or of its batches, already read)."""
  x, _ = data
  got = batches(client_input) if isinstance(client_input, tf.data.Dataset) else client_input
  rows = np.concatenate([b["x"] for b in got])
  index = [int(np.flatnonzero((x == row).all(axis=1))[0]) for row in rows]
  return [index[i:i + examples] for i in range(0, len(index), examples)]


def test_each_client_gets_its_examples_shuffled_with_its_seed_every_epoch():
  """Every selected client's data: its (x, y) examples in batches of batch_size, each of
  local_epochs epochs a permutation shuffled with the round's seed (a fresh order every
  epoch); the same insecure_seed gives the same orders, another one others."""
  data = clients(examples=6)
  def build(seed):
    return IdpFedAvgDataSource(data, [1.0] * 8, batch_size=4, local_epochs=2, rounds=2,
                               insecure_seed=seed).iterator()
  it = build(5)
  assert it.options == dict(batch_size=4, local_epochs=2, clip_scales=None)
  inputs = it.select(8)
  assert len(inputs) == 8
  orders = []
  for client, (x, y) in zip(inputs, data):
    got = batches(client)
    assert [sorted(b) for b in got] == [["x", "y"]] * 3
    assert [len(b["y"]) for b in got] == [4, 4, 4]
    epochs = epoch_orders(got, (x, y), 6)
    assert [sorted(e) for e in epochs] == [list(range(6))] * 2
    np.testing.assert_array_equal(np.concatenate([b["y"] for b in got]),
                                  y[np.concatenate(epochs)])
    orders.append(epochs)
  assert any(e != list(range(6)) for epochs in orders for e in epochs)   # shuffled
  assert all(epochs[0] != epochs[1] for epochs in orders)                # every epoch anew
  again = [epoch_orders(c, d, 6) for c, d in zip(build(5).select(8), data)]
  assert again == orders
  other = [epoch_orders(c, d, 6) for c, d in zip(build(6).select(8), data)]
  assert other != orders
  assert [epoch_orders(c, d, 6) for c, d in zip(it.select(8), data)] != orders  # round 2


def test_two_examples_are_shuffled_too_and_the_padding_has_none():
  data = clients(examples=2)
  it = IdpFedAvgDataSource(data, [1.0] * 8, batch_size=2, rounds=1,
                           insecure_seed=5).iterator()
  orders = [epoch_orders(c, d, 2)[0] for c, d in zip(it.select(8), data)]
  assert [0, 1] in orders and [1, 0] in orders
  assert batches(it.padding_input()) == []
  # A client without examples (no shuffle buffer to fill) gives an empty input when selected.
  empty = (np.zeros((0, FEATURES), np.float32), np.zeros(0, np.int32))
  it = IdpFedAvgDataSource([empty] + clients(num=1, examples=1), [1.0, 1.0], rounds=1,
                           insecure_seed=5).iterator()
  assert [len(batches(c)) for c in it.select(2)] == [0, 1]


def test_a_scale_clients_input_carries_its_clip_scale():
  scale = tff_idp.get_group_clip_scales([1.0, 4.0], [4, 4], 1e-3, 3, 4.0)
  it = IdpFedAvgDataSource.from_plan(clients(), scale, groups=GROUPS, batch_size=3,
                                     insecure_seed=1).iterator()
  expected = np.asarray(scale.clip_scales)[GROUPS]
  assert len(set(expected)) == 2
  for i in range(8):
    client = it.client_input(i, (3, 4))
    assert list(client) == ["data", "clip_scale"]
    assert [float(s) for s in client["clip_scale"]] == [pytest.approx(expected[i])]
    assert [len(b["y"]) for b in batches(client["data"])] == [3, 3]
  padding = it.padding_input()
  assert batches(padding["data"]) == [] and [float(s) for s in padding["clip_scale"]] == [1.0]
  assert it.options["privacy"] == dict(
      target_epsilons=[1.0, 4.0], sampling_rates=[scale.sampling_rate] * 2,
      noise_multipliers=[float(s) for s in scale.effective_noise_multipliers], delta=1e-3,
      accountant="rdp")
  sample = IdpFedAvgDataSource.from_plan(clients(), tff_idp.get_group_sampling_rates(
      [1.0, 4.0], [4, 4], 1e-3, 3, 4.0), groups=GROUPS).iterator()
  assert isinstance(sample.client_input(0, (3, 4)), tf.data.Dataset)


def test_bare_clip_scales_are_checked():
  data = clients()
  source = IdpFedAvgDataSource(data, [0.5] * 8, clip_scales=[1.0] * 4 + [0.25] * 4, rounds=1)
  assert source.iterator().options["clip_scales"] == [1.0] * 4 + [0.25] * 4
  for bad in ([0.5] * 7, [0.0] + [0.5] * 7, [1.5] + [0.5] * 7, [2.0] * 8, [None] * 8):
    with pytest.raises(ToolkitValueError, match=r"^clip_scales must give every client a clip "
                       r"scale in \(0, 1\]\.$"):
      IdpFedAvgDataSource(data, [0.5] * 8, clip_scales=bad, rounds=1)


def test_defaults_and_refusals_of_the_local_pipeline(cal):
  data = clients()
  for source in (IdpFedAvgDataSource(data, cal, groups=GROUPS),
                 IdpFedAvgDataSource.from_plan(data, cal, groups=GROUPS)):
    assert source.iterator().options["batch_size"] == 16
    assert source.iterator().options["local_epochs"] == 1
    assert source.rounds_spent == 0
  ones = IdpFedAvgDataSource.from_plan(data, cal, groups=GROUPS, batch_size=1, local_epochs=1)
  assert ones.iterator().options["batch_size"] == 1
  assert IdpFedAvgDataSource.from_plan(data, cal, groups=GROUPS, batch_size=5, local_epochs=3
                                       ).iterator().options == dict(
      batch_size=5, local_epochs=3, clip_scales=None, privacy=ones.iterator().options["privacy"])
  for bad in (0, -1, True, 2.5):
    with pytest.raises(ToolkitValueError, match=rf"^batch_size={bad!r} must be an integer"):
      IdpFedAvgDataSource(data, cal, groups=GROUPS, batch_size=bad)
    with pytest.raises(ToolkitValueError, match=rf"^local_epochs={bad!r} must be an integer"):
      IdpFedAvgDataSource(data, cal, groups=GROUPS, local_epochs=bad)


def test_rounds_spent_and_the_insecure_seed_reach_the_source(cal):
  data = clients()
  assert IdpFedAvgDataSource.from_plan(data, cal, groups=GROUPS, rounds_spent=2
                                       ).rounds_spent == 2
  assert IdpFedAvgDataSource(data, cal, groups=GROUPS, rounds_spent=3).rounds_spent == 3
  def cohort(seed):
    it = IdpFedAvgDataSource.from_plan(data, cal, groups=GROUPS, insecure_seed=seed).iterator()
    return [[b["x"].tobytes() for b in batches(c)] for _ in range(3) for c in it.select(4)]
  assert cohort(9) == cohort(9) and cohort(9) != cohort(10)


def test_bare_rates_are_checked_and_logged(caplog):
  data = clients()
  with caplog.at_level(logging.WARNING):
    source = IdpFedAvgDataSource(data, [0.5] * 8, rounds=3)
  assert ("IdpFedAvgDataSource built from bare rates: it cannot check that rounds=3 is what "
          "they were calibrated for; build it with IdpFedAvgDataSource.from_plan(clients, "
          "calibration).") in caplog.messages
  it = source.iterator()
  assert "privacy" not in it.options and it.privacy_at(4) is None
  for _ in range(3):
    it.select(4)
  with pytest.raises(ToolkitValueError, match="round 4 would exceed the privacy budget"):
    it.select(4)
  with pytest.raises(ToolkitValueError, match=r"^every sampling rate must lie in \[0, 1\]\.$"):
    IdpFedAvgDataSource(data, [1.5] * 8, rounds=3)
  with pytest.raises(ToolkitValueError, match=r"^give one sampling rate per client: got 7 "
                     r"for 8\.$"):
    IdpFedAvgDataSource(data, [0.5] * 7, rounds=3)


def test_the_refusal_of_other_rounds_says_what_to_calibrate(cal):
  data = clients()
  with pytest.raises(ToolkitValueError, match=r"^rounds=None disagrees with the plan, "
                     r"calibrated for 3 rounds \(ε \(1, 4\) at δ=0.001\): drop rounds= or "
                     r"calibrate the plan for the rounds you will run\.$"):
    IdpFedAvgDataSource(data, cal, groups=GROUPS, rounds=None)
  with pytest.raises(ToolkitValueError, match=r"drop rounds= or calibrate the plan for 10 "
                     r"rounds\.$"):
    IdpFedAvgDataSource(data, cal, groups=GROUPS, rounds=10)


def test_groups_are_checked_against_the_plans_group_sizes(cal):
  data = clients()
  index = r"^groups must give each of the 8 clients an integer group index in \[0, 2\)\.$"
  for bad in ([-1] + [1, 0] * 3 + [1], [2] + [1, 0] * 3 + [1], GROUPS.astype(float),
              GROUPS[:7], [GROUPS]):
    with pytest.raises(ToolkitValueError, match=index):
      IdpFedAvgDataSource(data, cal, groups=bad)
  with pytest.raises(ToolkitValueError, match=r"^groups put \[8, 0\] clients in the privacy "
                     r"groups, but the calibration was solved for group sizes \[4, 4\]"):
    IdpFedAvgDataSource(data, cal, groups=[0] * 8)
  # One group: groups may be left out (every client in group 0).
  one = tff_idp.get_group_sampling_rates([2.0], [8], 1e-3, 3, 4.0)
  source = IdpFedAvgDataSource.from_plan(data, one)
  np.testing.assert_allclose(rates_of(source), [one.sampling_rates[0]] * 8)
  assert IdpFedAvgDataSource.from_plan(data, one, groups=[0] * 8).rounds == 3


def test_a_single_client_pads_with_its_own_empty_examples():
  it = IdpFedAvgDataSource(clients(num=1), [0.5], rounds=1).iterator()
  assert batches(it.padding_input()) == []
  assert tuple(it.federated_type.member.element["x"].shape) == (None, FEATURES)


def test_a_privacy_plans_ledger_reaches_the_refusal():
  spec = privacy_plan.parse_run_spec("50-50", [0.5, 0.5], 2)
  plan = privacy_plan.make_privacy_plan(spec, [1.0, 4.0], 8, 4.0, 3, 1e-3, "rdp", seed=0)
  it = IdpFedAvgDataSource.from_plan(clients(), plan).iterator()
  ledger = plan.ledger
  assert it.options["privacy"] == dict(
      target_epsilons=[1.0, 4.0], sampling_rates=[float(q) for q in ledger.sampling_rates],
      noise_multipliers=[float(s) for s in ledger.noise_multipliers], delta=1e-3,
      accountant="rdp")
  spent = ledger.spent(4)
  assert it.privacy_at(4) == ("ε per group (" + ", ".join(f"{e:.3g}" for e in spent)
                              + ") at δ=0.001, against budgets (1, 4)")


def test_the_refusal_uses_the_calibrations_accountant(cal):
  pld = dataclasses.replace(cal, accountant="pld")
  it = IdpFedAvgDataSource.from_plan(clients(), pld, groups=GROUPS).iterator()
  assert it.options["privacy"]["accountant"] == "pld"
  spent = GroupPrivacyLedger(cal.target_epsilons, cal.sampling_rates,
                             [cal.noise_multiplier] * 2, cal.delta, 3, "pld").spent(4)
  assert it.privacy_at(4) == ("ε per group (" + ", ".join(f"{e:.3g}" for e in spent)
                              + ") at δ=0.001, against budgets (1, 4)")
