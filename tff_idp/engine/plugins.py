"""The hooks a plug-in attaches to a run through (the empirical audit is one).

A family's run template calls these at fixed points of every run; the base
class does nothing, so a run without plug-ins executes no plug-in code. The
engine hooks a plug-in may use on the :class:`~tff_idp.engine.driver.RoundDriver`
are its ``sampler`` (a sampler decorator), ``client_input_fn`` and
``padding_input_fn`` (client-data wrappers); the client work is wrapped at
build time through :meth:`RunPlugin.client_work_wrapper`. The engine and the
families never import a plug-in's package (a contract test checks it).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence


class RunPlugin:
  """Base class of run plug-ins; every hook is a no-op by default."""

  def check(self, plan: Any) -> None:
    """Before any training, per run specification: raise ValueError with advice."""

  def mechanism(self, plan: Any, noise_multiplier: Optional[float], client_rates: Any
                ) -> tuple[Optional[float], Any, dict]:
    """The noise multiplier and client rates the mechanism uses, and summary entries.

    Only validity controls change them (a deliberately broken mechanism whose
    ledger keeps the calibrated values).
    """
    del plan
    return noise_multiplier, client_rates, {}

  def client_work_wrapper(self, plan: Any) -> Optional[Callable[[Any], Any]]:
    """A wrapper of the run's client work, or None."""
    del plan
    return None

  def fingerprint(self) -> dict:
    """Entries added to the resume fingerprint's calibration part."""
    return {}

  def attach(self, driver: Any, plan: Any, run_name: str, seed: int) -> None:
    """Decorates one run's driver (sampler, client inputs) before it runs."""

  def after_run(self, process: Any, final_state: Any, run_dir: str, plan: Any) -> None:
    """Reads one finished run."""

  def row(self) -> dict:
    """Entries for the run specification's summary row (after its seeds); resets."""
    return {}

  def table_lines(self, config: Any, results: Sequence[dict]) -> list[str]:
    """Lines appended to the run's Markdown table."""
    del config, results
    return []

  def header_lines(self, results: Sequence[dict]) -> list[str]:
    """Lines put before the run's Markdown table (labels such as a broken control)."""
    del results
    return []

  def plot(self, results: Sequence[dict], output_dir: str) -> None:
    """Writes the plug-in's figures next to summary.json."""
