"""One long-lived scheduler for many rollouts: release, compaction, cancel, replicas leaving."""

from __future__ import annotations

import random

import pytest

from core.engine.types import FinishReason
from core.scheduling import (
    BaseScheduler,
    ChunkDecision,
    GroupSpec,
    ReplicaSpec,
    RequestPhase,
    Scheduler,
    SchedulerConfig,
    get_policy,
    make_scheduler,
)


def _reps(n: int = 3, kv: int = 4_000, running: int = 6) -> list[ReplicaSpec]:
    return [ReplicaSpec(f"r{i}", kv, running) for i in range(n)]


def _waves(
    s: BaseScheduler, waves: int, groups: int, g: int, seed: int = 0
) -> tuple[list[tuple[str, int, int]], int]:
    """Submit ``waves`` rollouts one after another, each started when half of the previous one
    has finished; release every group as soon as it is done. Returns every decision as
    (request, replica, generated) and the most request slots the scheduler held."""
    rng = random.Random(seed)
    lengths: dict[str, int] = {}
    members: dict[str, tuple[str, ...]] = {}
    inflight: list[ChunkDecision] = []
    out: list[tuple[str, int, int]] = []
    held = 0
    open_groups: set[str] = set()
    for w in range(waves):
        specs = [
            GroupSpec(f"w{w}g{k}", tuple(f"w{w}g{k}-{i}" for i in range(g)), 120, 8)
            for k in range(groups)
        ]
        for spec in specs:
            members[spec.group_id] = spec.request_ids
            open_groups.add(spec.group_id)
            for rid in spec.request_ids:
                lengths[rid] = rng.randint(1, 120)
        oracle = {rid: lengths[rid] for spec in specs for rid in spec.request_ids}
        s.submit(specs, oracle_lengths=oracle)
        target = s.num_open // 2 if w < waves - 1 else 0
        while s.num_open > target:
            new = s.schedule()
            out += [(d.request_id, d.replica, d.generated) for d in new]
            inflight += new
            held = max(held, s.num_held)
            assert inflight, "stuck"
            k = max(1, len(inflight) // 3)
            done, inflight = inflight[:k], inflight[k:]
            for d in done:
                left = lengths[d.request_id] - d.generated
                if left <= d.chunk_cap:
                    s.complete(d.request_id, left, FinishReason.STOP)
                else:
                    s.complete(d.request_id, d.chunk_cap, FinishReason.CHUNK)
            for gid in sorted(open_groups):
                if s.group_done(gid):
                    s.release(gid)
                    open_groups.discard(gid)
    assert s.done and not open_groups
    return out, held


@pytest.mark.parametrize("policy", ["verl", "divided", "context", "context-max", "oracle"])
def test_compaction_changes_no_decision(policy: str) -> None:
    cfg = get_policy(policy, SchedulerConfig(chunk_tokens=16, rekey_every=7)).config
    eager = make_scheduler(cfg, _reps(), compact_after=1)
    never = make_scheduler(cfg, _reps(), compact_after=10**9)
    a, held_eager = _waves(eager, 30, 4, 4)
    b, held_never = _waves(never, 30, 4, 4)
    assert a == b
    assert held_never == 30 * 16  # nothing reclaimed without compaction
    # live work is a few waves (a wave starts when half the last one is done); released slots
    # never outnumber live ones for long
    assert held_eager <= 6 * 16
    assert eager.num_held == 0 and never.num_held == 30 * 16


def test_memory_stays_flat_over_many_rollouts() -> None:
    s = make_scheduler(get_policy("context").config, _reps(), compact_after=64)
    _, held = _waves(s, 200, 4, 4)
    assert held <= 64 + 2 * 16
    assert s.num_held <= 64


def test_release_needs_a_finished_group_and_forgets_its_ids() -> None:
    s = Scheduler(SchedulerConfig(chunk_tokens=10), _reps(1))
    s.submit([GroupSpec("g", ("a", "b"), 10, 4)])
    with pytest.raises(ValueError, match="2 unfinished"):
        s.release("g")
    for d in s.schedule():
        s.complete(d.request_id, 3, FinishReason.STOP)
    assert s.group_done("g") and s.done
    s.release("g")
    with pytest.raises(ValueError, match="unknown request 'a'"):
        s.request_phase("a")
    with pytest.raises(ValueError, match="unknown group 'g'"):
        s.group_done("g")
    s.submit([GroupSpec("g", ("a", "b"), 10, 4)])  # a released id may be used again
    assert s.num_open == 2


def test_cancel_ends_queued_at_once_and_running_when_reported() -> None:
    s = Scheduler(SchedulerConfig(chunk_tokens=10, probes=False), _reps(1, kv=10_000, running=2))
    s.submit([GroupSpec("g", ("a", "b", "c"), 50, 4), GroupSpec("h", ("x",), 50, 4)])
    first = s.schedule()
    assert [d.request_id for d in first] == ["a", "b"]
    assert s.cancel(["g"]) == ["a", "b"]
    assert s.request_phase("c") is RequestPhase.CANCELLED
    assert s.loads()[0].running == 2  # reservations stay until the aborted chunks report
    assert s.schedule() == []  # no free slot yet
    assert s.complete("a", 4, FinishReason.ABORT) is False
    assert s.request_phase("a") is RequestPhase.CANCELLED
    assert s.request_generated("a") == 4
    [d] = s.schedule()
    assert d.request_id == "x"  # the freed slot goes to the other group at once
    s.complete("b", 10, FinishReason.CHUNK)
    assert s.group_done("g") and not s.group_done("h")
    assert s.loads()[0].running == 1 and s.loads()[0].reserved_kv_tokens == d.chunk_cap + 4
    assert s.cancel(["g"]) == []  # cancelling twice is harmless
    s.release("g")
    assert s.num_open == 1


def test_a_replica_out_of_rotation_gets_no_chunk_and_its_work_moves() -> None:
    s = Scheduler(SchedulerConfig(chunk_tokens=5, probes=False), _reps(2, running=4))
    s.submit([GroupSpec(f"g{k}", (f"g{k}-0", f"g{k}-1"), 20, 4) for k in range(2)])
    first = s.schedule()
    on_r1 = [d for d in first if d.replica == 1]
    assert on_r1
    s.set_replica_available(1, False)
    for d in on_r1:  # the caller reports its chunks as aborted with the tokens returned: none
        s.complete(d.request_id, 0, FinishReason.ABORT)
    again = s.schedule()
    assert again and all(d.replica == 0 for d in again)
    assert {d.request_id for d in on_r1} <= {d.request_id for d in again} | {
        d.request_id for d in first if d.replica == 0
    }
    s.set_replica_available(1, True, ReplicaSpec("r1", 9_999, 4))
    assert s.loads()[1].kv_capacity_tokens == 9_999
    with pytest.raises(ValueError, match="'r1', not 'zz'"):
        s.set_replica_available(1, True, ReplicaSpec("zz", 10, 1))
    with pytest.raises(ValueError, match="replica index 5"):
        s.set_replica_available(5, False)


def test_verl_moves_a_group_whose_replica_left_and_rotates_across_rollouts() -> None:
    s = make_scheduler(get_policy("verl").config, _reps(2, kv=10**6, running=64))
    s.submit([GroupSpec("a", ("a0", "a1"), 20, 4)])
    s.submit([GroupSpec("b", ("b0",), 20, 4)])
    s.submit([GroupSpec("c", ("c0",), 20, 4)])
    reps = {d.request_id: d.replica for d in s.schedule()}
    # one rotation across the three submissions, not replica 0 every time
    assert reps == {"a0": 0, "a1": 0, "b0": 1, "c0": 0}
    s.set_replica_available(0, False)
    for rid in ("a0", "a1"):
        s.complete(rid, 0, FinishReason.ABORT)
    moved = {d.request_id: d.replica for d in s.schedule()}
    assert moved == {"a0": 1, "a1": 1}  # the whole group, together
    s.set_replica_available(1, False)
    s.complete("a0", 0, FinishReason.ABORT)
    assert s.schedule() == []  # nowhere to go: it waits, queued
    assert s.request_phase("a0") is RequestPhase.QUEUED


def test_long_run_bench_reports_both_ends_with_bounded_slots() -> None:
    from lab.bench.scheduler_dispatch import bench_long_run

    b = bench_long_run("divided", rollouts=24, window=8, replicas=2)
    assert b.start_per_s > 0 and b.end_per_s > 0 and b.speed_ratio > 0
    assert b.start_kib > 0 and b.end_kib > 0
    assert b.requests_per_rollout == 64 and b.max_held <= 4096
