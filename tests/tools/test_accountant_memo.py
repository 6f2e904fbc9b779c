"""tools/accountant_memo.py: the mutation runs' memo of dp-accounting answers changes no answer.

A mutant's verdict must not depend on the memo: each memoised answer must be the
one dp-accounting computes for exactly those arguments (type included), and a
PLD object handed to several callers must come out of composition unchanged.
"""
import fcntl
import importlib.util
import multiprocessing
import os
import pickle
import sys

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location(
    "accountant_memo", os.path.join(ROOT, "tools", "accountant_memo.py"))
accountant_memo = importlib.util.module_from_spec(_spec)
sys.modules["accountant_memo"] = accountant_memo
_spec.loader.exec_module(accountant_memo)

ORDERS = [1.25, 1.5, 2.0, 3.5, 8.0, 32.0]


@pytest.fixture
def memo():
  """A fresh memo routed into dp-accounting for one test, then taken out again."""
  installed = accountant_memo.AccountantMemo()
  installed.install()
  yield installed
  accountant_memo.AccountantMemo.uninstall()


def _fresh_rdp(q, sigma):
  log_a = rdp_privacy_accountant._compute_log_a  # pylint: disable=protected-access
  log_a = getattr(log_a, "__wrapped__", log_a)
  return np.array([log_a(q, sigma, a) / (a - 1) for a in ORDERS])


def test_memoised_rdp_is_dp_accountings_and_is_served_on_the_second_call(memo):
  first = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.01, 1.1, ORDERS)  # pylint: disable=protected-access
  assert memo.misses == len(ORDERS) and memo.hits == 0
  second = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.01, 1.1, ORDERS)  # pylint: disable=protected-access
  assert memo.hits == len(ORDERS)
  np.testing.assert_array_equal(first, _fresh_rdp(0.01, 1.1))
  np.testing.assert_array_equal(second, first)
  # Another rate is another question.
  other = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.0100001, 1.1, ORDERS)  # pylint: disable=protected-access
  np.testing.assert_array_equal(other, _fresh_rdp(0.0100001, 1.1))
  assert memo.misses == 2 * len(ORDERS)


def test_keys_hold_the_type_as_well_as_the_value():
  key = accountant_memo.call_key
  assert key((0.5,), {}) != key((np.float32(0.5),), {})
  assert key((1,), {}) != key((1.0,), {}) != key((True,), {})
  assert key((np.float64(0.5),), {}) != key((0.5,), {})
  assert key((), {"a": 1, "b": 2}) == key((), {"b": 2, "a": 1})
  with pytest.raises(TypeError):
    key((np.array([0.5]),), {})


def test_an_argument_it_cannot_key_goes_straight_to_dp_accounting(memo):
  calls = []

  def square(x):
    calls.append(x)
    return x * x

  wrapped = memo.memoised("test", square)
  np.testing.assert_array_equal(wrapped(np.array([2.0, 3.0])), [4.0, 9.0])
  np.testing.assert_array_equal(wrapped(np.array([2.0, 3.0])), [4.0, 9.0])
  assert len(calls) == 2 and memo.entries["test"] == {}
  assert wrapped(2.0) == wrapped(2.0) == 4.0 and len(calls) == 3


def _pld_epsilon(noise, rate, count, delta=1e-5):
  accountant = pld_privacy_accountant.PLDAccountant()
  accountant.compose(dp_event.PoissonSampledDpEvent(rate, dp_event.GaussianDpEvent(noise)), count)
  return accountant.get_epsilon(delta)


def test_a_shared_pld_is_not_changed_by_composing_it_and_gives_the_same_epsilon():
  fresh = [_pld_epsilon(1.3, 0.05, 40), _pld_epsilon(0.9, 0.2, 7)]
  installed = accountant_memo.AccountantMemo()
  installed.install()
  try:
    shared = privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=1.3, sampling_prob=0.05, value_discretization_interval=1e-4)
    before = pickle.dumps(shared)
    assert privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=1.3, sampling_prob=0.05, value_discretization_interval=1e-4) is shared
    shared.self_compose(5).compose(shared).get_epsilon_for_delta(1e-5)
    memoised = [_pld_epsilon(1.3, 0.05, 40), _pld_epsilon(0.9, 0.2, 7),
                _pld_epsilon(1.3, 0.05, 40), _pld_epsilon(0.9, 0.2, 7)]
    assert installed.hits >= 3
    assert pickle.dumps(shared) == before
  finally:
    accountant_memo.AccountantMemo.uninstall()
  assert memoised == fresh + fresh


def test_uninstall_restores_dp_accountings_functions(memo):
  assert hasattr(rdp_privacy_accountant._compute_log_a, "__wrapped__")  # pylint: disable=protected-access
  memo.install()  # installing twice wraps the original, not the wrapper
  assert not hasattr(rdp_privacy_accountant._compute_log_a.__wrapped__, "__wrapped__")  # pylint: disable=protected-access
  accountant_memo.AccountantMemo.uninstall()
  assert not hasattr(rdp_privacy_accountant._compute_log_a, "__wrapped__")  # pylint: disable=protected-access
  assert not hasattr(privacy_loss_distribution.from_gaussian_mechanism, "__wrapped__")


