"""Training metrics fit for a release: only what the DP analysis covers (issue 48 C).

``tff.learning.programs.train_model(train_metrics_manager=...)`` releases
every round's whole metrics structure, with the client work's ``train``
metrics moved to ``model_metrics``. Under the toolkit's processes most of
it is computed from the clients' data without noise and is **not** covered
by the DP guarantee:

* IDP-FedAvg / SCALE: ``model_metrics`` (the cohort's exact training
  ``loss``, accuracy, ``num_examples``, ``num_batches``) and
  ``aggregator/diagnostics`` (``num_clients``, the exact cohort size, with
  ``nonfinite_updates`` and ``invalid_clip_scales``);
* rPDP-FL (and INO-SGD inside it): ``model_metrics`` (``loss``,
  ``sampled_records``, ``clipped_fraction``, ``mean_expected_batch``,
  ``participating_clients``), all exact counts and means over the sampled
  records and clients.

What the analysis covers, and :data:`COVERED_METRICS` keeps: the DP mean's
noised aggregates (IDP-FedAvg's adaptive ``clip``, ``noise_std``,
``mean_noise_std`` and the noised ``unclipped_fraction``), the APES
analyzer's measurements (functions of the shuffled randomized reports, the
analyzer's own view; their count ``reports``/``normalizer`` is the number
of users, all of whom report every round), and the finalizer's
``update_non_finite`` (a function of the noised update).

:class:`ReleaseMetricsManager` wraps any ``tff.program.ReleaseManager``
and passes on only those: an allow-list, so a metric this module does not
know (another process's, a new field) is dropped, not released. Give
``covered=`` to allow others your own analysis covers.
"""
from __future__ import annotations

import collections
from typing import Any, Iterable, Mapping, Optional

import tensorflow_federated as tff

from tff_idp.errors import ToolkitValueError

# "/"-joined paths in the structure train_model releases (client_work/train is at
# model_metrics there), each with why the DP analysis covers it.
COVERED_METRICS: Mapping[str, str] = collections.OrderedDict([
    ("aggregator/clip", "IDP-FedAvg's adaptive clip, updated from the noised count"),
    ("aggregator/noise_std", "σ times the (noised) clip"),
    ("aggregator/mean_noise_std", "the noise std over the expected cohort (public)"),
    ("aggregator/unclipped_fraction", "the noised unclipped count over the expected cohort"),
    ("aggregator/reports", "APES: reports the shuffler hands the analyzer (every user)"),
    ("aggregator/normalizer", "APES: the analyzer's n (every user reports)"),
    ("aggregator/clamped_fraction", "APES: a function of the randomized reports"),
    ("finalizer/update_non_finite", "a function of the noised aggregate update"),
])

# The un-noised training metrics of the toolkit's processes (docs/api.md).
UNNOISED_METRICS = (
    "model_metrics/loss", "model_metrics/sparse_categorical_accuracy",
    "model_metrics/num_examples", "model_metrics/num_batches",
    "model_metrics/sampled_records", "model_metrics/clipped_fraction",
    "model_metrics/mean_expected_batch", "model_metrics/participating_clients",
    "aggregator/diagnostics/num_clients", "aggregator/diagnostics/nonfinite_updates",
    "aggregator/diagnostics/invalid_clip_scales")


def keep_covered(value: Any, covered: Iterable[str], prefix: str = "") -> Optional[Any]:
  """The part of a metrics structure at the ``covered`` paths; None when nothing is left.

  Mappings are filtered key by key (their type kept where it takes a list of
  pairs); a leaf, or a structure that is not a mapping (a value reference,
  a tuple), is kept whole only when its own path is covered.
  """
  covered = frozenset(covered)
  if prefix and prefix in covered:
    return value
  if not isinstance(value, Mapping):
    return None
  kept = []
  for key, item in value.items():
    path = f"{prefix}/{key}" if prefix else str(key)
    part = keep_covered(item, covered, path)
    if part is not None:
      kept.append((key, part))
  if not kept:
    return None
  try:
    return type(value)(kept)
  except TypeError:
    return collections.OrderedDict(kept)


class ReleaseMetricsManager(tff.program.ReleaseManager):
  """Releases only the training metrics the DP analysis covers (module doc).

  Use it as ``train_model``'s ``train_metrics_manager``:
  ``ReleaseMetricsManager(tff.program.LoggingReleaseManager())``. A round
  whose metrics hold nothing covered is not released at all.

  Args:
    release_manager: the ``tff.program.ReleaseManager`` that gets the kept
      metrics (logging, CSV, TensorBoard, ...).
    covered: the "/"-joined metric paths to keep (default
      :data:`COVERED_METRICS`); list only what your DP analysis covers.
  """

  def __init__(self, release_manager: tff.program.ReleaseManager,
               covered: Optional[Iterable[str]] = None):
    if not isinstance(release_manager, tff.program.ReleaseManager):
      raise ToolkitValueError(
          f"release_manager={release_manager!r} is not a tff.program.ReleaseManager: wrap "
          "one, e.g. ReleaseMetricsManager(tff.program.LoggingReleaseManager()).")
    paths = list(COVERED_METRICS if covered is None else covered)
    if any(not isinstance(p, str) or not p for p in paths):
      raise ToolkitValueError(f"covered={paths!r}: give metric paths as '/'-joined strings, "
                              "e.g. 'aggregator/clip'.")
    self._release_manager = release_manager
    self._covered = frozenset(paths)

  @property
  def covered(self) -> frozenset:
    """The metric paths this manager passes on."""
    return self._covered

  async def release(self, value: Any, key: Any) -> None:
    """Passes the covered part of ``value`` on under ``key``; drops everything else."""
    kept = keep_covered(value, self._covered)
    if kept is not None:
      await self._release_manager.release(kept, key)
