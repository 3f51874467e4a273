"""The scheduler's event trace: every request ends with one RequestFinished, every group with
one GroupFinished, chunks and times are consistent, and no sink means no events built."""

from __future__ import annotations

import itertools

from core.engine.types import FinishReason
from core.events import (
    NULL_SINK,
    ChunkDone,
    CollectingSink,
    GroupEstimate,
    GroupFinished,
    RequestFinished,
)
from core.scheduling import (
    BaseScheduler,
    GroupSpec,
    ReplicaSpec,
    SchedulerConfig,
    get_policy,
    make_scheduler,
)
from tests.core.scheduling.factories import run_to_end


def _scheduler(sink: CollectingSink | None, policy: str = "context") -> BaseScheduler:
    ticks = itertools.count()
    plan = get_policy(policy, SchedulerConfig(chunk_tokens=4))
    reps = [ReplicaSpec("a", 10_000, 2), ReplicaSpec("b", 10_000, 2)]
    return make_scheduler(plan.config, reps, sink=sink, clock=lambda: float(next(ticks)))


def test_every_request_and_group_is_reported_once() -> None:
    sink = CollectingSink()
    s = _scheduler(sink)
    groups = [
        GroupSpec("g0", ("g0-0", "g0-1"), 10, 3, prompt_key="p0"),
        GroupSpec("g1", ("g1-0", "g1-1", "g1-2"), 10, 3),
    ]
    lengths = {"g0-0": 3, "g0-1": 10, "g1-0": 9, "g1-1": 1, "g1-2": 5}
    s.submit(groups)
    run_to_end(s, lengths)
    fin = {e.request_id: e for e in sink.of(RequestFinished) if isinstance(e, RequestFinished)}
    assert {k: v.length for k, v in fin.items()} == lengths
    assert fin["g0-1"].finish_reason == "length"  # reached its max_tokens
    assert fin["g0-0"].finish_reason == "stop"
    assert fin["g0-0"].prompt_key == "p0" and fin["g1-0"].prompt_key == "g1"
    chunks = [e for e in sink.events if isinstance(e, ChunkDone)]
    for rid, ev in fin.items():
        mine = [c for c in chunks if c.request_id == rid]
        assert ev.chunks == len(mine) == len(ev.replicas) == -(-lengths[rid] // 4)
        assert [c.replica_id for c in mine] == list(ev.replicas)
        assert ev.started_at is not None
        assert ev.queued_at <= ev.started_at <= ev.finished_at
    assert sum(e.is_probe for e in fin.values()) == 2  # one probe per group
    ends = [e for e in sink.events if isinstance(e, GroupFinished)]
    assert sorted((e.group_id, sorted(e.lengths)) for e in ends) == [
        ("g0", [3, 10]),
        ("g1", [1, 5, 9]),
    ]
    est = [e for e in sink.events if isinstance(e, GroupEstimate) and e.group_id == "g1"]
    assert [e.finished for e in est] == [1, 2, 3]
    assert all(1 <= e.mean_estimate <= 10 and 1 <= e.max_estimate <= 10 for e in est)


def test_each_chunk_records_its_own_dispatch_time_and_its_draft_tokens() -> None:
    """The job timeline's bars: a chunk spans from its own dispatch (not the request's first)
    to its return, and carries the draft tokens its engine reported."""
    sink = CollectingSink()
    now = [0.0]
    plan = get_policy("context", SchedulerConfig(chunk_tokens=4))
    s = make_scheduler(plan.config, [ReplicaSpec("a", 10_000, 2)], sink=sink, clock=lambda: now[0])
    s.submit([GroupSpec("g", ("r",), 12, 3)])
    drafted = iter([5, 0, 7])
    while not s.done:
        now[0] += 10.0  # dispatched at 10, 30, 50
        for d in s.schedule():
            now[0] += 10.0  # back at 20, 40, 60
            left = 12 - d.generated
            reason = FinishReason.STOP if left <= d.chunk_cap else FinishReason.CHUNK
            s.complete(d.request_id, min(left, d.chunk_cap), reason, next(drafted))
    chunks = [e for e in sink.events if isinstance(e, ChunkDone)]
    assert [(c.started_at, c.at, c.drafted) for c in chunks] == [
        (10.0, 20.0, 5),
        (30.0, 40.0, 0),
        (50.0, 60.0, 7),
    ]
    (fin,) = sink.of(RequestFinished)
    assert isinstance(fin, RequestFinished) and fin.started_at == 10.0  # the request's first


def test_cancel_reports_cancelled_requests_and_the_group_once() -> None:
    sink = CollectingSink()
    s = _scheduler(sink)
    s.submit([GroupSpec("g", ("a", "b", "c", "d", "e"), 100, 3)])
    running = [d.request_id for d in s.schedule()]
    aborted = s.cancel(["g"])
    assert sorted(aborted) == sorted(running)
    for rid in aborted:
        s.complete(rid, 1, FinishReason.ABORT)
    s.cancel(["g"])  # idempotent: no second GroupFinished
    fin = [e for e in sink.events if isinstance(e, RequestFinished)]
    assert sorted(e.request_id for e in fin) == ["a", "b", "c", "d", "e"]
    assert {e.finish_reason for e in fin} == {"cancelled"}
    ends = [e for e in sink.events if isinstance(e, GroupFinished)]
    assert len(ends) == 1 and ends[0].lengths == ()


def test_verl_policy_emits_too() -> None:
    sink = CollectingSink()
    s = _scheduler(sink, "verl")
    s.submit([GroupSpec("g", ("a", "b"), 8, 3)])
    run_to_end(s, {"a": 8, "b": 2})
    fin = [e for e in sink.events if isinstance(e, RequestFinished)]
    assert sorted((e.request_id, e.chunks, e.finish_reason) for e in fin) == [
        ("a", 1, "length"),
        ("b", 1, "stop"),
    ]


def test_no_sink_or_null_sink_builds_no_trace() -> None:
    assert _scheduler(None)._trace is None
    plan = get_policy("context")
    assert make_scheduler(plan.config, [ReplicaSpec("a", 100, 1)], sink=NULL_SINK)._trace is None
