"""Filter baseline: private GD with an individual Rényi filter (FZ21 Alg. 3, rPDP-FL §7.1.1)."""
import math

import numpy as np
import pytest

from tff_idp.centralized import filter_gd

DELTA = 1e-5


# --- accounting (numpy only) ---------------------------------------------------------


def test_balle_budget_converts_back_to_epsilon_with_dp_accounting():
  """B(α) is exactly the RDP whose dp-accounting (ε, δ) conversion is ε."""
  from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
  checked = 0
  for eps in (0.5, 2.0, 4.7, 11.8):
    for alpha in (1.5, 3.0, 10.2, 64.0, 300.0):
      budget = float(filter_gd.rdp_budget(eps, DELTA, alpha))
      if budget <= 0:  # this order cannot reach ε at all
        continue
      got, order = rdp_lib.compute_epsilon([alpha], [budget], DELTA)
      assert order == alpha
      assert got == pytest.approx(eps, rel=1e-9), (eps, alpha)
      assert float(filter_gd.rdp_to_epsilon(budget, DELTA, alpha)) == pytest.approx(eps, rel=1e-12)
      checked += 1
  assert checked >= 12


def test_mironov_budget_is_the_textbook_conversion_and_looser():
  alpha = np.array([2.0, 5.0, 20.0])
  b = filter_gd.rdp_budget(3.0, DELTA, alpha, conversion="mironov")
  np.testing.assert_allclose(b + math.log(1 / DELTA) / (alpha - 1), 3.0)
  assert np.all(b < filter_gd.rdp_budget(3.0, DELTA, alpha))  # Balle gives more budget
  assert filter_gd.rdp_budget(np.inf, DELTA, 3.0) == np.inf


def test_best_orders_maximize_worst_case_steps_and_grow_as_budgets_shrink():
  eps = np.array([0.5, 1.0, 2.0, 4.7, 11.8])
  alpha = filter_gd.best_orders(eps, DELTA)
  assert np.all(np.diff(alpha) < 0)  # smaller ε → larger order
  fine = 1.0 + np.geomspace(1e-3, 1e4, 200_001)
  for e, a in zip(eps, alpha):
    best = np.max(filter_gd.rdp_budget(e, DELTA, fine) / fine)
    assert filter_gd.rdp_budget(e, DELTA, a) / a == pytest.approx(best, rel=1e-4)
  # σ cancels: the order is a function of (ε, δ) only.
  steps = [filter_gd.worst_case_steps(2.0, DELTA, s) for s in (5.0, 20.0)]
  assert steps[1] >= 15.9 * steps[0]


def test_noise_for_steps_affords_exactly_that_many_worst_case_steps():
  for eps, steps in ((11.8, 1000), (2.0, 40), (4.7, 1)):
    sigma = filter_gd.noise_for_steps(eps, steps, DELTA)
    assert filter_gd.worst_case_steps(eps, DELTA, sigma) == steps
    # steps ∝ σ²: a hair less noise affords one step fewer
    assert filter_gd.worst_case_steps(eps, DELTA, sigma * (1 - 0.2 / steps)) == steps - 1


def _worst_case_norms(active):
  return np.ones(int(np.sum(active)))


def test_filter_with_full_norms_gives_each_budget_its_worst_case_steps():
  """All per-example norms at L: a record takes exactly ⌊B·2σ²/α⌋ steps, then stops."""
  eps = np.array([2.0, 2.0, 4.7, 11.8, np.inf])
  filt = filter_gd.RenyiFilter(eps, DELTA, noise_multiplier=4.0)
  expected = filter_gd.worst_case_steps(eps, DELTA, 4.0)
  first_out = np.full(eps.size, -1)
  for t in range(400):
    active = filt.worst_case_active()
    first_out[(first_out < 0) & ~active] = t
    filt.charge(active, _worst_case_norms(active))
  np.testing.assert_array_equal(filt.steps_taken[:4], expected[:4])
  assert filt.steps_taken[4] == 400  # ε = inf is never filtered
  # smaller budgets are filtered earlier
  assert first_out[0] == first_out[1] < first_out[2] < first_out[3]
  assert np.all(filt.spent[:4] <= filt.budget[:4])
  assert np.all(filt.epsilon_spent()[:4] <= eps[:4])


