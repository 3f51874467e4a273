"""The Now page: the current job's progress, requests finished over time with the tail, groups'
estimated vs actual length, replica load."""

from __future__ import annotations

import math
from dataclasses import dataclass

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.api import ServiceHealth
from app.store.views import FinishedRequest, GroupView, JobView, ReplicaLoad
from core.stats import tail_time
from dashboard.views.common import HEIGHT, REPLICA_COLORS, figure, note, when


@dataclass(frozen=True, slots=True)
class Progress:
    finished: int  # requests terminal so far
    total: int  # requests of the job
    elapsed_s: float
    output_tokens: int
    tokens_per_s: float
    tail_s: float | None  # time on the last 10% of requests, once they are all done

    @property
    def fraction(self) -> float:
        return min(1.0, self.finished / self.total) if self.total else 0.0


def tail_rank(total: int) -> int:
    """1-based rank of the request that starts the tail (the last 10% of ``total``)."""
    return max(1, math.ceil(0.9 * total))


def progress(job: JobView, requests: list[FinishedRequest], now: float) -> Progress:
    end = job.finished_at if job.finished_at is not None else now
    elapsed = max(0.0, end - job.started_at)
    tokens = sum(r.length for r in requests if r.finish_reason != "cancelled")
    tail = None
    if requests and len(requests) >= job.requests > 0:
        times = [r.finished_at for r in requests]  # in finishing order
        tail = tail_time(times)  # the simulator's and the service's own definition
    return Progress(
        finished=len(requests),
        total=job.requests,
        elapsed_s=elapsed,
        output_tokens=tokens,
        tokens_per_s=tokens / elapsed if elapsed > 0 else 0.0,
        tail_s=tail,
    )


def finished_figure(job: JobView, requests: list[FinishedRequest], now: float) -> go.Figure:
    """Requests finished since the job started (cumulative) and each one's length; the tail
    (last 10% of the job's requests) shaded once it has begun."""
    fig = figure("Requests finished over time")
    if not requests:
        return note(fig, "no request finished yet")
    t0 = job.started_at
    xs = [r.finished_at - t0 for r in requests]
    fig.add_trace(
        go.Scatter(
            x=xs, y=list(range(1, len(xs) + 1)), mode="lines", name="finished", line_shape="hv"
        )
    )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[r.length for r in requests],
            mode="markers",
            name="length (tokens)",
            yaxis="y2",
            marker={"size": 4, "opacity": 0.5},
            text=[r.request_id for r in requests],
        )
    )
    k = tail_rank(job.requests)
    fig.add_hline(y=k, line_dash="dot", annotation_text="tail: last 10%")
    if len(xs) >= k:
        end = xs[-1] if job.finished_at is not None else max(xs[-1], now - t0)
        fig.add_vrect(x0=xs[k - 1], x1=end, fillcolor="orange", opacity=0.2, line_width=0)
    fig.update_layout(
        xaxis_title="seconds since the job started",
        yaxis={"title": "requests finished", "range": [0, max(job.requests, len(xs)) * 1.05]},
        yaxis2={"title": "length", "overlaying": "y", "side": "right", "showgrid": False},
    )
    return fig


def group_figure(groups: list[GroupView], requests: list[FinishedRequest]) -> go.Figure:
    """Each group's estimated length (made when its first request finished: what scheduling
    went on) against its actual length (its longest response; so far, for running groups)."""
    fig = figure("Groups: estimated vs actual length")
    longest: dict[str, int] = {}
    for r in requests:
        if r.finish_reason != "cancelled":
            longest[r.group_id] = max(longest.get(r.group_id, 0), r.length)
    done = [g for g in groups if g.final_lengths and g.first_max_estimate is not None]
    running = [g for g in groups if not g.final_lengths and g.group_id in longest]
    if not done and not running:
        return note(fig, "no group has a finished request yet")
    for name, attr, symbol in (
        ("max finished (paper)", "first_max_estimate", "circle"),
        ("geometric mean (context)", "first_mean_estimate", "diamond"),
    ):
        fig.add_trace(
            go.Scatter(
                x=[max(g.final_lengths or (0,)) for g in done],
                y=[getattr(g, attr) for g in done],
                mode="markers",
                name=f"done: {name}",
                marker={"symbol": symbol, "size": 6, "opacity": 0.7},
                text=[g.group_id for g in done],
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[longest[g.group_id] for g in running],
            y=[g.mean_estimate for g in running],
            mode="markers",
            name="running: now (longest so far)",
            marker={"symbol": "circle-open", "size": 7},
            text=[g.group_id for g in running],
        )
    )
    top = max([g.max_tokens for g in groups] or [1])
    fig.add_trace(
        go.Scatter(x=[0, top], y=[0, top], mode="lines", name="exact", line={"dash": "dot"})
    )
    fig.update_layout(xaxis_title="actual longest response (tokens)", yaxis_title="estimate")
    return fig


def estimate_error(groups: list[GroupView]) -> float | None:
    """Median |log(first estimate / actual longest)| over finished groups, as a factor - 1
    (0.25 = typically 25% off); None when no group finished with an estimate."""
    errs = sorted(
        abs(math.log(max(g.first_mean_estimate, 1) / max(max(g.final_lengths), 1)))
        for g in groups
        if g.final_lengths and g.first_mean_estimate is not None
    )
    if not errs:
        return None
    return math.exp(errs[len(errs) // 2]) - 1


def load_window(job: JobView, now: float, window_s: float) -> tuple[float, float]:
    """The load shown with ``job``: its own run (the last ``window_s`` of it), until now while
    it runs. Samples after its end would show the idle service instead (a flat 0 line)."""
    until = job.finished_at if job.finished_at is not None else now
    return max(job.started_at, until - window_s), until


def load_figure(samples: list[ReplicaLoad]) -> go.Figure:
    """Running and waiting sequences and KV use of each replica over time."""
    if not samples:
        return note(figure("Replica load"), "no load sample recorded during this job")
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=("running", "waiting", "KV use (%)"),
    )
    by_replica: dict[str, list[ReplicaLoad]] = {}
    for s in samples:
        by_replica.setdefault(s.replica_id, []).append(s)
    for i, (rid, rows) in enumerate(sorted(by_replica.items())):
        x = [when(s.at) for s in rows]
        for row, ys in enumerate(
            (
                [s.running for s in rows],
                [s.waiting for s in rows],
                [100 * s.kv_usage for s in rows],
            ),
            start=1,
        ):
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=ys,
                    mode="lines",
                    name=rid,
                    legendgroup=rid,
                    showlegend=row == 1,
                    line={"color": REPLICA_COLORS[i % len(REPLICA_COLORS)]},
                ),
                row=row,
                col=1,
            )
    fig.update_layout(
        title="Replica load", height=int(HEIGHT * 1.6), margin={"l": 50, "r": 20, "t": 60, "b": 30}
    )
    return fig


def replica_rows(health: ServiceHealth) -> list[dict[str, object]]:
    """One table row per replica from the service's ``/healthz``."""
    out: list[dict[str, object]] = []
    for r in health.replicas:
        load = r.load
        out.append(
            {
                "replica": r.replica_id,
                "state": r.state.value,
                "running": load.running if load else None,
                "waiting": load.waiting if load else None,
                "chunks in flight": load.chunks_in_flight if load else None,
                "KV use %": round(100 * load.kv_usage, 1) if load else None,
                "error": r.error or "",
            }
        )
    return out
