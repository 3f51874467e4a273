"""Requests that join an open group, cancel one request at a time, restart from the prompt."""

from __future__ import annotations

import pytest

from core.engine.types import FinishReason
from core.events import GroupFinished, RequestFinished
from core.events.sink import CollectingSink as ListSink
from core.scheduling import (
    BaseScheduler,
    GroupSpec,
    ReplicaSpec,
    RequestPhase,
    SchedulerConfig,
    get_policy,
    make_scheduler,
)
from tests.core.scheduling.factories import run_to_end


def _sched(policy: str = "context", sink: ListSink | None = None) -> BaseScheduler:
    reps = [ReplicaSpec("r0", 10_000, 8), ReplicaSpec("r1", 10_000, 8)]
    config = get_policy(policy, SchedulerConfig(chunk_tokens=16)).config
    return make_scheduler(config, reps, sink=sink)


@pytest.mark.parametrize("policy", ["verl", "divided", "context", "seer"])
def test_joined_requests_share_the_group_and_finish_it(policy: str) -> None:
    sink = ListSink()
    s = _sched(policy, sink)
    s.submit([GroupSpec("k", ("a",), 64, 5, prompt_key="p")])
    s.join("k", ["b", "c"], 64)
    assert s.num_open == 3 and not s.group_done("k")
    with pytest.raises(ValueError, match="submitted twice"):
        s.join("k", ["b"], 64)
    run_to_end(s, {"a": 10, "b": 20, "c": 30})
    assert s.group_done("k")
    with pytest.raises(ValueError, match="is done"):
        s.join("k", ["d"], 64)
    ended = [e for e in sink.events if isinstance(e, GroupFinished)]
    assert [(e.group_id, sorted(e.lengths)) for e in ended] == [("k", [10, 20, 30])]
    keys = {e.request_id: e.prompt_key for e in sink.events if isinstance(e, RequestFinished)}
    assert keys == {"a": "p", "b": "p", "c": "p"}
    s.release("k")
    s.submit([GroupSpec("k", ("d",), 64, 5)])  # a late sibling starts the group anew
    assert s.num_open == 1


def test_cancel_requests_leaves_the_rest_of_the_group_running() -> None:
    s = _sched()
    s.submit([GroupSpec("g", ("a", "b", "c"), 64, 5)])
    running = {d.request_id for d in s.schedule()}
    assert running == {"a", "b", "c"}
    s.join("g", ["d"], 64)  # queued: no chunk yet
    assert sorted(s.cancel_requests(["a", "d", "d"])) == ["a"]  # d ends at once
    assert s.request_phase("d") is RequestPhase.CANCELLED
    assert s.cancel_requests(["a"]) == []  # idempotent
    s.complete("a", 16, FinishReason.CHUNK)  # the aborted chunk reports: cancelled, not requeued
    assert s.request_phase("a") is RequestPhase.CANCELLED
    s.complete("b", 3, FinishReason.STOP)
    s.complete("c", 16, FinishReason.CHUNK)
    assert s.request_phase("c") is RequestPhase.QUEUED and not s.group_done("g")
    run_to_end(s, {"c": 40})
    assert s.group_done("g") and s.num_open == 0


def test_restart_forgets_generated_tokens_of_a_queued_request() -> None:
    s = _sched()
    s.submit([GroupSpec("g", ("a", "b"), 64, 5)])
    for d in s.schedule():
        s.complete(d.request_id, d.chunk_cap, FinishReason.CHUNK)
    assert s.request_generated("a") > 0
    s.restart("a")
    assert s.request_generated("a") == 0 and s.num_queued == 2
    decisions = {d.request_id: d for d in s.schedule()}
    assert decisions["a"].generated == 0 and decisions["a"].migrate_tokens == 0
    with pytest.raises(ValueError, match="only a queued one restarts"):
        s.restart("a")
    s.complete("a", 5, FinishReason.STOP)
    assert s.request_generated("a") == 5
