"""FMT22 closed form, Eq. (2) and numerical bounds; notes §2.3, §2.6, §2.8 D4."""
import pytest

from tff_idp.accounting.shuffle import fmt22


@pytest.mark.parametrize("n,e0,d,closed,eq2", [
    (10_000, 1.0, 1e-8, 0.264230, 0.240805),
    (10_000, 0.5, 1e-8, 0.119926, 0.106422),
    (100_000, 4.0, 1e-6, 0.537804, None),
])
def test_closed_forms(n, e0, d, closed, eq2):
  assert fmt22.closed_form_valid(n, e0, d)
  assert fmt22.closed_form(n, e0, d) == pytest.approx(closed, abs=5e-7)
  if eq2 is not None:
    assert fmt22.eq2(n, e0, d) == pytest.approx(eq2, abs=5e-7)


def test_closed_form_outside_regime_returns_eps0():
  assert not fmt22.closed_form_valid(1000, 3.0, 1e-8)
  assert fmt22.closed_form(1000, 3.0, 1e-8) == 3.0


def test_apes_copy_as_shipped():
  # privAmp/computeamplification.py with 10 halvings, step 100, typo.
  assert fmt22.numeric_apple(10_000, 1.0, 1e-8, 10, fix_typo=False) == pytest.approx(0.069670, abs=5e-7)
  assert fmt22.numeric_apple(10_000, 0.5, 1e-8, 10, fix_typo=False) == pytest.approx(0.027522, abs=5e-7)


def test_apple_first_release_loop_reproduces_notes():
  assert fmt22.numeric_apple(10_000, 1.0, 1e-8, loop="half") == pytest.approx(0.07050, abs=5e-6)
  assert fmt22.numeric_apple(10_000, 0.5, 1e-8, loop="half") == pytest.approx(0.02736, abs=5e-6)


@pytest.mark.slow
def test_apple_first_release_loop_large_n():
  assert fmt22.numeric_apple(100_000, 4.0, 1e-6, loop="half") == pytest.approx(0.17248, abs=5e-6)


def test_deltaqadd_typo_is_harmless():
  # P_c and Q_c are mirror images, so the q-side never exceeds the p-side.
  for loop in ("expectation", "half"):
    a = fmt22.numeric_apple(10_000, 1.0, 1e-8, 20, fix_typo=True, loop=loop)
    b = fmt22.numeric_apple(10_000, 1.0, 1e-8, 20, fix_typo=False, loop=loop)
    assert a == b
  assert fmt22.numeric_apple(10_000, 1.0, 1e-8, 20) == pytest.approx(0.069537, abs=5e-6)


@pytest.mark.parametrize("n,e0,d,exact,apple", [
    (10_000, 1.0, 1e-8, 0.068880, 0.069537),
    (10_000, 0.5, 1e-8, 0.027238, 0.027464),
    (100_000, 4.0, 1e-6, 0.169770, 0.175078),
])
def test_exact_numeric_is_below_blocked_loops(n, e0, d, exact, apple):
  got = fmt22.numeric(n, e0, d)
  assert got == pytest.approx(exact, abs=5e-6)
  assert got <= apple
  assert got <= fmt22.closed_form(n, e0, d)


def test_errors():
  with pytest.raises(ValueError, match="n="):
    fmt22.closed_form(1, 1.0, 1e-8)
  with pytest.raises(ValueError, match="epsilon0"):
    fmt22.numeric(100, 0.0, 1e-8)
  with pytest.raises(ValueError, match="delta"):
    fmt22.eq2(100, 1.0, 1.0)
  with pytest.raises(ValueError, match="loop"):
    fmt22.numeric_apple(100, 1.0, 1e-8, loop="mid")
