"""One DP-SGD step vs one non-private step (rPDP-FL local update), side by side.

For each model and a batch of 64 examples, times (median over interleaved
repetitions, all in one process, after warm-up):

* ``nonprivate``: gradient of the mean loss + SGD update;
* ``ours``: tff_idp's per-example clipping (layer-wise fast path where the
  model allows it) + N(0, σ²L²) + divide by the expected batch + SGD update;
* ``ours_generic``: the same with the generic ``tf.vectorized_map`` path;
* ``tfp_microbatch``: tensorflow-privacy 0.9's ``DPKerasSGDOptimizer`` with
  one micro-batch per example (its per-example path: ``tape.jacobian``).

Ratios are relative to ``nonprivate`` measured in the same run. The goal is
ours ≤ 3× on the paper's CNN.

  python -m benchmarks.bench_dp_step [--repeats=7] [--steps=10]
"""
from __future__ import annotations

import collections
import json
import os
import sys
import time

import numpy as np

BATCH = 64
RESULTS = os.path.join(os.path.dirname(__file__), "results", "dp_step.json")


def _models():
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  return {
      "rpdp_mnist_cnn (26k params)": (lambda: models.build_rpdp_mnist_cnn(), (28, 28, 1)),
      "idp_fedavg_cnn 28x28x1": (lambda: models.build_idp_fedavg_cnn((28, 28, 1), 10),
                                 (28, 28, 1)),
      "logistic regression (60→10)": (lambda: models.build_logistic_regression(60, 10),
                                      (60,)),
  }


def bench_model(builder, shape, repeats: int, steps: int) -> dict:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_privacy as tfp  # pylint: disable=g-import-not-at-top
  from tff_idp import models  # pylint: disable=g-import-not-at-top
  from tff_idp.rpdp import dp_sgd  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)
  x = tf.constant(rng.random((BATCH,) + shape, dtype=np.float32))
  y = tf.constant(rng.integers(0, 10, BATCH).astype(np.int32))
  spec = collections.OrderedDict(x=tf.TensorSpec([None] + list(shape), tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  lr, sigma, clip = 0.05, 1.0, 1.0

  keras_plain = builder()
  var_plain = keras_plain.trainable_variables

  @tf.function
  def nonprivate():
    with tf.GradientTape() as tape:
      loss = tf.reduce_mean(dp_sgd.sparse_categorical_crossentropy(
          y, keras_plain(x, training=True)))
    grads = tape.gradient(loss, var_plain)
    for v, g in zip(var_plain, grads):
      v.assign_sub(lr * g)

  def make_ours(force_generic: bool):
    model = models.tff_model_fn(builder, spec)()
    variables = model.trainable_variables

    @tf.function
    def step():
      sums, _, _ = dp_sgd.clipped_gradient_sum(model, x, y, clip,
                                               dp_sgd.sparse_categorical_crossentropy,
                                               force_generic=force_generic)
      for k, (v, g) in enumerate(zip(variables, sums)):
        z = tf.random.stateless_normal(tf.shape(g), seed=[k, 1], stddev=sigma * clip)
        v.assign_sub(lr * (g + z) / float(BATCH))

    return step

  keras_tfp = builder()
  optimizer = tfp.DPKerasSGDOptimizer(l2_norm_clip=clip, noise_multiplier=sigma,
                                      num_microbatches=BATCH, learning_rate=lr)

  @tf.function
  def tfp_microbatch():
    def loss():
      return dp_sgd.sparse_categorical_crossentropy(y, keras_tfp(x, training=True))
    optimizer.minimize(loss, keras_tfp.trainable_variables)

  fns = {"nonprivate": nonprivate, "ours": make_ours(False),
         "ours_generic": make_ours(True), "tfp_microbatch": tfp_microbatch}
  for fn in fns.values():  # trace and warm up
    fn()
    fn()
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, fn in fns.items():  # interleaved, so drifts hit every method alike
      start = time.perf_counter()
      for _ in range(steps):
        fn()
      times[name].append((time.perf_counter() - start) / steps)
  ms = {name: 1000 * float(np.median(t)) for name, t in times.items()}
  return {"ms_per_step": ms,
          "ratio_vs_nonprivate": {n: ms[n] / ms["nonprivate"] for n in ms},
          "ours_vs_tfp_speedup": ms["tfp_microbatch"] / ms["ours"]}


def main(argv) -> int:
  import logging  # pylint: disable=g-import-not-at-top
  logging.getLogger("tensorflow").setLevel(logging.ERROR)
  repeats, steps = 7, 10
  for arg in argv[1:]:
    if arg.startswith("--repeats="):
      repeats = int(arg.split("=", 1)[1])
    elif arg.startswith("--steps="):
      steps = int(arg.split("=", 1)[1])
    else:
      print(f"error: unknown argument {arg!r} (use --repeats=N --steps=N)", file=sys.stderr)
      return 2
  results = {"batch": BATCH, "repeats": repeats, "steps": steps, "models": {}}
  print(f"batch {BATCH}, median of {repeats} interleaved repetitions × {steps} steps\n")
  print("| model | non-private ms | ours ms (×) | ours generic ms (×) | tf-privacy microbatch "
        "ms (×) | ours vs tf-privacy |")
  print("|---|---|---|---|---|---|")
  for name, (builder, shape) in _models().items():
    r = bench_model(builder, shape, repeats, steps)
    results["models"][name] = r
    ms, ratio = r["ms_per_step"], r["ratio_vs_nonprivate"]
    print(f"| {name} | {ms['nonprivate']:.2f} | {ms['ours']:.2f} ({ratio['ours']:.2f}×) | "
          f"{ms['ours_generic']:.2f} ({ratio['ours_generic']:.2f}×) | "
          f"{ms['tfp_microbatch']:.1f} ({ratio['tfp_microbatch']:.1f}×) | "
          f"{r['ours_vs_tfp_speedup']:.1f}× faster |", flush=True)
  os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
  with open(RESULTS, "w") as f:
    json.dump(results, f, indent=1)
  print(f"\nwritten to {RESULTS}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
