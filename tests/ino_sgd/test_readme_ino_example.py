"""The INO-SGD example in docs/ino_sgd.md runs as printed (docs that match the code)."""
import contextlib
import io
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join("docs", "ino_sgd.md")   # moved out of README.md (issue 9)


def _example() -> str:
  text = open(os.path.join(ROOT, PAGE), encoding="utf-8").read()
  match = re.search(r"<!-- ino-example -->\n```python\n(.*?)```", text, re.S)
  assert match, f"{PAGE} lost its <!-- ino-example --> block"
  return match.group(1)


def test_readme_ino_example_runs_and_stays_within_budget():
  out = io.StringIO()
  scope = {}
  with contextlib.redirect_stdout(out):
    exec(compile(_example(), f"{PAGE}:ino-example", "exec"), scope)  # pylint: disable=exec-used
  plan, run = scope["plan"], scope["run"]
  assert all(a <= e for a, e in zip(plan.achieved_epsilons, plan.target_epsilons))
  assert plan.sampling_rates[0] < plan.sampling_rates[1]
  assert 0.0 <= run.final["acc/0-4"] <= 1.0 and run.final["imbalance"] >= 0.0
  assert out.getvalue().strip()
