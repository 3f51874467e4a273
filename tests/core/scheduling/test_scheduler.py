"""The divided-rollout scheduler as a state machine, driven by a fake engine."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.engine.types import FinishReason
from core.scheduling import (
    BaseScheduler,
    ChunkDecision,
    DictLengthPrior,
    GroupSpec,
    ReplicaSpec,
    RequestPhase,
    Scheduler,
    SchedulerConfig,
    VerlScheduler,
    get_policy,
    make_scheduler,
)
from core.scheduling.ordering import get_ordering
from tests.core.scheduling.factories import groups, replicas


def drive(
    s: BaseScheduler,
    lengths: dict[str, int],
    pick: random.Random | None = None,
) -> list[list[ChunkDecision]]:
    """Run to completion; each round completes a random subset of the chunks in flight."""
    rng = pick or random.Random(0)
    inflight: list[ChunkDecision] = []
    rounds: list[list[ChunkDecision]] = []
    for _ in range(100_000):
        new = s.schedule()
        rounds.append(new)
        inflight.extend(new)
        # the scheduler's own reservations never exceed any replica's capacity
        for load in s.loads():
            assert load.reserved_kv_tokens <= load.kv_capacity_tokens
        if not inflight:
            break
        rng.shuffle(inflight)
        k = max(1, len(inflight) // 2)
        done, inflight = inflight[:k], inflight[k:]
        for d in done:
            left = lengths[d.request_id] - d.generated
            if left <= d.chunk_cap:
                reason = FinishReason.STOP
                s.complete(d.request_id, left, reason)
            else:
                s.complete(d.request_id, d.chunk_cap, FinishReason.CHUNK)
    return rounds


def test_divided_rollout_runs_every_request_to_its_length() -> None:
    rng = random.Random(1)
    gs = groups(6, 4, max_tokens=200)
    lengths = {r: rng.randint(1, 200) for g in gs for r in g.request_ids}
    s = Scheduler(SchedulerConfig(chunk_tokens=16), replicas(3, kv=2_000, running=5))
    s.submit(gs)
    rounds = drive(s, lengths)
    assert s.done and s.num_queued == 0 and s.num_running == 0
    for rid, n in lengths.items():
        assert s.request_generated(rid) == n
        assert s.request_phase(rid) is RequestPhase.FINISHED
    decisions = [d for r in rounds for d in r]
    assert all(d.chunk_cap <= 16 for d in decisions)
    # every request is re-queued after each chunk: ceil(len / 16) chunks each
    per_req: dict[str, int] = {}
    for d in decisions:
        per_req[d.request_id] = per_req.get(d.request_id, 0) + 1
    assert per_req == {rid: -(-n // 16) for rid, n in lengths.items()}


def test_chunk_budget_stops_at_max_tokens() -> None:
    s = Scheduler(SchedulerConfig(chunk_tokens=64), replicas(1))
    s.submit(groups(1, 1, max_tokens=100))
    (d,) = s.schedule()
    assert d.chunk_cap == 64
    s.complete(d.request_id, 64, FinishReason.CHUNK)
    (d,) = s.schedule()
    assert (d.generated, d.chunk_cap) == (64, 36)
    assert s.complete(d.request_id, 36, FinishReason.CHUNK)  # reached max_tokens: finished
    assert s.done


def test_admission_respects_running_slots_and_kv() -> None:
    # each fresh chunk reserves prompt 10 + chunk 50 = 60 KV tokens; 200 fit 3 of them
    s = Scheduler(SchedulerConfig(chunk_tokens=50), [ReplicaSpec("a", 200, 8)])
    s.submit(groups(2, 4))
    assert len(s.schedule()) == 3
    assert s.schedule() == []
    s2 = Scheduler(SchedulerConfig(chunk_tokens=50), [ReplicaSpec("a", 10_000, 2)])
    s2.submit(groups(2, 4))
    assert len(s2.schedule()) == 2


def test_probes_go_first_smallest_generated_first() -> None:
    cfg = SchedulerConfig(chunk_tokens=10, ordering="context-hedge")
    s = Scheduler(cfg, [ReplicaSpec("a", 10_000, 2)])
    s.submit(groups(3, 3))
    first = s.schedule()
    assert [d.request_id for d in first] == ["g0-0", "g1-0"]
    assert all(d.is_probe and d.priority == 0 for d in first)
    s.complete("g0-0", 10, FinishReason.CHUNK)
    (d,) = s.schedule()
    assert d.request_id == "g2-0"  # the probe that has generated least
    s.complete("g1-0", 10, FinishReason.CHUNK)
    (d,) = s.schedule()
    assert d.request_id == "g0-0" and d.generated == 10


def test_context_max_orders_groups_by_longest_finished_sibling() -> None:
    cfg = SchedulerConfig(chunk_tokens=100, ordering="context-max")
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 2)])
    s.submit(groups(2, 3, max_tokens=100))
    a, b = s.schedule()  # the two probes
    s.complete(a.request_id, 5, FinishReason.STOP)  # g0 looks short
    s.complete(b.request_id, 90, FinishReason.STOP)  # g1 looks long
    got = [d.request_id for d in s.schedule()]
    assert got == ["g1-1", "g1-2"]


def test_context_keeps_a_running_survivor_ahead_of_its_fresh_siblings() -> None:
    cfg = SchedulerConfig(chunk_tokens=50, ordering="context-hedge")
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 3)])
    s.submit(groups(1, 4, max_tokens=10_000))
    probe, r1, r2 = s.schedule()
    s.complete(probe.request_id, 20, FinishReason.STOP)  # group looks short (~20)
    s.complete(r1.request_id, 50, FinishReason.CHUNK)  # r1 already past 50: a survivor
    s.complete(r2.request_id, 10, FinishReason.STOP)
    assert [d.request_id for d in s.schedule()] == ["g0-1", "g0-3"]


def test_oracle_needs_true_lengths_and_orders_longest_remaining_first() -> None:
    cfg = SchedulerConfig(ordering="oracle", probes=False)
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 1)])
    with pytest.raises(ValueError, match="true length of 'g0-0'"):
        s.submit(groups(1, 2))
    s.submit(groups(1, 3), oracle_lengths={"g0-0": 5, "g0-1": 80, "g0-2": 40})
    assert [d.request_id for d in s.schedule()] == ["g0-1"]


def test_cache_aware_routing_stays_on_kv_replica_within_threshold() -> None:
    for threshold, expect_stay in ((32, True), (0, False)):
        cfg = SchedulerConfig(chunk_tokens=10, probes=False, ordering="fifo",
                              cache_threshold=threshold)  # fmt: skip
        s = Scheduler(cfg, replicas(2, running=8))
        s.submit(groups(1, 3))
        first = {d.request_id: d.replica for d in s.schedule()}
        assert first == {"g0-0": 0, "g0-1": 1, "g0-2": 0}
        s.complete("g0-1", 3, FinishReason.STOP)
        # replica 0 then has one more chunk in flight (g0-2) than replica 1 (none)
        s.complete("g0-0", 10, FinishReason.CHUNK)
        (d,) = s.schedule()
        assert d.request_id == "g0-0"
        assert (d.replica == first["g0-0"]) == expect_stay
        assert d.migrate_tokens == (0 if expect_stay else 20)


def test_least_loaded_spreads_fresh_requests() -> None:
    s = Scheduler(SchedulerConfig(routing="least-loaded"), replicas(4, running=8))
    s.submit(groups(2, 4))
    counts = [0] * 4
    for d in s.schedule():
        counts[d.replica] += 1
    assert counts == [2, 2, 2, 2]


def test_starvation_interval_serves_longest_waiting() -> None:
    cfg = SchedulerConfig(chunk_tokens=10, ordering="oracle", probes=False, starvation_interval=2)
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 2)])
    true = {"g0-0": 10, "g0-1": 90, "g0-2": 80, "g0-3": 70}
    s.submit(groups(1, 4), oracle_lengths=true)
    # second dispatch goes to the longest-waiting (first submitted) request, not the 2nd longest
    assert [d.request_id for d in s.schedule()] == ["g0-1", "g0-0"]


def test_verl_mode_assigns_whole_groups_round_robin_without_admission() -> None:
    plan = get_policy("verl")
    assert not plan.config.divided and not plan.speculate
    s = make_scheduler(plan.config, [ReplicaSpec("a", 10, 1), ReplicaSpec("b", 10, 1)])
    assert isinstance(s, VerlScheduler)
    s.submit(groups(3, 2, max_tokens=500))
    out = s.schedule()
    assert len(out) == 6  # everything up front, regardless of slots and KV
    assert {(d.group_id, d.replica) for d in out} == {("g0", 0), ("g1", 1), ("g2", 0)}
    assert all(d.chunk_cap == 500 for d in out)
    s.submit(groups(4, 1)[3:])
    (d,) = s.schedule()
    assert (d.group_id, d.replica) == ("g3", 1)  # round-robin continues across submits


def test_length_prior_seeds_group_estimate() -> None:
    cfg = SchedulerConfig(chunk_tokens=10, probes=False, ordering="context-hedge")
    prior = DictLengthPrior({"p-long": [5000, 6000], "p-short": [20, 30]})
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 1)], prior=prior)
    s.submit([
        GroupSpec("short", ("s0",), 10_000, 10, prompt_key="p-short"),
        GroupSpec("long", ("l0",), 10_000, 10, prompt_key="p-long"),
        GroupSpec("new", ("n0",), 10_000, 10),
    ])  # fmt: skip
    order = []
    while not s.done:
        (d,) = s.schedule()
        order.append(d.request_id)
        s.complete(d.request_id, 1, FinishReason.STOP)
    assert order == ["n0", "l0", "s0"]  # unknown prompt = cap first, then the known long one


def test_errors_name_offending_values() -> None:
    s = Scheduler(SchedulerConfig(chunk_tokens=10), replicas(1))
    s.submit(groups(1, 2))
    with pytest.raises(ValueError, match="'g0' submitted twice"):
        s.submit(groups(1, 2))
    with pytest.raises(ValueError, match="request 'x' submitted twice"):
        s.submit([GroupSpec("h1", ("x",), 10, 1), GroupSpec("h2", ("x",), 10, 1)])
    assert s.num_queued == 2  # nothing of the rejected call was queued
    with pytest.raises(ValueError, match="unknown request 'nope'"):
        s.complete("nope", 1, FinishReason.STOP)
    with pytest.raises(ValueError, match="no chunk in flight"):
        s.complete("g0-0", 1, FinishReason.STOP)
    d = s.schedule()[0]
    with pytest.raises(ValueError, match=r"new_tokens=11 outside \[0, 10\]"):
        s.complete(d.request_id, 11, FinishReason.CHUNK)
    with pytest.raises(ValueError, match="finish 'chunk' after 3 tokens"):
        s.complete(d.request_id, 3, FinishReason.CHUNK)
    with pytest.raises(ValueError, match="duplicate replica ids"):
        Scheduler(SchedulerConfig(), [ReplicaSpec("a", 1, 1), ReplicaSpec("a", 1, 1)])
    with pytest.raises(ValueError, match="unknown ordering 'lifo'"):
        SchedulerConfig(ordering="lifo")
    with pytest.raises(ValueError, match="unknown routing 'random'"):
        SchedulerConfig(routing="random")
    with pytest.raises(ValueError, match=r"chunk_tokens=0 outside"):
        SchedulerConfig(chunk_tokens=0)
    with pytest.raises(ValueError, match="unknown policy 'fast'.*'oracle'"):
        get_policy("fast")
    with pytest.raises(ValueError, match="max_tokens=0"):
        GroupSpec("g", ("a",), 0, 1)


def test_abort_requeues_keeping_tokens() -> None:
    s = Scheduler(SchedulerConfig(chunk_tokens=10), replicas(1))
    s.submit(groups(1, 1))
    (d,) = s.schedule()
    assert not s.complete(d.request_id, 4, FinishReason.ABORT)
    (d,) = s.schedule()
    assert d.generated == 4 and d.chunk_cap == 10


def test_report_progress_raises_group_estimate() -> None:
    cfg = SchedulerConfig(chunk_tokens=10, ordering="context-max")
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 1)])
    s.submit(groups(2, 2, max_tokens=1000))
    (p0,) = s.schedule()
    s.complete(p0.request_id, 5, FinishReason.STOP)
    (p1,) = s.schedule()
    s.complete(p1.request_id, 3, FinishReason.STOP)
    s.report_progress("g1-1", 2)  # below what is known: no change
    assert s.groups.stats[1].paper_estimate() == 3
    s.report_progress("g1-1", 700)
    assert s.groups.stats[1].paper_estimate() == 700
    assert s.schedule()[0].request_id == "g1-1"


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["divided", "context", "context-max", "oracle"]),
    chunk=st.integers(1, 64),
    n_rep=st.integers(1, 4),
)
def test_random_runs_finish_exactly_and_never_overbook(
    seed: int, policy: str, chunk: int, n_rep: int
) -> None:
    rng = random.Random(seed)
    gs = groups(rng.randint(1, 6), rng.randint(1, 5), max_tokens=120)
    lengths = {r: rng.randint(1, 120) for g in gs for r in g.request_ids}
    plan = get_policy(policy, SchedulerConfig(chunk_tokens=chunk, rekey_every=3))
    s = make_scheduler(plan.config, replicas(n_rep, kv=400, running=3))
    s.submit(gs, oracle_lengths=lengths)
    drive(s, lengths, rng)
    assert s.done
    assert all(s.request_generated(r) == n for r, n in lengths.items())


def test_oracle_group_orders_by_longest_true_sibling() -> None:
    cfg = SchedulerConfig(ordering="oracle-group", probes=False)
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 2)])
    true = {"g0-0": 5, "g0-1": 6, "g1-0": 3, "g1-1": 90}
    s.submit(groups(2, 2), oracle_lengths=true)
    assert [d.group_id for d in s.schedule()] == ["g1", "g1"]
    s2 = Scheduler(cfg, [ReplicaSpec("a", 100_000, 2)])
    with pytest.raises(ValueError, match=r"oracle length of 'g0-0' is 500, outside \[1, 100\]"):
        s2.submit(groups(1, 1), oracle_lengths={"g0-0": 500})
    assert s2.num_queued == 0  # rejected before any state changed


def test_dispatch_bench_keeps_the_backlog() -> None:
    from lab.bench.scheduler_dispatch import bench_dispatch

    b = bench_dispatch("context", queued=2_000, decisions=2_000)
    assert b.decisions >= 2_000 and b.queued_min >= 1_900 and b.per_second > 0


def test_explore_interval_starts_the_shortest_looking_unstarted_request() -> None:
    cfg = SchedulerConfig(
        chunk_tokens=10, ordering="context-hedge", probes=False, explore_interval=2
    )
    s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 2)])
    prior = {"p-short": [20, 20], "p-long": [900, 900]}
    s.prior = DictLengthPrior(prior)
    s.submit([
        GroupSpec("long", ("l0", "l1"), 1000, 10, prompt_key="p-long"),
        GroupSpec("short", ("s0", "s1"), 1000, 10, prompt_key="p-short"),
    ])  # fmt: skip
    # first dispatch by the ordering (long first), second by exploration (short first)
    assert [d.request_id for d in s.schedule()] == ["l0", "s0"]


def test_long_running_requests_are_rebalanced_to_the_least_loaded_replica() -> None:
    """Past ``rebalance_tokens`` a request leaves the replica holding its KV for the least
    loaded one (its KV is pulled: ``migrate_tokens``); below it cache-aware routing keeps it."""

    def run(rebalance: int) -> tuple[str, int]:
        cfg = SchedulerConfig(
            chunk_tokens=100, ordering="fifo", probes=False, rebalance_tokens=rebalance
        )
        s = Scheduler(cfg, [ReplicaSpec("a", 100_000, 4), ReplicaSpec("b", 100_000, 4)])
        s.submit([GroupSpec("g", ("g-0", "g-1", "g-2"), 1_000, 10)])
        first = {d.request_id: d.replica for d in s.schedule()}
        crowded = 0 if sum(1 for rep in first.values() if rep == 0) == 2 else 1
        long_id, _mate = [rid for rid, rep in first.items() if rep == crowded]
        (alone,) = [rid for rid, rep in first.items() if rep != crowded]
        s.complete(alone, 5, FinishReason.STOP)  # the other replica is now idle
        s.complete(long_id, 100, FinishReason.CHUNK)  # 100 generated, re-queued; mate runs on
        (d,) = s.schedule()
        assert d.request_id == long_id
        return ("stay" if d.replica == crowded else "move", d.migrate_tokens)

    assert run(0) == ("stay", 0)  # in-flight counts differ by <= 32: stays with its KV
    assert run(100) == ("move", 110)  # >= 100 generated: least loaded, pulls prompt + 100
    assert run(101) == ("stay", 0)


def live_keys(s: Scheduler) -> dict[int, float]:
    """Queued non-probe request -> key of its one live entry in the main queue."""
    out: dict[int, float] = {}
    for key, r in s._queues.live_keys():
        assert r not in out, f"two live entries for request {r}"
        out[r] = key
    return out


@pytest.mark.parametrize("ordering", ["context", "context-hedge", "context-max", "fifo"])
def test_queued_keys_are_always_current(ordering: str) -> None:
    """Re-keying only re-pushes keys that changed (and computes a (group, generated) pair
    once): after every call each queued request's live key is what its ordering gives now."""
    rng = random.Random(3)
    gs = groups(12, 4, max_tokens=300)
    lengths = {r: rng.choice([5, 40, 120, 300]) for g in gs for r in g.request_ids}
    cfg = SchedulerConfig(chunk_tokens=32, ordering=ordering, rekey_every=3)
    s = Scheduler(cfg, replicas(3, kv=700, running=4))  # tight KV: chunks are set aside
    order = get_ordering(ordering)
    s.submit(gs)
    inflight: list[ChunkDecision] = []
    checks = 0
    while not s.done:
        inflight.extend(s.schedule())
        rng.shuffle(inflight)
        d = inflight.pop()
        left = lengths[d.request_id] - d.generated
        if left <= d.chunk_cap:
            s.complete(d.request_id, left, FinishReason.STOP)
        else:
            s.complete(d.request_id, d.chunk_cap, FinishReason.CHUNK)
        keys = live_keys(s)
        queued = [
            r
            for r, ph in enumerate(s.requests.phase)
            if ph is RequestPhase.QUEUED and not s.requests.is_probe[r]
        ]
        assert sorted(keys) == queued
        for r in queued:
            assert keys[r] == order(s, r)
            checks += 1
    assert checks > 100
