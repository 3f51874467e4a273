"""The dispatch loop that drives a core Scheduler against engines (fake engines: fast)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.config import SERVICE_POLICIES
from app.engines.config import EngineConfig
from app.engines.fake import FakeEngine
from app.serve.dispatcher import DispatchError, RequestRun, run_scheduled
from core.engine import ChunkRequest, ChunkResult, SamplingParams
from core.scheduling.config import SchedulerConfig
from core.scheduling.policies import get_policy
from core.scheduling.scheduler import Scheduler
from core.scheduling.types import GroupSpec, ReplicaSpec

MAX_TOKENS = 120


def _engines(n: int = 2) -> list[FakeEngine]:
    engines = [FakeEngine(EngineConfig(backend="fake"), f"replica-{i}") for i in range(n)]
    for e in engines:
        e.step_s = 0.0
    return engines


def _setup(policy: str, chunk: int = 16, groups: int = 3, g: int = 4, kv: int = 100_000):
    specs = [ReplicaSpec(f"replica-{i}", kv, 64) for i in range(2)]
    scheduler = Scheduler(get_policy(policy, SchedulerConfig(chunk_tokens=chunk)).config, specs)
    group_specs, runs = [], {}
    for gi in range(groups):
        prompt = [40 + gi, 41, 42, 43]
        ids = tuple(f"g{gi}-r{j}" for j in range(g))
        group_specs.append(GroupSpec(f"g{gi}", ids, MAX_TOKENS, len(prompt)))
        for j, rid in enumerate(ids):
            runs[rid] = RequestRun(f"g{gi}", prompt, MAX_TOKENS, SamplingParams(seed=j), True)
    return scheduler, group_specs, runs


async def _drive(engines: list[FakeEngine], *setup: Any) -> list[tuple[int, str]]:
    scheduler, groups, runs = setup
    for e in engines:
        await e.start()
    used: list[tuple[int, str]] = []

    async def run_chunk(replica: int, chunk: ChunkRequest) -> ChunkResult:
        used.append((replica, chunk.request_id))
        return await engines[replica].run_chunk(chunk)

    async def abort(replica: int, request_id: str) -> bool:
        return await engines[replica].abort(request_id)

    await run_scheduled(scheduler, groups, runs, run_chunk, abort)
    return used


@pytest.mark.parametrize("policy", SERVICE_POLICIES)
def test_every_policy_finishes_every_request_like_one_whole_run(policy: str) -> None:
    engines = _engines()
    setup = _setup(policy)
    scheduler, groups, runs = setup
    used = asyncio.run(_drive(engines, *setup))
    assert scheduler.done
    reference = FakeEngine(EngineConfig(backend="fake"))
    reference.step_s = 0.0

    async def whole(run: RequestRun, rid: str) -> ChunkResult:
        await reference.start()
        return await reference.run_chunk(
            ChunkRequest(
                request_id=rid,
                group_id=run.group_id,
                prompt_token_ids=run.prompt,
                max_new_tokens=MAX_TOKENS,
                max_tokens=MAX_TOKENS,
                sampling=run.sampling,
            )
        )

    for rid, run in runs.items():
        ref = asyncio.run(whole(run, rid))
        assert run.tokens == ref.token_ids, rid  # chunks continue exactly where they stopped
        assert run.token_logprobs == ref.logprobs
        assert run.finish is ref.finish_reason
        expected_chunks = 1 if policy == "verl" else -(-max(len(ref.token_ids), 1) // 16)
        assert run.chunks == expected_chunks, (rid, run.chunks)
    assert len(used) == sum(r.chunks for r in runs.values())
    replicas_of: dict[str, set[int]] = {}
    for replica, rid in used:
        replicas_of.setdefault(rid.split("-")[0], set()).add(replica)
    if policy == "verl":  # whole groups stay on one replica, round-robin
        assert replicas_of == {"g0": {0}, "g1": {1}, "g2": {0}}
    else:  # chunks are routed by load: both replicas serve
        assert {r for r, _ in used} == {0, 1}


def test_engine_failure_aborts_the_chunks_in_flight() -> None:
    engines = _engines()
    for e in engines:
        e.step_s = 0.002
    scheduler, groups, runs = _setup("divided", chunk=MAX_TOKENS)
    aborted: list[str] = []
    calls = 0

    async def scenario() -> None:
        for e in engines:
            await e.start()

        async def run_chunk(replica: int, chunk: ChunkRequest) -> ChunkResult:
            nonlocal calls
            calls += 1
            if calls == 5:
                await asyncio.sleep(0.01)
                raise RuntimeError("replica-1 died")
            return await engines[replica].run_chunk(chunk)

        async def abort(replica: int, request_id: str) -> bool:
            aborted.append(request_id)
            return await engines[replica].abort(request_id)

        with pytest.raises(RuntimeError, match="replica-1 died"):
            await run_scheduled(scheduler, groups, runs, run_chunk, abort)
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert len(aborted) >= 5  # every other chunk still in flight was aborted
    assert all(e.load().chunks_in_flight == 0 for e in engines)


def test_request_too_big_for_every_replica_is_an_error_not_a_hang() -> None:
    setup = _setup("context", chunk=MAX_TOKENS, kv=50)
    with pytest.raises(DispatchError, match="no replica can admit"):
        asyncio.run(_drive(_engines(), *setup))


def test_aborted_chunk_fails_the_rollout() -> None:
    scheduler, groups, runs = _setup("divided", groups=1, g=1)

    async def run_chunk(replica: int, chunk: ChunkRequest) -> ChunkResult:
        return ChunkResult(request_id=chunk.request_id, token_ids=[], finish_reason="abort")

    async def abort(replica: int, request_id: str) -> bool:
        return False

    with pytest.raises(DispatchError, match="aborted"):
        asyncio.run(run_scheduled(scheduler, groups, runs, run_chunk, abort))
