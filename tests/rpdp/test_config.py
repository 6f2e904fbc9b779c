"""rPDP-FL's settings, their checks and the records' budgets (tff_idp/rpdp/config.py), no TF."""
import types

import numpy as np
import pytest

from tff_idp import preferences
from tff_idp.rpdp import config

SETTINGS = dict(noise_multiplier=2.0, local_steps=10, rounds=30, client_rate=0.5, delta=1e-4,
                threat_model="type2", clip_norm=1.0, distribution="three_levels",
                class_budgets=None, fresh_budgets_per_seed=False, audit_canaries=0,
                audit_levels=None, release_only=False)


def _federation():
  y = {"a": np.array([0, 1, 1, 2]), "b": np.array([2, 2, 0])}
  records = types.SimpleNamespace(y=y, sizes={k: len(v) for k, v in y.items()})
  return types.SimpleNamespace(records=records, num_classes=3)


def test_settings_names_are_the_check_s_keywords():
  assert set(config.SETTINGS) == set(SETTINGS)
  params, by_class, levels = config.check_settings([0, 1], **SETTINGS)
  assert (params.rounds, params.local_steps, params.client_rate) == (30, 10, 0.5)
  assert not by_class and levels is None


@pytest.mark.parametrize("changes,message", [
    ({"clip_norm": float("inf")}, "--clip_norm=inf must be a finite number > 0"),
    ({"distribution": "by_class"}, "needs --class_budgets"),
    ({"distribution": "by_class", "class_budgets": ["foo"]}, "^--class_budgets: "),
    ({"class_budgets": ["0-9:1"]}, "only used with --distribution=by_class"),
    ({"distribution": "by_class", "class_budgets": ["0-9:1"], "fresh_budgets_per_seed": True},
     "nothing to draw again"),
    ({"audit_canaries": 4, "release_only": True}, "run the audit without --release_only"),
    ({"audit_canaries": 4, "audit_levels": ["x"]}, "must be numbers"),
    ({"audit_levels": ["1"]}, "only used with --audit_canaries"),
])
def test_bad_settings_name_their_flag(changes, message):
  with pytest.raises(ValueError, match=message):
    config.check_settings([0], **{**SETTINGS, **changes})
  with pytest.raises(ValueError, match="--seeds is empty"):
    config.check_settings([], **SETTINGS)
  with pytest.raises(ValueError, match="choose from ours, minimum, dropout, privacy_free"):
    config.check_methods(["ours", "bogus"])


def test_the_sampler_of_three_levels_takes_the_levels_and_names_the_flags():
  sampler = config.sampler("three_levels", ["0.5", "2"], ["0.25", "0.75"])
  assert preferences.expected_budget(sampler) == pytest.approx(0.25 * 0.5 + 0.75 * 2)
  assert config.sampler("by_class", [], []) is None
  with pytest.raises(ValueError, match="^--levels/--level_ratios: "):
    config.sampler("three_levels", ["0.1", "1", "5"], ["0.7", "0.3"])


def test_budgets_by_class_follow_the_labels_and_the_cutoff_the_specification():
  budgets = config.assign_budgets(_federation(), None, distribution="by_class",
                                  class_budgets=["0:0.5", "1-2:2"],
                                  fresh_budgets_per_seed=False, budget_seed=0)
  assert budgets.budgets["a"].tolist() == [0.5, 2.0, 2.0, 2.0]
  assert budgets.dropout_cutoff == pytest.approx((0.5 + 2 + 2) / 3)  # each class once
  assert budgets.class_groups == {0: "eps=0.5", 1: "eps=2", 2: "eps=2"}
  assert budgets.described == "by_class (0:0.5,1-2:2)"
  with pytest.raises(ValueError, match="^--class_budgets: .*class 3 does not exist"):
    config.assign_budgets(_federation(), None, distribution="by_class",
                          class_budgets=["0-3:1"], fresh_budgets_per_seed=False, budget_seed=0)


def test_drawn_budgets_once_or_afresh_per_seed():
  sampler = config.sampler("three_levels", ["0.1", "1", "5"], ["0.7", "0.2", "0.1"])
  once = config.assign_budgets(_federation(), sampler, distribution="three_levels",
                               class_budgets=None, fresh_budgets_per_seed=False, budget_seed=3)
  sizes = _federation().records.sizes
  expected = preferences.assign_record_budgets(sampler, sizes, 3)
  assert {k: v.tolist() for k, v in once.budgets.items()} == {
      k: v.tolist() for k, v in expected.items()}
  assert once.dropout_cutoff == pytest.approx(0.77) and once.class_groups is None
  assert once.described == "three_levels"
  fresh = config.drawn_budgets(sampler, sizes, 3, fresh_budgets_per_seed=True)
  seed1 = preferences.assign_record_budgets(sampler, sizes,
                                            preferences.per_seed_budget_seed(3, 1))
  assert {k: v.tolist() for k, v in fresh(1).items()} == {k: v.tolist() for k, v in seed1.items()}