@pytest.mark.parametrize("check", filter_gd.CHECKS)
@pytest.mark.parametrize("alpha", [None, 8.0])
def test_no_record_ever_goes_over_its_budget(check, alpha):
  """Random budgets and random per-step norms (seeded): spent ≤ B and ε_spent ≤ ε at every step."""
  rng = np.random.default_rng(7)
  n = 300
  eps = rng.uniform(0.3, 12.0, n)
  filt = filter_gd.RenyiFilter(eps, DELTA, noise_multiplier=3.0, alpha=alpha)
  for _ in range(200):
    norms = rng.uniform(0.0, 1.5, n)  # ‖g‖/L; > 1 gets clipped
    if check == "worst_case":
      active = filt.worst_case_active()
    else:
      cand = filt.candidates()
      active = filt.admit(norms[cand], cand)
    filt.charge(active, norms[active])
    assert np.all(filt.spent <= np.maximum(filt.budget, 0.0))
  assert np.all(filt.spent[filt.budget <= 0] == 0)  # no budget, never charged
  spent = filt.epsilon_spent()
  assert np.all(spent <= eps * (1 + 1e-12))
  # Independent check of the final ε with dp-accounting's conversion.
  from tff_idp.accounting import fast_rdp
  for i in rng.choice(n, 20, replace=False):
    if filt.spent[i] > 0:
      e = fast_rdp.rdp_to_epsilon(np.array([filt.alpha[i]]), np.array([filt.spent[i]]), DELTA)
      assert e <= eps[i] * (1 + 1e-12)
  # Smaller norms buy more steps than the worst case allows.
  assert np.mean(filt.steps_taken) > np.mean(
      np.minimum(filter_gd.worst_case_steps(eps, DELTA, 3.0, alpha), 200))


def test_actual_check_admits_a_record_whose_actual_step_still_fits():
  filt = filter_gd.RenyiFilter([3.0], DELTA, noise_multiplier=2.0)
  filt.spent[:] = filt.budget - 0.5 * filt.worst_step  # half a worst-case step left
  assert not filt.worst_case_active()[0]
  assert filt.admit(np.array([0.6]))[0]  # 0.36 of a worst-case step fits
  assert not filt.admit(np.array([0.8]))[0]  # 0.64 does not
  with pytest.raises(AssertionError, match="exceed"):
    filt.charge(np.array([True]), np.array([1.0]))


def test_budgets_too_small_for_any_step_never_take_part():
  filt = filter_gd.RenyiFilter([0.01, 5.0], DELTA, noise_multiplier=1.0, alpha=20.0)
  assert filt.budget[0] <= 0 and filt.never_active() == 1
  assert not filt.worst_case_active()[0] and not filt.candidates()[0]


@pytest.mark.parametrize("call,match", [
    (lambda: filter_gd.rdp_budget(1.0, DELTA, 1.0), "order"),
    (lambda: filter_gd.rdp_budget(1.0, 1.5, 2.0), "delta"),
    (lambda: filter_gd.rdp_budget(1.0, DELTA, 2.0, conversion="x"), "conversion"),
    (lambda: filter_gd.RenyiFilter([1.0, 0.0], DELTA, 1.0), "budget"),
    (lambda: filter_gd.RenyiFilter([1.0], DELTA, 0.0), "noise_multiplier"),
    (lambda: filter_gd.noise_for_steps(2.0, 0, DELTA), "steps"),
    (lambda: filter_gd.noise_for_steps(0.01, 10, DELTA, alpha=2.0), "no RDP budget"),
])
def test_bad_inputs_get_clear_errors(call, match):
  with pytest.raises(ValueError, match=match):
    call()


# --- the TensorFlow step ---------------------------------------------------------------


def _logreg(seed=1):
  from tff_idp import models
  return models.build_logistic_regression(6, 3, seed=seed)


def _data(n=9, seed=0):
  rng = np.random.default_rng(seed)
  return (rng.normal(size=(n, 6)).astype(np.float32) * 2,
          rng.integers(0, 3, n).astype(np.int32))


def test_zero_noise_step_is_the_clipped_sum_over_active_records_divided_by_n():
  """θ' = θ − η·Σ_{i active} clip_L(g_i)/n, checked against a one-example-at-a-time loop."""
  import tensorflow as tf
  model = _logreg()
  x, y = _data()
  active = np.array([1, 0, 1, 1, 0, 1, 1, 1, 0], bool)
  clip, lr, n = 0.7, 0.3, len(y)
  before = [v.numpy().astype(np.float64) for v in model.trainable_variables]
  expected = [np.zeros_like(b) for b in before]
  hand_norms = []
  for i in np.flatnonzero(active):
    with tf.GradientTape() as tape:
      loss = filter_gd.sparse_categorical_crossentropy(y[i:i + 1], model(x[i:i + 1]))[0]
    grads = tape.gradient(loss, model.trainable_variables)
    norm = math.sqrt(sum(float(tf.reduce_sum(g * g)) for g in grads))
    hand_norms.append(norm)
    for e, g in zip(expected, grads):
      e += min(1.0, clip / norm) * g.numpy()
  step, norms_fn = filter_gd.build_private_gd_step(model, lr, 0.0, clip, n)
  np.testing.assert_allclose(norms_fn(x[active], y[active]).numpy(), hand_norms, rtol=1e-4)
  norms = step(x[active], y[active], tf.constant([0, 0], tf.int64)).numpy()
  np.testing.assert_allclose(norms, hand_norms, rtol=1e-4)
  assert np.any(np.asarray(hand_norms) > clip)  # clipping is exercised
  for v, b, e in zip(model.trainable_variables, before, expected):
    np.testing.assert_allclose(v.numpy(), b - lr * e / n, rtol=1e-4, atol=1e-6)


