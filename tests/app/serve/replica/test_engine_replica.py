"""The engine replica's sync loop with the draft server (``app.serve.replica.engine_replica``), on a
sim engine and an in-process server whose exchanges work, fail or hang: rollouts go on, failures are
counted, and the tokens of failed exchanges reach the server once it answers again."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Coroutine
from typing import Any

import pytest

from app.config import DraftServerConfig
from app.engines.config import EngineConfig, SimConfig
from app.engines.sim.workload import group_prompt
from app.serve.replica.engine_replica import EngineReplica
from core.drafting.shared import GroupCursor, SharedGroups, SyncBatch, SyncReply
from core.engine import ChunkRequest

SIM = SimConfig(workload="qwen2-vl", scale=0.05, time_scale=1e-5)
SHARING = DraftServerConfig(sync_period_s=0.01, call_timeout_s=0.05)


class Server:
    """Stands in for the DraftServer handle: ``exchange.remote(batch)``."""

    def __init__(self, mode: str) -> None:
        self.mode = mode  # ok | fail | hang
        self.groups = SharedGroups()
        self.calls = 0

    @property
    def exchange(self) -> Server:
        return self

    def remote(self, batch: SyncBatch) -> Coroutine[Any, Any, SyncReply]:
        self.calls += 1
        mode = self.mode

        async def answer() -> SyncReply:
            if mode == "hang":
                await asyncio.sleep(3600)
            if mode == "fail":
                raise RuntimeError("draft server down")
            return self.groups.exchange(batch)

        return answer()


async def _replica(server: Server) -> Any:
    cls: Any = EngineReplica.func_or_class  # the class under Serve's decorator
    replica = cls.__new__(cls)
    cfg = EngineConfig(backend="sim", max_model_len=65_536, max_num_seqs=256, sim=SIM)
    await cls.__init__(replica, cfg, "sim-0", server, SHARING)
    return replica


def _chunk(j: int, speculate: bool = True) -> ChunkRequest:
    return ChunkRequest(
        request_id=f"r{j}",
        group_id="g",
        response_index=j,
        prompt_token_ids=group_prompt(SIM, 0),
        chunk_cap=100_000,
        max_tokens=40_960,
        speculate=speculate,
    )


async def _until(cond: Any, what: str) -> None:
    for _ in range(500):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("mode", ["ok", "fail", "hang"])
def test_rollouts_go_on_and_tokens_arrive_once_the_server_answers(mode: str) -> None:
    async def main() -> None:
        server = Server(mode)
        replica = await _replica(server)
        try:
            results = await asyncio.gather(*(replica.run_chunk(_chunk(j)) for j in range(3)))
            assert all(r.finished for r in results)  # the rollout never waits on the server
            if mode != "ok":
                await _until(lambda: replica.exchange_failures >= 2, "failed exchanges")
                load = await replica.load()
                assert load.draft_exchange_failures >= 2
                server.mode = "ok"
                replica._active.set()  # a new chunk would wake an idle loop the same way
            await _until(lambda: replica.exchanges >= 1, "an exchange")

            def on_server() -> int:
                update = server.groups.update(GroupCursor(group_id="g"), lengths_only=True)
                return 0 if update is None else len(update.lengths)

            # every response's tokens, pushed again if needed (an exchange that ran while a
            # response was still starting carries the others; a later one brings it)
            await _until(lambda: on_server() == 3, "all three responses on the server")
            assert (await replica.load()).draft_exchanges >= 1
        finally:
            assert replica._sync_task is not None
            replica._sync_task.cancel()

    asyncio.run(main())


def test_chunks_that_do_not_speculate_exchange_nothing() -> None:
    # a policy without speculation (verl, context): nobody drafts, so the loop stays idle
    async def main() -> None:
        server = Server("ok")
        replica = await _replica(server)
        try:
            await asyncio.sleep(0.05)
            calls = server.calls
            results = await asyncio.gather(
                *(replica.run_chunk(_chunk(j, speculate=False)) for j in range(3))
            )
            assert all(r.finished for r in results)
            await asyncio.sleep(0.1)  # 10 sync periods
            assert server.calls == calls
            assert server.groups.update(GroupCursor(group_id="g"), lengths_only=True) is None
            # a speculating chunk starts the loop again and its tokens reach the server
            await replica.run_chunk(_chunk(3))
            await _until(
                lambda: (
                    server.groups.update(GroupCursor(group_id="g"), lengths_only=True) is not None
                ),
                "the speculating chunk's group on the server",
            )
            assert server.calls > calls
        finally:
            assert replica._sync_task is not None
            replica._sync_task.cancel()

    asyncio.run(main())


def _fake_replica() -> Any:
    """An engine replica around the fake engine (one token per 5 ms), no draft server."""
    cls: Any = EngineReplica.func_or_class

    async def make() -> Any:
        replica = cls.__new__(cls)
        cfg = EngineConfig(backend="fake", max_model_len=4096, max_num_seqs=8)
        await cls.__init__(replica, cfg, "fake-0")
        replica.engine.step_s = 0.005
        return replica

    return make()


def _fake_chunk(generated: list[int], budget: int = 8) -> ChunkRequest:
    return ChunkRequest(
        request_id="r0",
        group_id="g",
        response_index=0,
        prompt_token_ids=[1, 2, 3],
        generated_token_ids=generated,
        chunk_cap=budget,
        max_tokens=64,
    )


def test_a_chunk_whose_abort_overtook_it_ends_aborted_when_it_arrives() -> None:
    """An abort can reach the replica before its chunk does (both travel through Serve; on a
    loaded machine in either order, and the chunks of a caller that went away then ran to their
    end). That chunk ends at once, aborted, with no tokens; the abort is spent on it."""

    async def main() -> None:
        replica = await _fake_replica()
        assert not await replica.abort("r0", 0)  # nothing running yet
        early = await replica.run_chunk(_fake_chunk([]))
        assert early.finish_reason == "abort" and early.token_ids == []
        again = await replica.run_chunk(_fake_chunk([]))  # the abort is spent
        assert again.finish_reason != "abort" and again.token_ids

    asyncio.run(main())


def test_an_abort_of_a_chunk_that_ended_leaves_later_chunks_alone() -> None:
    """A late abort (its chunk ended first) is a no-op: neither the request's next chunk nor a
    chunk re-sent at the same offset (a weight update restarts requests) is aborted by it. A
    running chunk is aborted and keeps the tokens it made."""

    async def main() -> None:
        replica = await _fake_replica()
        first = await replica.run_chunk(_fake_chunk([]))
        assert first.token_ids
        assert not await replica.abort("r0", 0)  # late: the chunk ended
        resent = await replica.run_chunk(_fake_chunk([]))
        assert resent.finish_reason != "abort" and resent.token_ids == first.token_ids
        nxt = await replica.run_chunk(_fake_chunk(first.token_ids))
        assert nxt.finish_reason != "abort" and nxt.token_ids
        running = asyncio.ensure_future(replica.run_chunk(_fake_chunk([], budget=2000)))
        await asyncio.sleep(0.05)
        assert await replica.abort("r0", 0)
        cut = await asyncio.wait_for(running, 5)
        assert cut.finish_reason == "abort" and 0 < len(cut.token_ids) < 2000

    asyncio.run(main())


def test_a_replica_outside_ray_starts_no_ray_of_its_own() -> None:
    """Placement is looked up through Ray; a replica built outside Ray (as in these tests) has
    no node, and the look-up must not auto-start a local Ray: one started that way from a
    worker thread of the test process lost its GCS seconds later, and the driver then exited
    the whole test run (exit 1, no summary) 60 s on. In a fresh process: this one may hold the
    session's Ray."""
    code = (
        "import ray\n"
        "from app.serve.replica.engine_replica import _where\n"
        "p = _where(['7'])\n"
        "print(p.node_id == '' and p.gpu_ids == ['7'] and p.bundles == [], ray.is_initialized())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split()[-2:] == ["True", "False"], out.stdout + out.stderr[-2000:]
