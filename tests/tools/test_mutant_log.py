"""tools/mutant_log.py: the per-mutant log and the killers-first order of a mutant's tests."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import mutant_log  # pylint: disable=g-import-not-at-top,wrong-import-position

FN = "tff_idp.accounting.client.scale.x__verified_scale"
OTHER_FN = "tff_idp.accounting.client.scale.xǁScaleǁsolve"
DUR = {"fast": 0.01, "mid": 0.5, "slow": 3.0, "k1": 0.2, "k2": 0.1, "k3": 2.0, "k4": 0.05}


def test_function_and_module_keys():
  assert mutant_log.function_of(FN + "__mutmut_12") == FN
  assert mutant_log.module_of(FN) == "tff_idp.accounting.client.scale"
  assert mutant_log.module_of(OTHER_FN) == "tff_idp.accounting.client.scale"


def test_killers_go_first_fastest_first_and_the_rest_keeps_its_order():
  ordered = ["fast", "mid", "k2", "k1", "slow", "k3", "k4"]
  out = mutant_log.killers_first(ordered, ["k3", "k1", "k2"], ["k4"], DUR)
  assert out == ["k2", "k1", "k3", "k4", "fast", "mid", "slow"]
  assert sorted(out) == sorted(ordered)


def test_only_given_tests_move_and_the_limits_hold():
  """A killer the mutant was not given is never added (the set of tests is the verdict's)."""
  ordered = ["fast", "mid", "slow"]
  assert mutant_log.killers_first(ordered, ["elsewhere", "slow"], [], DUR) == [
      "slow", "fast", "mid"]
  many = ["k1", "k2", "k3", "k4"]
  out = mutant_log.killers_first(["fast"] + many, many, many, DUR, n_function=2, n_module=1)
  assert out[:3] == ["k4", "k2", "k1"] and sorted(out) == sorted(["fast"] + many)


def test_history_reads_the_log_as_it_grows_and_skips_a_torn_line(tmp_path):
  path = tmp_path / "log.jsonl"
  history = mutant_log.KillerHistory(path)
  history.refresh()  # no log yet
  mutant_log.append_record(path, {"mutant": FN + "__mutmut_1", "killer": "k1", "wall": 1.0,
                                  "run": 2})
  mutant_log.append_record(path, {"mutant": FN + "__mutmut_2", "killer": None, "wall": 5.0,
                                  "run": 7})
  with open(path, "a") as f:
    f.write('{"mutant": "' + OTHER_FN + '__mutmut_1", "killer": "k')  # a child still writing
  history.refresh()
  assert list(history.by_function[FN]) == ["k1"]
  assert history.order(["fast", "k1"], FN + "__mutmut_3", DUR) == ["k1", "fast"]
  assert history.order(["fast", "k1"], OTHER_FN + "__mutmut_3", DUR) == ["k1", "fast"]  # module
  with open(path, "a") as f:
    f.write('2", "wall": 0.3, "run": 1}\n')
  history.refresh()
  assert list(history.by_function[OTHER_FN]) == ["k2"]
  assert history.order(["k2", "fast", "k1"], "tff_idp.engine.sampling.x_f__mutmut_1", DUR) == [
      "k2", "fast", "k1"]  # another module: unchanged
  assert len(mutant_log.read_records(path)) == 3


def test_summary_per_module(tmp_path):
  path = tmp_path / "log.jsonl"
  for i, (killer, run, wall) in enumerate([("k1", 1, 1.0), ("k2", 3, 2.0), (None, 5, 6.0)]):
    mutant_log.append_record(path, {"mutant": f"{FN}__mutmut_{i}", "killer": killer,
                                    "run": run, "wall": wall})
  text = mutant_log.summary(mutant_log.read_records(path))
  row = [line for line in text.splitlines() if line.startswith("tff_idp.accounting.client.scale")]
  assert row and row[0].split()[1:] == ["3", "9", "3.00", "2", "50%"]
  assert json.loads(path.read_text().splitlines()[0])["mutant"].endswith("__mutmut_0")


def test_killers_go_by_kills_per_second_with_a_floor_on_tiny_durations():
  """A slow test that killed many of a function's mutants goes before a fast one that killed
  one; a 1 ms test counts as 50 ms. Bug caught: killers by duration alone (the ninth pass's
  dp_sgd.py mutants then ran 7.6 tests each, the frequent killers far down the list)."""
  durations = {"many": 1.0, "once": 0.2, "tiny": 0.001, "other": 0.01}
  ordered = ["other", "tiny", "once", "many"]
  out = mutant_log.killers_first(ordered, {"many": 30, "once": 1, "tiny": 1}, {}, durations)
  assert out == ["many", "tiny", "once", "other"]
  out = mutant_log.killers_first(ordered, {"many": 30, "tiny": 1}, {}, durations, n_function=1)
  assert out == ["many", "other", "tiny", "once"]


def test_replay_charges_each_killed_mutant_its_tests_up_to_the_killer():
  """The second mutant of a function gets the first one's killer in front; survivors cost
  nothing here (they run everything either way)."""
  durations = {"a": 1.0, "b": 2.0, "k": 4.0}
  records = [{"mutant": FN + "__mutmut_1", "killer": "k"},
             {"mutant": FN + "__mutmut_2", "killer": "k"},
             {"mutant": FN + "__mutmut_3", "killer": None}]
  tests_of = lambda mutant: ["a", "b", "k"]  # pylint: disable=unnecessary-lambda-assignment
  assert mutant_log.replay(records, tests_of, durations, 0, 0) == 14.0
  assert mutant_log.replay(records, tests_of, durations) == 7.0 + 4.0


def test_children_stopped_in_a_limited_test_are_listed(tmp_path):
  """A marker left by a child that died under a test's own CPU limit names the mutant and
  the test; a torn marker is ignored; no markers, no section."""
  assert mutant_log.stopped_in_tests(tmp_path) == ""
  (tmp_path / "11.json").write_text(json.dumps({"mutant": "m.x_f__mutmut_2", "test": "t::a"}))
  (tmp_path / "12.json").write_text("{torn")
  out = mutant_log.stopped_in_tests(tmp_path)
  assert out.startswith("1 mutants stopped") and "m.x_f__mutmut_2: t::a" in out
