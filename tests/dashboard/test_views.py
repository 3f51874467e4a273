"""Page logic without Streamlit: progress and tail, speculation timeline, prior accuracy,
settings edits."""

from __future__ import annotations

import math

import pytest

from app.store.views import (
    DraftTotals,
    FinishedRequest,
    GroupView,
    JobView,
    PromptLengths,
    TokenBucket,
)
from core.stats import tail_time
from dashboard.views import history, now, speculation, tuning


def _job(requests: int, finished_at: float | None = None) -> JobView:
    return JobView(
        "j", 1, "seer", "running", 1, requests, 0, 100, 0.0, 10.0, finished_at, None, None
    )


def _req(t: float, n: int = 5) -> FinishedRequest:
    return FinishedRequest(f"r{t}", "g", n, False, "stop", 10.0, t)


def test_progress_and_tail_once_every_request_is_done() -> None:
    times = [11.0, 12.0, 13.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 40.0]
    reqs = [_req(t) for t in times]
    p = now.progress(_job(10, 40.0), reqs, now=99.0)
    assert (p.finished, p.total, p.elapsed_s, p.output_tokens) == (10, 10, 30.0, 50)
    assert p.tail_s == tail_time(times) == 15.0 and p.fraction == 1.0
    running = now.progress(_job(12), reqs, now=50.0)
    assert running.tail_s is None and running.elapsed_s == 40.0
    assert running.fraction == pytest.approx(10 / 12)


def test_speculation_timeline_counts_off_chunks() -> None:
    drafts = [DraftTotals(0.0, drafted=40, accepted=10, steps=20)]
    tokens = [TokenBucket(0.0, tokens=130, chunks=4), TokenBucket(10.0, tokens=50, chunks=2)]
    a, b = speculation.timeline(drafts, tokens)
    # drafting chunks: 20 steps gave 30 tokens; the other 100 tokens took 100 steps
    assert a.acceptance_length == 1.5 and a.draft_per_step == 40 / 120
    assert a.drafting_share == pytest.approx(20 / 120)
    assert (b.draft_per_step, b.drafting_share) == (0.0, 0.0) and math.isnan(b.acceptance_length)


def test_prior_points_use_only_lengths_recorded_before_the_job() -> None:
    jobs = [_job(2)]
    g = GroupView("j", "g", "p", 2, 100, 0.0, None, (20, 80), None, None, None, None, 0)
    hist = PromptLengths("p", ((1.0, 10), (2.0, 1000), (3.0, 40), (11.0, 9999)))
    [pt] = history.prior_points(jobs, [g], [hist], limit=2)
    assert pt.prior == pytest.approx(math.sqrt(1000 * 40)) and pt.samples == 2
    assert pt.actual == pytest.approx(40.0)


def test_only_changed_settings_are_sent() -> None:
    cur = {"enabled": True, "max_draft": 8, "min_token_prob": 0.1, "probe_priority": 2.0}
    edit = {"enabled": True, "max_draft": 8, "min_token_prob": 0.1, "probe_priority": 3.0}
    assert tuning.changed(cur, edit) == {"probe_priority": 3.0}
    assert tuning.changed(cur, dict(cur)) == {}


def test_timeline_draws_each_chunk_by_replica_hatched_where_it_speculated() -> None:
    from app.store.views import ChunkSpan
    from dashboard.views import timeline

    job = _job(10, 40.0)  # started at 10.0
    chunks = [
        ChunkSpan("r1", "g", "replica-0", 10.0, 12.0, 8, 0, "chunk"),
        ChunkSpan("r1", "g", "replica-1", 12.5, 15.0, 8, 6, "stop"),
        ChunkSpan("r2", "g", "replica-0", 10.0, 30.0, 8, 0, "stop"),
        ChunkSpan("r0", "g", "replica-0", None, 11.0, 8, 0, "stop"),  # before migration 0003
    ]
    times = [11.0, 12.0, 13.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 30.0]
    fig = timeline.timeline_figure(job, chunks, [_req(t) for t in times], max_requests=200)
    bars = {t.name: t for t in fig.data}
    assert set(bars) == {"replica-0", "replica-1 · speculated"}
    r0 = bars["replica-0"]
    assert list(r0.y) == ["r1", "r2"] and list(r0.base) == [0.0, 0.0] and list(r0.x) == [2, 20]
    spec = bars["replica-1 · speculated"]
    assert spec.marker.pattern.shape == "/" and list(spec.base) == [2.5]
    assert list(fig.layout.yaxis.categoryarray) == ["r1", "r2"]  # the last to end on top
    (line,) = fig.layout.shapes
    assert line.x0 == times[8] - job.started_at == 15.0  # rank ceil(0.9 n) finished: tail
    empty = timeline.timeline_figure(job, [], [], max_requests=200)
    assert not empty.data and "no chunk" in empty.layout.annotations[0].text


def test_short_tails_keep_their_milliseconds() -> None:
    """The demo's last 10% of requests all hit max_tokens in one engine step: a tail of 8 ms
    read "0.0 s"; it reads 0.01 s now, and long ones keep one decimal."""
    from dashboard.views.common import seconds

    assert seconds(0.008) == "0.01 s" and seconds(1.234) == "1.23 s"
    assert seconds(1234.56) == "1,234.6 s" and seconds(None) == "-"
