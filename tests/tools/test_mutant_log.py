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
