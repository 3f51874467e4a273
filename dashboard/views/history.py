"""The History page: rollout time, tail share and throughput per job (iteration), and how well
the length prior (a prompt's lengths in earlier iterations) predicted each group."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import plotly.graph_objects as go

from app.store.views import GroupView, JobTiming, JobView, PromptLengths
from dashboard.views.common import figure, geomean, note, num, when


@dataclass(frozen=True, slots=True)
class JobSummary:
    job: JobView
    rollout_s: float | None  # start to last finished request (to the job's end if later)
    tail_s: float | None
    output_tokens: int
    requests: int  # finished (stop or length)

    @property
    def label(self) -> str:
        it = self.job.iteration
        return f"it {it} · {self.job.job_id[:6]}" if it is not None else self.job.job_id[:12]

    @property
    def tail_share(self) -> float | None:
        if self.tail_s is None or not self.rollout_s:
            return None
        return self.tail_s / self.rollout_s

    @property
    def tokens_per_s(self) -> float | None:
        return self.output_tokens / self.rollout_s if self.rollout_s else None


def summaries(jobs: list[JobView], timings: dict[str, JobTiming]) -> list[JobSummary]:
    """One summary per job, oldest first (jobs come newest first from the store)."""
    out = []
    for j in reversed(jobs):
        t = timings.get(j.job_id)
        if t is None:
            out.append(JobSummary(j, None, None, 0, 0))
            continue
        end = t.last_finish if j.finished_at is None else max(t.last_finish, j.finished_at)
        out.append(JobSummary(j, end - j.started_at, t.tail_s, t.output_tokens, t.n))
    return out


def table(rows: list[JobSummary]) -> list[dict[str, object]]:
    return [
        {
            "started": when(s.job.started_at).strftime("%Y-%m-%d %H:%M:%S"),
            "job": s.job.job_id,
            "iteration": s.job.iteration,
            "policy": s.job.policy,
            "state": s.job.state,
            "requests": s.requests,
            "output tokens": s.output_tokens,
            "rollout s": num(s.rollout_s, 1),
            "tail s": num(s.tail_s, 2 if s.tail_s is not None and s.tail_s < 10 else 1),
            "tail share": num(s.tail_share, 2),
            "tokens/s": num(s.tokens_per_s, 0),
        }
        for s in reversed(rows)
    ]


def time_figure(rows: list[JobSummary]) -> go.Figure:
    """Rollout time per job split into the body and the tail (last 10% of requests)."""
    fig = figure("Rollout time per job (tail = last 10% of requests)")
    done = [s for s in rows if s.rollout_s is not None and s.tail_s is not None]
    if not done:
        return note(fig, "no job has a finished request yet")
    x = [s.label for s in done]
    fig.add_trace(go.Bar(x=x, y=[(s.rollout_s or 0) - (s.tail_s or 0) for s in done], name="body"))
    fig.add_trace(go.Bar(x=x, y=[s.tail_s for s in done], name="tail"))
    fig.update_layout(barmode="stack", yaxis_title="seconds")
    return fig


def throughput_figure(rows: list[JobSummary]) -> go.Figure:
    fig = figure("Throughput per job")
    done = [s for s in rows if s.tokens_per_s is not None]
    if not done:
        return note(fig, "no job has a finished request yet")
    fig.add_trace(
        go.Scatter(
            x=[s.label for s in done],
            y=[s.tokens_per_s for s in done],
            mode="lines+markers",
            name="output tokens/s",
            text=[f"tail share {num(s.tail_share)}" for s in done],
        )
    )
    fig.update_layout(yaxis_title="output tokens / s")
    return fig


@dataclass(frozen=True, slots=True)
class PriorPoint:
    """A finished group whose prompt had recorded lengths before its job started."""

    job_id: str
    group_id: str
    prior: float  # geometric mean of the prompt's last ``limit`` lengths before the job
    actual: float  # geometric mean of the group's lengths
    samples: int  # prior lengths used

    @property
    def log_error(self) -> float:
        return math.log(self.prior / self.actual)


def prior_points(
    jobs: list[JobView], groups: list[GroupView], prompts: list[PromptLengths], limit: int
) -> list[PriorPoint]:
    """What the ``context-prior`` policy's prior (the prompt's ``limit`` most recent lengths
    recorded before the job started, as ``StoreReader.recent_lengths``) said about each
    finished group, against the group's actual lengths."""
    started = {j.job_id: j.started_at for j in jobs}
    hist = {p.prompt_key: p.samples for p in prompts}
    out = []
    for g in groups:
        samples = hist.get(g.prompt_key)
        if not g.final_lengths or not samples or g.job_id not in started:
            continue
        k = bisect.bisect_left(samples, (started[g.job_id], -1))
        before = [length for _, length in samples[max(0, k - limit) : k]]
        if before:
            out.append(
                PriorPoint(
                    g.job_id, g.group_id, geomean(before), geomean(g.final_lengths), len(before)
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class PriorAccuracy:
    job: JobSummary
    groups: int  # finished groups whose prompt had a prior
    median_error: float | None  # exp(median |log(prior / actual)|) - 1
    within_25: float | None  # share of those groups with the prior within 25% of actual


def accuracy(rows: list[JobSummary], points: list[PriorPoint]) -> list[PriorAccuracy]:
    by_job: dict[str, list[float]] = {}
    for p in points:
        by_job.setdefault(p.job_id, []).append(abs(p.log_error))
    out = []
    for s in rows:
        errs = sorted(by_job.get(s.job.job_id, []))
        if not errs:
            out.append(PriorAccuracy(s, 0, None, None))
            continue
        within = sum(1 for e in errs if e <= math.log(1.25)) / len(errs)
        out.append(PriorAccuracy(s, len(errs), math.exp(errs[len(errs) // 2]) - 1, within))
    return out


def accuracy_table(acc: list[PriorAccuracy]) -> list[dict[str, object]]:
    return [
        {
            "job": a.job.label,
            "groups with a prior": a.groups,
            "median error": "-" if a.median_error is None else f"{100 * a.median_error:.0f}%",
            "within 25%": "-" if a.within_25 is None else f"{100 * a.within_25:.0f}%",
        }
        for a in reversed(acc)
    ]


def prior_figure(points: list[PriorPoint]) -> go.Figure:
    fig = figure("Length prior vs actual (geometric means per group)")
    if not points:
        return note(fig, "no group had a prior yet (prompts recur from the second iteration on)")
    jobs = list(dict.fromkeys(p.job_id for p in points))
    for job in jobs:
        pts = [p for p in points if p.job_id == job]
        fig.add_trace(
            go.Scatter(
                x=[p.actual for p in pts],
                y=[p.prior for p in pts],
                mode="markers",
                name=job[:12],
                marker={"size": 5, "opacity": 0.6},
                text=[p.group_id for p in pts],
            )
        )
    hi = max(max(p.actual, p.prior) for p in points)
    fig.add_trace(
        go.Scatter(x=[1, hi], y=[1, hi], mode="lines", name="exact", line={"dash": "dot"})
    )
    fig.update_layout(
        xaxis={"title": "actual (tokens)", "type": "log"},
        yaxis={"title": "prior (tokens)", "type": "log"},
    )
    return fig
