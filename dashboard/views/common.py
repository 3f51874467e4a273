"""Helpers shared by the views: times for plotly, empty figures, small number formatting."""

from __future__ import annotations

import math
from datetime import datetime

import plotly.graph_objects as go

#: One height for every chart, so pages line up.
HEIGHT = 340
#: Replica i's colour in every chart (replicas sorted by id).
REPLICA_COLORS = [
    "#636efa",
    "#ef553b",
    "#00cc96",
    "#ab63fa",
    "#ffa15a",
    "#19d3f3",
    "#ff6692",
    "#b6e880",
]


def when(t: float) -> datetime:
    """Unix seconds -> local datetime (plotly draws a time axis from these)."""
    return datetime.fromtimestamp(t)


def figure(title: str, height: int = HEIGHT) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        title=title,
        height=height,
        margin={"l": 50, "r": 20, "t": 50, "b": 40},
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


def note(fig: go.Figure, text: str) -> go.Figure:
    """Write ``text`` in the middle of an empty chart."""
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


def num(x: float | None, digits: int = 2) -> str:
    """``x`` for a table cell ("-" when unknown)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def seconds(x: float | None) -> str:
    """A duration for a metric or cell: 2 decimals below 10 s (a tail of a few ms is shown
    as 0.01 s, not as 0.0 s next to a visible spread), 1 above; "-" when unknown."""
    if x is None or math.isnan(x):
        return "-"
    return f"{x:,.2f} s" if abs(x) < 10 else f"{x:,.1f} s"


def geomean(xs: list[int] | tuple[int, ...]) -> float:
    return math.exp(sum(math.log(max(x, 1)) for x in xs) / len(xs))
