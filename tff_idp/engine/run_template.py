"""One run template: every run specification × every seed → one summary row.

A family describes one run (:class:`FamilyRuns`): what to set up per run
specification, how to run one seed (through the engine's
:class:`~tff_idp.engine.driver.RoundDriver`, so checkpoints, the ledger and
metrics work the same everywhere), and its own entries of the summary row.
:func:`run_grid` runs them and adds the entries every family shares:
``final_accuracies`` (in seed order), ``mean_accuracy`` and ``std_accuracy``
(the sample sd, ddof = 1, :func:`tff_idp.engine.summary.sample_sd`), the
schema of docs/api.md.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Protocol, Sequence

import numpy as np

from tff_idp.engine.summary import sample_sd
from tff_idp.execution import runtime


@dataclasses.dataclass
class SeedResult:
  """One finished run: its final accuracy and the accuracy at every evaluation."""
  final_accuracy: float
  history: list  # [[round or step, accuracy], ...] at the evaluation points
  extras: dict = dataclasses.field(default_factory=dict)


class FamilyRuns(Protocol):
  """What a family supplies to :func:`run_grid`."""

  def begin_spec(self, spec: Any) -> None:
    """Set-up shared by a specification's seeds (calibration, the process)."""

  def run_seed(self, spec: Any, seed: int) -> SeedResult:
    """Runs (or resumes) one seed of ``spec``."""

  def end_spec(self, spec: Any, results: Sequence[SeedResult]) -> dict:
    """The family's entries of ``spec``'s summary row (its ``label`` among them)."""


def run_grid(specs: Sequence[Any], seeds: Sequence[int], family: FamilyRuns) -> list[dict]:
  """Runs every specification over every seed; one summary row per specification."""
  rows = []
  for spec in specs:
    family.begin_spec(spec)
    results = [family.run_seed(spec, int(seed)) for seed in seeds]
    finals = [r.final_accuracy for r in results]
    row = family.end_spec(spec, results)
    runtime.release_compiled_computations()  # a long grid's driving process stays flat
    row.update(final_accuracies=finals, mean_accuracy=float(np.mean(finals)),
               std_accuracy=sample_sd(finals))
    rows.append(row)
  return rows
