"""Owner-level plans (INO-SGD). No TensorFlow."""
