"""SIGINT/SIGTERM at each phase of a short run: exit 130/143, one line, never swallowed (issue 50).

The phases are recognised from outside the process (tests/signal_harness.py), so
each case hits the same moment on every machine; nothing here measures time.
``make test`` runs two phases and a resume from a whole checkpoint; ``make bench`` every phase with
both signals, for IDP-FedAvg (TFF client work) and rPDP-FL, each run resumed.
"""
import signal

import pytest

from tests import signal_harness as harness

IDP_ARGS = ["--runs=34-43-23", "--seeds=0", "--rounds=6", "--num_clients=60",
            "--clients_per_round=5", "--eval_every=2", "--checkpoint_every=2",
            "--progress=false"]
RPDP_ARGS = ["--methods=ours", "--seeds=0", "--rounds=4", "--checkpoint_every=2",
             "--progress=false"]


# "first-round" and "end" run in make bench; in make test the phases before them and the
# after-checkpoint resume below cover the same handlers (the run's own, chained to the CLI's).
@pytest.mark.parametrize("phase,signum", [
    ("imports", signal.SIGINT), ("tensorflow", signal.SIGTERM),
    pytest.param("first-round", signal.SIGINT, marks=pytest.mark.bench),
    pytest.param("end", signal.SIGTERM, marks=pytest.mark.bench)])
def test_a_signal_at_each_phase_ends_in_one_line(phase, signum, tmp_path):
  out = str(tmp_path / "run")
  outcome = harness.interrupt("experiments.idp_fedavg", IDP_ARGS + [f"--output_dir={out}"],
                              out, phase, signum)
  assert outcome.landed or phase == "end", outcome.stderr[-2000:]
  assert harness.violations(outcome) == [], outcome.stderr[-3000:]


# "checkpoint" (inside the write) runs in make bench; in make test the after-checkpoint resume
# and tests/engine/test_checkpoint.py's interrupted np.savez cover it.
@pytest.mark.parametrize("phase", [pytest.param("checkpoint", marks=pytest.mark.bench),
                                   "after-checkpoint"])
def test_a_run_stopped_at_its_first_checkpoint_resumes_and_says_from_where(phase, tmp_path):
  """A checkpoint is whole or absent: the same command resumes from it, or starts over.

  Bug caught: SIGTERM inside the checkpoint's write printed numpy's zip writer's
  "Exception ignored … seek of closed file" after the one line.
  """
  out = str(tmp_path / "run")
  args = IDP_ARGS + [f"--output_dir={out}"]
  outcome = harness.interrupt("experiments.idp_fedavg", args, out, phase, signal.SIGTERM)
  assert outcome.landed and harness.violations(outcome) == [], outcome.stderr[-3000:]
  # With progress on and stderr not a terminal: plain lines, no carriage return (issue 51).
  again = harness.resume_after("experiments.idp_fedavg", args + ["--progress=true"])
  assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr[-3000:]
  assert "\r" not in again.stderr and "6/6 rounds" in again.stderr, again.stderr[-3000:]
  if phase == "after-checkpoint":  # a whole checkpoint of round 2 (or 4) exists
    assert "resuming from round " in again.stderr and " of 6 " in again.stderr, \
        again.stderr[-3000:]


def test_the_contract_check_catches_each_way_of_breaking_it():
  """The harness's own check fails on what issue 50 saw (a check that cannot fail tests nothing)."""
  good = harness.Outcome("set-up", signal.SIGINT, 130, "",
                         "\ninterrupted; resume with the same command\n", True)
  assert harness.violations(good) == []
  broken = [
      harness.Outcome("imports", signal.SIGINT, -2, "", "Traceback (most recent call last):\n"
                      "KeyboardInterrupt\n", True),
      harness.Outcome("imports", signal.SIGINT, 1, "",
                      "IMPORTANT: PLEASE READ THIS FOR ADVICE\n", True),
      harness.Outcome("first-round", signal.SIGINT, 0, "", "Exception ignored in: "
                      "<function _xla_gc_callback>\nKeyboardInterrupt\n", True),  # swallowed
      harness.Outcome("first-round", signal.SIGTERM, -15, "", "", True),
      harness.Outcome("end", signal.SIGINT, -2, "",
                      "\ninterrupted; resume with the same command\n", True),
      harness.Outcome("set-up", signal.SIGTERM, 143, "", "boom\nterminated; resume with the "
                      "same command\n", True),
  ]
  for outcome in broken:
    assert harness.violations(outcome), outcome


# The whole sweep runs in make bench; in make test the phases above cover the contract.
@pytest.mark.bench
@pytest.mark.parametrize("module,args", [
    ("experiments.idp_fedavg", IDP_ARGS + ["--client_execution=tff"]),
    ("experiments.rpdp", RPDP_ARGS)], ids=["idp_fedavg-tff", "rpdp"])
def test_every_phase_with_both_signals_then_resume(module, args, tmp_path):
  outcomes = []
  for phase in harness.PHASES:
    for signum in (signal.SIGINT, signal.SIGTERM):
      out = str(tmp_path / f"{phase}-{signum}")
      run_args = args + [f"--output_dir={out}"]
      outcomes.append(harness.interrupt(module, run_args, out, phase, signum))
      again = harness.resume_after(module, run_args)
      assert again.returncode == 0 and "Traceback" not in again.stderr, (
          phase, signum, again.stderr[-3000:])
  table = harness.report(outcomes)
  print(table)
  assert all(not harness.violations(o) for o in outcomes), table
