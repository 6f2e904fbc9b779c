"""The table and plot helpers every family's summary uses.

Tables are GitHub markdown (``summary.md`` and the console print the same
text); plots are PNG files drawn headless (Agg). A family builds its rows and
its figure from these, so every summary reads and looks the same:

* :func:`markdown_table`: header + rows → ``| a | b |`` lines;
* :func:`percent_pm`: "mean ± sd" in percentage points, the accuracy cell;
* :func:`or_dash`: a formatted value, or "—" where there is none;
* :func:`figure`: a figure with ``panels`` axes, saved and closed on exit;
* :func:`plot_histories`: accuracy (or any metric) per round, one line each;
* :func:`grouped_bars`: one bar per (group, series), optional error bars.
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

DASH = "—"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  """A GitHub markdown table: the header, the ``|---|`` rule, one line per row.

  Cells are written with ``str``; every row must have as many cells as the
  header (ValueError otherwise).
  """
  lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
  for i, row in enumerate(rows):
    if len(row) != len(header):
      raise ValueError(f"row {i} has {len(row)} cells; the header has {len(header)}.")
    lines.append("| " + " | ".join(str(cell) for cell in row) + " |")
  return "\n".join(lines)


def percent_pm(mean: float, sd: float, count: Optional[int] = None) -> str:
  """``mean ± sd`` of a fraction in percentage points, two decimals ("81.25 ± 0.40").

  ``count``: how many values the mean is over; under two there is no spread,
  and the sd prints as a dash ("81.25 ± —"), not as "± 0.00" (issue 51).
  """
  if count is not None and count < 2:
    return f"{100 * mean:.2f} ± {DASH}"
  return f"{100 * mean:.2f} ± {100 * sd:.2f}"


def count(n: int, noun: str) -> str:
  """``n`` and the noun, singular for one: "1 seed", "3 seeds", "0 seeds"."""
  return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def or_dash(value: Any, fmt: Callable[[Any], str] = str) -> str:
  """``fmt(value)``, or "—" when ``value`` is None."""
  return DASH if value is None else fmt(value)


@contextlib.contextmanager
def figure(path: str, panels: int = 1, figsize: Optional[tuple[float, float]] = None,
           **subplot_kw) -> Iterator[list]:
  """Yields ``panels`` axes side by side; on exit lays out, saves ``path`` (120 dpi), closes.

  Draws headless (the Agg backend). With matplotlib missing it logs one
  warning and yields axes-like stand-ins that ignore every call, so a run
  without matplotlib still writes its tables.
  """
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  except ImportError:
    logging.warning("matplotlib missing: no %s", path)
    yield [_Ignore() for _ in range(panels)]
    return
  fig, axes = plt.subplots(1, panels, figsize=figsize or (5.5 * panels, 4.2),
                           squeeze=False, **subplot_kw)
  try:
    yield list(axes[0])
    fig.tight_layout()
    fig.savefig(path, dpi=120)
  finally:
    plt.close(fig)


class _Ignore:
  """An axes stand-in for a missing matplotlib: every attribute is a no-op."""

  def __getattr__(self, name):
    return lambda *args, **kwargs: self


def plot_histories(ax, series: Sequence[tuple[str, Sequence[Sequence[float]]]], *,
                   xlabel: str = "round", ylabel: str = "test accuracy",
                   percent: bool = False, styles: Optional[dict] = None,
                   integer_x: bool = False, legend: bool = True) -> None:
  """One line per ``(label, [[x, y], ...])``; empty histories are skipped.

  ``percent`` draws y·100; ``styles`` maps a label to a line style.
  """
  scale = 100.0 if percent else 1.0
  for label, history in series:
    h = np.asarray(history, dtype=float)
    if h.size:
      ax.plot(h[:, 0], scale * h[:, 1], (styles or {}).get(label, "-"), marker=".",
              label=label)
  if integer_x:
    import matplotlib.ticker  # pylint: disable=g-import-not-at-top
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.grid(alpha=0.3)
  if legend:
    ax.legend()


def grouped_bars(ax, groups: Sequence[str],
                 series: Sequence[tuple[str, Sequence[float], Optional[Sequence[float]]]], *,
                 ylabel: str, log: bool = False, rotate: bool = False,
                 legend_size: Optional[float] = None) -> None:
  """Bars of every series side by side within each group: ``(label, values, errors)``."""
  width = 0.8 / max(len(series), 1)
  x = np.arange(len(groups))
  for k, (label, values, errors) in enumerate(series):
    ax.bar(x + k * width, values, width, yerr=errors, capsize=2 if errors is not None else 0,
           label=label)
  ax.set_xticks(x + 0.4 - width / 2)
  ax.set_xticklabels(groups, rotation=30 if rotate else 0)
  if log:
    ax.set_yscale("log")
  ax.set_ylabel(ylabel)
  ax.grid(axis="y", alpha=0.3)
  ax.legend(fontsize=legend_size)
