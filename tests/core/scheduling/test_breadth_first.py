"""Breadth-first orderings: ``breadth-first`` and ``context`` (the ``context`` policy's)."""

from __future__ import annotations

import pytest

from core.engine.types import FinishReason
from core.scheduling import ReplicaSpec, Scheduler, SchedulerConfig, get_policy
from tests.core.scheduling.factories import groups


def test_breadth_first_gives_every_request_a_chunk_before_any_gets_a_second() -> None:
    cfg = SchedulerConfig(chunk_tokens=10, ordering="breadth-first", probes=False)
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 2)])
    s.submit(groups(2, 2, max_tokens=10_000))
    seen: list[tuple[str, int]] = []
    for _ in range(4):
        for d in s.schedule():
            seen.append((d.request_id, d.generated))
            s.complete(d.request_id, 10, FinishReason.CHUNK)
    assert [gen for _, gen in seen] == [0, 0, 0, 0, 10, 10, 10, 10]
    assert [rid for rid, _ in seen[:4]] == ["g0-0", "g0-1", "g1-0", "g1-1"]  # submission order


def test_context_bf_runs_unknown_groups_first_then_breadth_first() -> None:
    cfg = SchedulerConfig(chunk_tokens=100, ordering="context", probes=False)
    s = Scheduler(cfg, [ReplicaSpec("a", 1_000_000, 2)])
    s.submit(groups(2, 2, max_tokens=10_000))
    assert [d.request_id for d in s.schedule()] == ["g0-0", "g0-1"]
    s.complete("g0-0", 20, FinishReason.STOP)  # g0 now looks short
    s.complete("g0-1", 100, FinishReason.CHUNK)
    # g1 has no finished sibling: its estimate is the cap (paper's start), so it goes first
    assert [d.request_id for d in s.schedule()] == ["g1-0", "g1-1"]
    s.complete("g1-0", 30, FinishReason.STOP)
    s.complete("g1-1", 100, FinishReason.CHUNK)
    # both groups have evidence now: fewest generated first, ties by submission order
    assert [d.request_id for d in s.schedule()] == ["g0-1", "g1-1"]


def test_context_bf_promotes_requests_of_a_group_that_runs_to_the_cap() -> None:
    cfg = SchedulerConfig(chunk_tokens=100, ordering="context", probes=False)
    s = Scheduler(cfg, [ReplicaSpec("a", 1_000_000, 4)])
    s.submit(groups(2, 2, max_tokens=10_000))
    assert len(s.schedule()) == 4
    s.complete("g0-0", 20, FinishReason.STOP)  # g0 short
    s.complete("g1-0", 100, FinishReason.STOP)  # g1 longer, but far below the cap
    s.complete("g0-1", 100, FinishReason.CHUNK)
    s.complete("g1-1", 100, FinishReason.CHUNK)
    assert [d.request_id for d in s.schedule()] == ["g0-1", "g1-1"]  # breadth-first
    big = SchedulerConfig(chunk_tokens=10_000, ordering="context", probes=False)
    s2 = Scheduler(big, [ReplicaSpec("a", 1_000_000, 4)])
    s2.submit(groups(2, 2, max_tokens=10_000))
    assert len(s2.schedule()) == 4
    s2.complete("g0-0", 20, FinishReason.STOP)
    s2.complete("g1-0", 9_990, FinishReason.STOP)  # g1 runs to the cap
    s2.complete("g0-1", 100, FinishReason.ABORT)  # re-queued with 100 tokens each
    s2.complete("g1-1", 100, FinishReason.ABORT)
    assert [d.request_id for d in s2.schedule()] == ["g1-1", "g0-1"]  # promoted


def test_policies_run_the_ordering_their_name_says() -> None:
    assert get_policy("context").config.ordering == "context"
    assert get_policy("seer").config.ordering == "context"
    assert get_policy("context-prior").config.ordering == "context-hedge"
    assert get_policy("seer-prior").config.ordering == "context-hedge"
    assert get_policy("context-max").config.ordering == "context-max"
    assert get_policy("context-hedge").config.ordering == "context-hedge"
    with pytest.raises(ValueError, match="breadth-first"):
        SchedulerConfig(ordering="nope")
    with pytest.raises(ValueError, match="promote_fraction"):
        SchedulerConfig(promote_fraction=1.5)


def test_oracle_cap_runs_exactly_the_truly_long_requests_first_then_breadth_first() -> None:
    cfg = SchedulerConfig(chunk_tokens=100, ordering="oracle-cap", probes=False)
    s = Scheduler(cfg, [ReplicaSpec("a", 1_000_000, 1)])
    true = {"g0-0": 50, "g0-1": 9_600, "g1-0": 10_000, "g1-1": 300}  # cap 10,000; 95% = 9,500
    s.submit(groups(2, 2, max_tokens=10_000), oracle_lengths=true)
    first = [d.request_id for d in s.schedule()]
    assert first == ["g1-0"]  # longest true remaining among the long ones, not submission order
    s.complete("g1-0", 100, FinishReason.CHUNK)
    assert [d.request_id for d in s.schedule()] == ["g1-0"]  # 9,900 left > 9,600 left
    s.complete("g1-0", 100, FinishReason.CHUNK)
    s2 = Scheduler(cfg, [ReplicaSpec("a", 1_000_000, 4)])
    s2.submit(groups(2, 2, max_tokens=10_000), oracle_lengths=true)
    assert [d.request_id for d in s2.schedule()][:2] == ["g1-0", "g0-1"]
    for rid in ("g0-0", "g0-1", "g1-0", "g1-1"):
        s2.complete(
            rid,
            100 if rid != "g0-0" else 50,
            FinishReason.CHUNK if rid != "g0-0" else FinishReason.STOP,
        )
    # the short ones are breadth-first behind the long ones, whatever their true length
    assert [d.request_id for d in s2.schedule()] == ["g1-0", "g0-1", "g1-1"]


def test_oracle_cap_needs_the_true_lengths_and_is_a_registered_yardstick() -> None:
    assert get_policy("oracle-cap").config.ordering == "oracle-cap"
    s = Scheduler(
        SchedulerConfig(ordering="oracle-cap", probes=False), [ReplicaSpec("a", 100_000, 2)]
    )
    with pytest.raises(ValueError, match="true length"):
        s.submit(groups(1, 2, max_tokens=10_000))
