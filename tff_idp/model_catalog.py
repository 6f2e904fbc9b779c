"""The names of the models and output heads :mod:`tff_idp.models` builds, without TensorFlow.

Command lines list them as flag choices and check them before TensorFlow is
imported (:func:`tff_idp.cli.launch`).
"""

MODELS = ("auto", "logreg", "mlp", "cnn")
"""``auto``: logistic regression for feature vectors, the paper's CNN for images."""

HEADS = ("softmax", "sigmoid")
"""softmax: K logits; sigmoid: one logit for binary labels 0/1."""