def test_save_merges_into_the_saved_memo(tmp_path, memo):
  path = tmp_path / "mutants" / "memo.pkl"
  rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.02, 2.0, [1.5])  # pylint: disable=protected-access
  memo.save(path)
  later = accountant_memo.AccountantMemo()
  later.install()
  rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.03, 2.0, [1.5])  # pylint: disable=protected-access
  later.save(path)
  loaded = accountant_memo.AccountantMemo.load(path)
  assert len(loaded.entries["log_a"]) == 2
  assert not list(tmp_path.joinpath("mutants").glob("*.partial"))  # no partial file left


def test_save_waits_for_another_process_saving(tmp_path):
  """The parallel stats phase's children save at once: a save waits for the lock, so
  neither child's entries are lost. Bug caught: save without the lock (read, merge and
  write interleaved)."""
  path = tmp_path / "memo.pkl"
  saver = accountant_memo.AccountantMemo({"log_a": {"k": 1.0}})
  with open(tmp_path / "memo.pkl.lock", "w") as lock:
    fcntl.lockf(lock, fcntl.LOCK_EX)
    process = multiprocessing.get_context("fork").Process(target=saver.save, args=(path,))
    process.start()
    process.join(1.0)
    assert process.is_alive() and not path.exists()
  process.join(30)
  assert process.exitcode == 0
  assert accountant_memo.AccountantMemo.load(path).entries["log_a"] == {"k": 1.0}
  assert accountant_memo.AccountantMemo.load(tmp_path / "absent.pkl").entries["log_a"] == {}


def test_mutation_runner_records_in_the_clean_run_and_serves_in_the_fork_server(tmp_path, monkeypatch):
  """tools/mutmut_run.py: a run without a mutant records and saves (the clean run, with the
  names' tests or with none, which means every selected test: ``make mutation`` gives no
  names), a mutant's run does not; the fork server's warm-up installs what was saved.
  Bug caught: an empty test list taken for the forced-fail run, so ``make mutation``
  never recorded the memo."""
  harness = pytest.importorskip("mutmut.runners.harness")
  spec = importlib.util.spec_from_file_location(
      "mutmut_run", os.path.join(ROOT, "tools", "mutmut_run.py"))
  mutmut_run = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mutmut_run)
  seen = []

  def fake_run_tests(self, *, mutant_name, tests):
    seen.append((mutant_name, list(tests)))
    rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.04, 1.7, [2.5])  # pylint: disable=protected-access
    return 0

  monkeypatch.setattr(harness.PytestRunner, "run_tests", fake_run_tests)
  monkeypatch.setattr(harness.PytestRunner, "warm_up", lambda self: None)
  path = tmp_path / "memo.pkl"
  mutmut_run._install_accountant_memo(path)  # pylint: disable=protected-access
  runner = harness.PytestRunner.__new__(harness.PytestRunner)
  try:
    assert runner.run_tests(mutant_name="m__mutmut_1", tests=["t"]) == 0
    assert not path.exists()
    assert runner.run_tests(mutant_name=None, tests=[]) == 0  # the clean run of `make mutation`
    assert not hasattr(rdp_privacy_accountant._compute_log_a, "__wrapped__")  # pylint: disable=protected-access
    assert list(accountant_memo.AccountantMemo.load(path).entries["log_a"].values()) == [
        rdp_privacy_accountant._compute_log_a(0.04, 1.7, 2.5)]  # pylint: disable=protected-access
    path.unlink()
    assert runner.run_tests(mutant_name=None, tests=["t"]) == 0  # the clean run of some names
    assert len(accountant_memo.AccountantMemo.load(path).entries["log_a"]) == 1
    runner.warm_up()
    served = rdp_privacy_accountant._compute_log_a  # pylint: disable=protected-access
    assert hasattr(served, "__wrapped__")
    assert served(0.04, 1.7, 2.5) == served.__wrapped__(0.04, 1.7, 2.5)
  finally:
    accountant_memo.AccountantMemo.uninstall()
  assert [name for name, _ in seen] == ["m__mutmut_1", None, None]


def test_a_recording_memo_never_serves_an_answer():
  """The stats phase records with ``serve=False``: every call is computed afresh (its
  durations set the mutants' timeouts), yet every answer is kept for the mutants. Bug
  caught: the stats phase served repeated calls, so its durations (and every timeout)
  came out shorter than the unmemoised tests take."""
  recorder = accountant_memo.AccountantMemo(serve=False)
  recorder.install()
  try:
    for _ in range(3):
      rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.06, 1.4, [2.5])  # pylint: disable=protected-access
  finally:
    accountant_memo.AccountantMemo.uninstall()
  assert recorder.hits == 0 and recorder.misses == 3
  assert list(recorder.entries["log_a"].values()) == [
      rdp_privacy_accountant._compute_log_a(0.06, 1.4, 2.5)]  # pylint: disable=protected-access
