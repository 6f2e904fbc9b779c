"""benchmarks.bench_round_throughput accepts the small settings its docs advertise."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_clip_bit_noise_is_valid_for_every_cohort_size():
  from benchmarks import bench_round_throughput as bench
  for clients in range(1, 61):
    sigma_b = bench.clipped_count_stddev(clients)
    assert bench.NOISE_MULTIPLIER < 2 * sigma_b  # adaptive clipping's requirement
  assert bench.clipped_count_stddev(30) == pytest.approx(0.05 * 30)  # TFF's default there


@pytest.mark.slow
@pytest.mark.bench  # make bench; in make test: the cohort-size test above
def test_four_clients_run_every_entry(tmp_path):
  """--clients=4 crashed before (stock TFF's dp_aggregator refused σ_b = 0.2)."""
  code = ("from benchmarks import bench_round_throughput as b; "
          "r = b.main(rounds=1, clients=4, examples=8, epochs=1, breakdown=False, "
          "record_level=True, out_path=None); print(b._tables(r))")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                        text=True, timeout=600, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "| stock TFF (dp_aggregator + build_unweighted_fed_avg) |" in proc.stdout
  assert "4 clients × 8 examples × 1 epochs" in proc.stdout
  assert "- default (client_execution=auto: in process): round" in proc.stdout
  assert "- client_execution=tff (TFF client work): round" in proc.stdout
