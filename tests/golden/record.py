"""Records the golden outputs: ``python -m tests.golden.record [name ...]``."""
import json
import sys
import tempfile
import pathlib

from tests.golden import runs


def main(names: list[str]) -> int:
  runs.GOLDEN_DIR.mkdir(exist_ok=True)
  for name in names or list(runs.RUNS):
    with tempfile.TemporaryDirectory() as tmp:
      result = runs.run(name, pathlib.Path(tmp))
    runs.path(name).write_text(json.dumps(result, indent=1, sort_keys=True,
                                          ensure_ascii=False) + "\n")
    print(f"recorded {name}: {len(result['tables'])} table lines", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
