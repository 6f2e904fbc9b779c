"""The centralized comparison's settings: defaults pass, each bad value names its flag."""
import pytest

from tff_idp.centralized import settings

GOOD = dict(mode="both", methods=["scf", "binary_search", "filter"], seeds=["0", "1"],
            levels=["2.0", "4.7", "11.8"], level_ratios=["0.7", "0.2", "0.1"],
            noise_multiplier=1.0, steps=1000, clip_norm=1.0, learning_rate=2.0, delta=1e-5,
            filter_noise_multiplier=0.0, filter_steps=0, filter_learning_rate=16.0,
            filter_alpha=0.0, filter_check="worst_case", train_examples=4000,
            test_examples=2000, data_seed=0, budget_seed=0, eval_every=100,
            table3_examples=1000, table3_trials=2, table3_noise_multiplier=1.0,
            table3_steps=300, table3_learning_rate=1.0, insecure_reproducible_noise=False)


def test_defaults_give_the_settings_the_runs_read():
  cfg = settings.checked(GOOD)
  assert cfg["seeds"] == [0, 1] and cfg["filter_steps"] == 1000 and cfg["filter_alpha"] is None
  assert cfg["distribution"].epsilons == (2.0, 4.7, 11.8)
  settings.check_silo(cfg, 4000)


@pytest.mark.parametrize("change,flag", [
    (dict(methods=["bogus"]), "--methods"), (dict(seeds=[]), "--seeds"),
    (dict(table3_trials=0), "--table3_trials=0"), (dict(eval_every=-1), "--eval_every=-1"),
    (dict(clip_norm=float("inf")), "--clip_norm=inf"),
    (dict(filter_learning_rate=0.0), "--filter_learning_rate"),
    (dict(filter_noise_multiplier=-1.0), "--filter_noise_multiplier"),
    (dict(filter_alpha=1.0), "--filter_alpha"), (dict(level_ratios=["a"]), "--level_ratios"),
    (dict(train_examples=500), "--table3_examples=1000"),
])
def test_a_bad_value_names_its_flag(change, flag):
  with pytest.raises(ValueError, match=flag):
    settings.checked(dict(GOOD, **change))


def test_the_silo_must_hold_table3s_subset_and_table3_needs_a_rate_method():
  cfg = settings.checked(GOOD)
  with pytest.raises(ValueError, match="exceeds the silo's 999 records"):
    settings.check_silo(cfg, 999)
  with pytest.raises(ValueError, match="put scf and/or binary_search"):
    settings.check_silo(dict(cfg, methods=["filter"]), 4000)
  settings.check_silo(dict(cfg, mode="compare", methods=["filter"]), 10)
