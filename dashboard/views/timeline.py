"""The job's per-request timeline: each request a row of its chunks over time, coloured by
replica, hatched where the chunk speculated, with the moment the job's tail began.

Invariant: one bar per recorded chunk with a dispatch time, from its dispatch to its return,
in seconds since the job started; rows are the requests, the one that finished last on top;
the tail line is the finish of the request of rank ceil(0.9 n) (``now.tail_rank``), drawn once
that many of the job's requests finished.
"""

from __future__ import annotations

import plotly.graph_objects as go

from app.store.views import ChunkSpan, FinishedRequest, JobView
from dashboard.views.common import HEIGHT, REPLICA_COLORS, figure, note
from dashboard.views.now import tail_rank

#: Pixels per request row (the chart grows with the rows shown, up to the reader's limit).
ROW_PX = 9


def timeline_figure(
    job: JobView, chunks: list[ChunkSpan], requests: list[FinishedRequest], max_requests: int
) -> go.Figure:
    """See the module invariant; ``requests``: the job's terminal requests in finishing order;
    ``max_requests``: the rows the reader was asked for (said in the title when reached)."""
    spans = [c for c in chunks if c.started_at is not None]
    ended: dict[str, float] = {}
    for c in spans:
        ended[c.request_id] = max(ended.get(c.request_id, c.finished_at), c.finished_at)
    rows = sorted(ended, key=lambda rid: (ended[rid], rid))
    shown = len(rows)
    title = "Requests over time: chunks by replica (hatched: speculated)"
    if shown >= max_requests:
        title += f" · the {shown} requests that ended last"
    fig = figure(title, height=max(HEIGHT, 120 + ROW_PX * shown))
    if not spans:
        return note(fig, "no chunk with a dispatch time recorded for this job yet")
    t0 = job.started_at
    replicas = sorted({c.replica_id for c in spans})
    for i, rep in enumerate(replicas):
        for drafted in (False, True):
            mine = [c for c in spans if c.replica_id == rep and (c.drafted > 0) is drafted]
            if not mine:
                continue
            fig.add_trace(
                go.Bar(
                    orientation="h",
                    y=[c.request_id for c in mine],
                    base=[(c.started_at or t0) - t0 for c in mine],
                    x=[c.finished_at - (c.started_at or t0) for c in mine],
                    name=f"{rep}{' · speculated' if drafted else ''}",
                    legendgroup=rep,
                    marker={
                        "color": REPLICA_COLORS[i % len(REPLICA_COLORS)],
                        "pattern": {"shape": "/" if drafted else ""},
                    },
                    customdata=[[c.new_tokens, c.drafted, c.finish_reason] for c in mine],
                    hovertemplate="%{y}<br>%{base:.2f} s + %{x:.2f} s<br>%{customdata[0]} "
                    "tokens, %{customdata[1]} drafted, %{customdata[2]}<extra>" + rep + "</extra>",
                )
            )
    k = tail_rank(job.requests)
    if len(requests) >= k:
        fig.add_vline(
            x=requests[k - 1].finished_at - t0,
            line_dash="dot",
            annotation_text="tail began (last 10%)",
        )
    fig.update_layout(
        barmode="overlay",
        xaxis_title="seconds since the job started",
        yaxis={
            "categoryorder": "array",
            "categoryarray": rows,
            "showticklabels": shown <= 64,
            "title": "request",
        },
    )
    return fig
