"""The Speculation page: acceptance length over time and per group, the draft length chosen,
and when speculation was on (the adaptive policy's decisions and the operators' changes).

What the store has: per (group, replica, time bucket) the drafted, accepted tokens and verify
steps of the chunks that drafted (``acceptance_samples``), and every chunk's tokens
(``chunks``). A chunk that did not draft took one step per token, so per bucket
``all steps = tokens - accepted``; the share of steps in drafting chunks and the mean draft
tokens per step over all steps show the on/off decisions (0 = speculation off).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.store.views import ConfigVersion, DraftTotals, TokenBucket
from dashboard.views.common import HEIGHT, figure, note, when


@dataclass(frozen=True, slots=True)
class SpecBucket:
    bucket: float  # start, Unix seconds
    acceptance_length: float  # tokens per verify step in drafting chunks (nan: none drafted)
    acceptance_rate: float  # accepted / drafted (nan: none drafted)
    draft_per_step: float  # drafted tokens per decode step, over every chunk (0: off)
    drafting_share: float  # share of decode steps in chunks that drafted, [0, 1]
    tokens: int


def timeline(drafts: list[DraftTotals], tokens: list[TokenBucket]) -> list[SpecBucket]:
    """Join the draft totals and the token totals of the same buckets (see module doc)."""
    by_bucket = {float(d.key): d for d in drafts}
    out = []
    for t in tokens:
        d = by_bucket.get(t.bucket, DraftTotals(t.bucket, 0, 0, 0))
        steps = max(t.tokens - d.accepted, d.steps, 1)
        out.append(
            SpecBucket(
                bucket=t.bucket,
                acceptance_length=d.acceptance_length,
                acceptance_rate=d.acceptance_rate,
                draft_per_step=d.drafted / steps,
                drafting_share=min(1.0, d.steps / steps),
                tokens=t.tokens,
            )
        )
    return out


def overall(drafts: list[DraftTotals]) -> DraftTotals:
    return DraftTotals(
        "all",
        sum(d.drafted for d in drafts),
        sum(d.accepted for d in drafts),
        sum(d.steps for d in drafts),
    )


def timeline_figure(buckets: list[SpecBucket], changes: list[ConfigVersion]) -> go.Figure:
    """Acceptance length, draft length per step and the drafting share over time; a dotted
    line at every operator change in the window."""
    if not buckets:
        return note(figure("Speculation over time"), "no chunk recorded for this job yet")
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.07,
        subplot_titles=(
            "acceptance length (tokens per verify step, bonus included)",
            "draft tokens per decode step (0: off)",
            "share of decode steps in drafting chunks",
        ),
    )
    x = [when(b.bucket) for b in buckets]
    rows = (
        ([_nan_none(b.acceptance_length) for b in buckets], "acceptance length"),
        ([b.draft_per_step for b in buckets], "draft length"),
        ([b.drafting_share for b in buckets], "drafting share"),
    )
    for row, (ys, name) in enumerate(rows, start=1):
        fig.add_trace(
            go.Scatter(x=x, y=ys, mode="lines+markers", name=name, connectgaps=False),
            row=row,
            col=1,
        )
    lo, hi = buckets[0].bucket, buckets[-1].bucket
    width = buckets[1].bucket - lo if len(buckets) > 1 else 60.0
    for c in changes:
        if lo <= c.at <= hi + width:
            fig.add_vline(x=when(c.at), line_dash="dot", line_color="gray")
    fig.update_yaxes(range=[0, 1.05], row=3, col=1)
    fig.update_layout(
        title="Speculation over time",
        height=int(HEIGHT * 1.8),
        showlegend=False,
        margin={"l": 50, "r": 20, "t": 70, "b": 30},
    )
    return fig


def group_figure(groups: list[DraftTotals], top: int = 64) -> go.Figure:
    """Acceptance length of each group that drafted, best first (at most ``top`` bars)."""
    fig = figure("Acceptance length per group")
    if not groups:
        return note(fig, "no group of this job drafted")
    ranked = sorted(groups, key=lambda d: d.acceptance_length, reverse=True)[:top]
    fig.add_trace(
        go.Bar(
            x=[str(d.key) for d in ranked],
            y=[d.acceptance_length for d in ranked],
            customdata=[[d.drafted, d.accepted, d.steps] for d in ranked],
            hovertemplate="%{x}<br>acceptance length %{y:.2f}<br>drafted %{customdata[0]}"
            " accepted %{customdata[1]} steps %{customdata[2]}<extra></extra>",
        )
    )
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="no speculation")
    fig.update_layout(xaxis={"title": "group", "showticklabels": len(ranked) <= 24})
    fig.update_layout(yaxis_title="tokens per verify step")
    return fig


def _nan_none(x: float) -> float | None:
    return None if math.isnan(x) else x
