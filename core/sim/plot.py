"""Per-instance activity over time, one panel per policy (matplotlib, imported lazily)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from core.sim.report import SimulationReport

_BINS = 400


def activity_grid(
    trace: dict[int, list[tuple[float, int]]], horizon: float, bins: int = _BINS
) -> np.ndarray:
    """instances x bins array of the running batch size at each bin's start."""
    grid = np.zeros((len(trace), bins))
    edges = np.linspace(0.0, horizon, bins, endpoint=False)
    for row, i in enumerate(sorted(trace)):
        pts = trace[i]
        if not pts:
            continue
        ts = np.array([t for t, _ in pts])
        bs = np.array([b for _, b in pts])
        idx = np.searchsorted(ts, edges, side="right") - 1
        grid[row] = np.where(idx >= 0, bs[np.clip(idx, 0, None)], 0)
    return grid


def plot_activity(report: SimulationReport, path: str | Path) -> None:
    """Write a PNG: for each policy, instances (rows) x virtual time, colour = running batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    results = report.results
    horizon = max(r.makespan_s for r in results.values())
    fig, axes = plt.subplots(len(results), 1, figsize=(10, 1.6 + 1.4 * len(results)),
                             sharex=True, squeeze=False)  # fmt: skip
    vmax = report.cost.max_running
    im = None
    for ax, (name, r) in zip(axes[:, 0], results.items(), strict=True):
        grid = activity_grid(r.trace, horizon)
        im = ax.imshow(grid, aspect="auto", extent=(0, horizon, len(grid) - 0.5, -0.5), vmin=0,
                       vmax=vmax, cmap="viridis", interpolation="nearest")  # fmt: skip
        ax.axvline(r.makespan_s, color="red", lw=1)
        ax.set_ylabel("instance")
        ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_title(f"{name}: makespan {r.makespan_s:.0f} s, tail {r.tail_s:.0f} s", fontsize=9)
    axes[-1, 0].set_xlabel("virtual time (s)")
    if im is not None:
        fig.colorbar(im, ax=axes[:, 0].tolist(), label="running requests")
    fig.suptitle(f"{report.params['name']}: per-instance activity", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)
