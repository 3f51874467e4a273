"""ReplicaPool on its own (fake engines, no dispatcher): the replica state machine, failures
counted per incident within the window, bounded probes, FAILED for good, capacity from loads."""

from __future__ import annotations

import asyncio

from app.api import ReplicaState
from app.serve.scheduler.metrics import ServiceMetrics
from app.serve.scheduler.replica_pool import ReplicaPool
from tests.app.serve.fakes import FakeLinks, RecordingListener, service_config


def _pool(links: FakeLinks, **kw: object) -> tuple[ReplicaPool, RecordingListener]:
    listener = RecordingListener()
    pool = ReplicaPool(links, service_config(**kw), ServiceMetrics(), listener)
    return pool, listener


def test_losses_count_per_incident_and_enough_within_the_window_fail_it_for_good() -> None:
    pool, listener = _pool(FakeLinks(n=2), max_replica_failures=2, failure_window_s=10)
    pool.set_state(1, ReplicaState.HEALTHY)
    pool.lost(1, "chunk lost", now=100.0)
    pool.lost(1, "another chunk of the same incident", now=100.1)  # DOWN already: counts once
    assert pool[1].state is ReplicaState.DOWN and len(pool[1].failures) == 1
    pool.set_state(1, ReplicaState.HEALTHY)
    pool.lost(1, "second incident, past the window", now=111.0)
    assert pool[1].state is ReplicaState.DOWN and len(pool[1].failures) == 1  # first aged out
    pool.set_state(1, ReplicaState.HEALTHY)
    pool.lost(1, "third, within the window of the second", now=115.0)
    assert pool[1].state is ReplicaState.FAILED and pool[1].error == (
        "third, within the window of the second"
    )
    assert listener.changes == [
        (1, ReplicaState.HEALTHY),
        (1, ReplicaState.DOWN),
        (1, ReplicaState.HEALTHY),
        (1, ReplicaState.DOWN),
        (1, ReplicaState.HEALTHY),
        (1, ReplicaState.FAILED),
    ]
    assert [i for i, _ in listener.unreachable] == [1, 1, 1]  # its chunks reclaimed each time
    assert pool.live() == []  # replica 0 never answered: STARTING is not in rotation


def test_probes_are_bounded_mark_the_silent_down_and_never_revive_a_failed_one() -> None:
    async def body() -> None:
        links = FakeLinks(n=3)
        await links.start()
        pool, listener = _pool(links, replica_call_timeout_s=0.2)
        for i in range(3):
            pool.set_state(i, ReplicaState.HEALTHY)
        links.gone.add(1)  # its calls never return
        links.down.add(2)  # its calls fail at once
        loads = await asyncio.wait_for(asyncio.gather(*(pool.probe(i) for i in range(3))), 10)
        assert loads[0] is not None and loads[1] is None and loads[2] is None
        assert pool[0].load is loads[0]
        assert [pool[i].state for i in range(3)] == [
            ReplicaState.HEALTHY,
            ReplicaState.DOWN,
            ReplicaState.DOWN,
        ]
        assert "TimeoutError" in (pool[1].error or "") and "restarting" in (pool[2].error or "")
        assert sorted(i for i, _ in listener.unreachable) == [1, 2]
        pool.set_state(0, ReplicaState.FAILED, "test")
        assert await pool.probe(0) is None  # an answer does not revive it
        assert pool[0].state is ReplicaState.FAILED and pool.live() == []

    asyncio.run(body())


def test_capacity_comes_from_the_last_load_report_else_the_engine_config() -> None:
    async def body() -> None:
        links = FakeLinks(n=1, max_num_seqs=8)
        await links.start()
        pool, _ = _pool(links, engine={"backend": "fake", "max_model_len": 512, "max_num_seqs": 8})
        before = pool.spec(0)
        assert (before.kv_capacity_tokens, before.max_running) == (512 * 8, 8)
        load = await pool.probe(0)
        assert load is not None
        after = pool.spec(0)
        assert after.kv_capacity_tokens == load.kv_capacity_tokens
        assert after.max_running == load.max_running
        pool.mark_loaded([0], 7)
        assert pool[0].load is not None and pool[0].load.policy_version == 7
        health = pool.health([123])
        assert health[0].reserved_kv_tokens == 123 and health[0].replica_id == "replica-0"

    asyncio.run(body())