def test_noise_std_is_sigma_times_clip_and_an_empty_step_still_adds_noise():
  """Statistical (seeded, so deterministic in CI): an empty batch moves θ by −η·z/n.

  40 seeds × 21 coordinates = 840 draws of z ~ N(0, (σL)²); the sample std has
  a relative sd of 1/sqrt(2·840) ≈ 2.4%, so the ±12% band is 5 sd wide each
  side: flake rate < 1e-6 for an unseeded variant.
  """
  import tensorflow as tf
  model = _logreg()
  sigma, clip, lr, n = 1.5, 0.4, 2.0, 10
  step, _ = filter_gd.build_private_gd_step(model, lr, sigma, clip, n)
  draws = []
  x0, y0 = np.zeros((0, 6), np.float32), np.zeros(0, np.int32)
  for seed in range(40):
    before = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    assert step(x0, y0, tf.constant([seed, 1], tf.int64)).shape == (0,)
    after = np.concatenate([v.numpy().ravel() for v in model.trainable_variables])
    draws.append((before - after) * n / lr)
  z = np.concatenate(draws)
  assert z.size == 40 * 21
  assert np.std(z) == pytest.approx(sigma * clip, rel=0.12)
  assert abs(np.mean(z)) < 5 * sigma * clip / math.sqrt(z.size)


@pytest.mark.parametrize("check", filter_gd.CHECKS)
def test_run_tracks_active_records_and_stays_within_budgets(check):
  x, y = _data(n=40, seed=3)
  eps = np.repeat([2.0, 4.0, 8.0], [20, 12, 8])  # 1, 3 and 12 worst-case steps
  model = _logreg()
  sigma = filter_gd.noise_for_steps(8.0, 12, DELTA)
  calls = []
  run = filter_gd.run_private_gd_with_filter(
      model, x, y, eps, DELTA, sigma, clip_norm=0.5, learning_rate=0.5, steps=12, seed=1,
      check=check, evaluate=lambda: calls.append(1) or {"ok": 1}, eval_every=5)
  assert run.active.shape == (12,) and run.active[0] == 40
  assert [h[0] for h in run.history] == [5, 10, 12] and len(calls) == 3
  assert np.all(run.filter.spent <= run.filter.budget)
  assert np.all(run.filter.epsilon_spent() <= eps * (1 + 1e-12))
  if check == "worst_case":  # once out, out for good
    assert np.all(np.diff(run.active) <= 0)
  ff = run.first_filtered
  assert ff[2.0] is not None and ff[2.0] < (ff[4.0] or 99)
  assert ff[8.0] is None  # the largest budget affords all 12 steps
  assert run.seconds_per_step() > 0 and run.seconds_per_step(tf_only=True) > 0


def test_run_is_reproducible_from_its_seed():
  x, y = _data(n=20, seed=4)
  eps = np.full(20, 5.0)
  outs = []
  for _ in range(2):
    model = _logreg()
    filter_gd.run_private_gd_with_filter(model, x, y, eps, DELTA, 3.0, 1.0, 0.5, 3, seed=5)
    outs.append(np.concatenate([v.numpy().ravel() for v in model.trainable_variables]))
  np.testing.assert_array_equal(outs[0], outs[1])


def test_run_rejects_mismatched_budgets_and_bad_check():
  x, y = _data(n=5)
  with pytest.raises(ValueError, match="one budget per record"):
    filter_gd.run_private_gd_with_filter(_logreg(), x, y, np.ones(4), DELTA, 1.0, 1.0, 0.1, 2)
  with pytest.raises(ValueError, match="check"):
    filter_gd.run_private_gd_with_filter(_logreg(), x, y, np.ones(5), DELTA, 1.0, 1.0, 0.1, 2,
                                         check="bogus")
