"""The settings of an INO-SGD comparison and their checks (tff_idp/ino_sgd/config.py), no TF."""
import numpy as np
import pytest

from tff_idp.ino_sgd import config
from tff_idp.ino_sgd import defaults
from tff_idp.ino_sgd import methods


def _given(**changes):
  """What the command line passes when no flag is given (None: the preset's value)."""
  given = {name: None for name in config.SETTINGS}
  given.update(methods=list(defaults.DEFAULTS["methods"]), drop_percents=["10", "30"],
               seeds=["0", "1"], delta=1e-5, train_examples=None, test_examples=None,
               eval_every=100, data_seed=0, progress=False,
               insecure_reproducible_noise=False, release_only=False)
  given.update(changes)
  return given


def test_the_embedded_preset_is_the_shared_defaults_on_its_own_data():
  cfg = config.resolve("embedded", _given(), own_data=False)
  for name in ("steps", "expected_batch", "learning_rate", "clip_norm", "mechanism",
               "ino_gamma_ratio", "ino_alpha", "ino_beta"):
    assert cfg[name] == defaults.DEFAULTS[name], name
  assert cfg["epsilons"] == [0.1, 1.0] and cfg["owner_names"] == ["0-4", "5-9"]
  assert cfg["train_examples"] == defaults.EMBEDDED_TRAIN_EXAMPLES
  assert cfg["drop_percents"] == [10.0, 30.0] and cfg["seeds"] == [0, 1]
  own = config.resolve("embedded", _given(), own_data=True)  # your split is used whole
  assert own["train_examples"] == 0 and own["test_examples"] == 0


def test_a_given_value_overrides_the_preset():
  cfg = config.resolve("cl", _given(steps=7, epsilons=[str(e) for e in range(1, 11)]),
                       own_data=False)
  assert cfg["steps"] == 7 and cfg["epsilons"] == [float(e) for e in range(1, 11)]
  assert cfg["mechanism"] == "scale" and len(cfg["owner_names"]) == 10


@pytest.mark.parametrize("changes,message", [
    ({"methods": ["sgd"]}, "choose from idp_sgd, drop, ino_sgd"),
    ({"methods": ["drop"], "drop_percents": ["100"]}, "percentages in (0, 100)"),
    ({"seeds": []}, "--seeds is empty"),
    ({"epsilons": ["1"]}, "preset has 2 owners (0-4, 5-9)"),
    ({"steps": 0}, "--steps=0 must be >= 1"),
    ({"ino_gamma_ratio": float("inf")}, "--ino_gamma_ratio=inf must be >= 0"),
    ({"delta": 1.0}, "--delta=1.0 must be in (0, 1)"),
])
def test_bad_settings_name_their_flag(changes, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
    config.resolve("embedded", _given(**changes), own_data=False)


def test_owner_settings_and_class_budgets_name_their_flags():
  with pytest.raises(ValueError, match="not both"):
    config.check_owner_settings(["0-9:1"], "three_levels", epsilons_given=False)
  with pytest.raises(ValueError, match="drop --epsilons"):
    config.check_owner_settings(None, "three_levels", epsilons_given=True)
  config.check_owner_settings(None, None, epsilons_given=True)  # the preset's owners
  assert config.class_budgets(None, 10) is None
  assert config.class_budgets(["0-4:0.1", "5-9:1"], 10)[7] == 1.0
  with pytest.raises(ValueError, match="^--class_budgets: "):
    config.class_budgets(["0-4:0.1"], 10)


def test_the_batch_is_set_from_the_records_and_checked_against_them():
  cfg = config.resolve("embedded", _given(), own_data=False)
  owners = methods.owners_of_classes(np.arange(200) % 10, ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)),
                                     cfg["epsilons"])
  config.fit_to_data(cfg, owners, 200)
  assert cfg["expected_batch"] == 20.0  # a tenth of the records
  too_big = config.resolve("embedded", _given(expected_batch=500.0), own_data=False)
  with pytest.raises(ValueError, match="exceeds the 200 records; lower it"):
    config.fit_to_data(too_big, owners, 200)
  with pytest.raises(ValueError, match="exceeds the silo's at most 100 records"):
    config.check_batch({"expected_batch": 500.0, "train_examples": 100})
  config.check_batch({"expected_batch": 500.0, "train_examples": 0})  # size unknown yet


def test_record_budgets_drawn_by_name_make_owners_of_equal_budget():
  labels = np.arange(300) % 3
  owners = config.owners_by_drawn_budgets(labels, "three_levels", 0, num_classes=3)
  assert owners.epsilons == (0.1, 1.0, 5.0) and not owners.by_class
  again = config.owners_by_drawn_budgets(labels, "three_levels", 0, num_classes=3)
  assert again.of_record.tolist() == owners.of_record.tolist()  # seeded


def test_the_line_before_training_holds_no_record_count_in_a_release():
  cfg = config.resolve("embedded", _given(expected_batch=None), own_data=False)
  labels = np.arange(100) % 10
  owners = methods.owners_of_classes(labels, ((0, 1, 2, 3, 4), (5, 6, 7, 8, 9)), [0.1, 1.0])
  config.fit_to_data(cfg, owners, 100)
  line = config.run_line("MN", "Synthetic IID (pooled, 100 records)", 20, owners, cfg, False)
  assert line.startswith("MN: Synthetic IID (pooled, 100 records), 20 test; owners "
                         "0-4: ε=0.1 (50 records), 5-9: ε=1 (50 records); SAMPLE, T=1000, b=10,")
  cfg["release_only"] = True
  line = config.run_line("MN", "Synthetic IID (pooled, 100 records)", 20, owners, cfg, False)
  assert "records" not in line and "b from the record count (not shown)" in line
  assert line.startswith("MN: Synthetic IID (pooled), 20 test; owners 0-4: ε=0.1, 5-9: ε=1;")


def test_the_papers_numbers_become_one_note():
  assert config.paper_notes(None) == []
  (note,) = config.paper_notes(defaults.PRESETS["cl"].paper)
  assert note.startswith("Paper (Table 3, CL-PC (5 runs)), overall accuracy (%): IDP-SGD 63.35")
