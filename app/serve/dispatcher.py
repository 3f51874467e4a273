"""Drive one ``core.scheduling.Scheduler`` against engine replicas until every request ends.

Invariant: a request has at most one chunk in flight; a chunk's tokens are appended to the
request before the scheduler hears of them, so the next chunk continues exactly where the last
one stopped (prompt + generated tokens are re-submitted; prefix caching makes that cheap). The
loop wakes only when a chunk completes (no polling). On any failure every chunk still in flight
is cancelled and aborted on its replica before the error propagates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from core.engine import ChunkRequest, ChunkResult, FinishReason, SamplingParams
from core.scheduling.scheduler import Scheduler
from core.scheduling.types import ChunkDecision, GroupSpec

#: run_chunk(replica index, chunk) -> result
RunChunk = Callable[[int, ChunkRequest], Awaitable[ChunkResult]]
#: abort(replica index, request id)
Abort = Callable[[int, str], Awaitable[object]]


@dataclass
class RequestRun:
    """One response being generated: its inputs and what its chunks produced so far."""

    group_id: str
    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams
    logprobs: bool
    tokens: list[int] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None
    chunks: int = 0


class DispatchError(RuntimeError):
    """The scheduler and the engines cannot make progress (the message says why)."""


def _chunk(decision: ChunkDecision, run: RequestRun) -> ChunkRequest:
    if decision.generated != len(run.tokens):
        raise DispatchError(
            f"request {decision.request_id}: scheduler continues at {decision.generated} tokens "
            f"but {len(run.tokens)} were generated"
        )
    return ChunkRequest(
        request_id=decision.request_id,
        group_id=run.group_id,
        prompt_token_ids=run.prompt,
        generated_token_ids=list(run.tokens),
        max_new_tokens=decision.max_new_tokens,
        max_tokens=run.max_tokens,
        sampling=run.sampling,
        logprobs=run.logprobs,
        priority=decision.priority,
    )


async def _await(result: Awaitable[ChunkResult]) -> ChunkResult:
    return await result


async def run_scheduled(
    scheduler: Scheduler,
    groups: Sequence[GroupSpec],
    runs: dict[str, RequestRun],
    run_chunk: RunChunk,
    abort: Abort,
) -> None:
    """Submit ``groups`` and run chunks until the scheduler is done; fills ``runs`` in place."""
    scheduler.submit(groups)
    in_flight: dict[asyncio.Task[ChunkResult], ChunkDecision] = {}
    try:
        while not scheduler.done:
            for d in scheduler.schedule():
                chunk = _chunk(d, runs[d.request_id])
                in_flight[asyncio.create_task(_await(run_chunk(d.replica, chunk)))] = d
            if not in_flight:
                raise DispatchError(
                    f"{scheduler.num_queued} requests are queued but no replica can admit them "
                    "(a request needs more KV than any replica has)"
                )
            done, _ = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for fut in done:
                d = in_flight.pop(fut)
                res = fut.result()
                if res.finish_reason is FinishReason.ABORT:
                    raise DispatchError(
                        f"request {d.request_id} was aborted on replica {d.replica}"
                    )
                run = runs[d.request_id]
                run.tokens += res.token_ids
                if res.logprobs is not None:
                    run.token_logprobs += res.logprobs
                run.chunks += 1
                if scheduler.complete(d.request_id, len(res.token_ids), res.finish_reason):
                    run.finish = (
                        FinishReason.STOP
                        if res.finish_reason is FinishReason.STOP
                        else FinishReason.LENGTH
                    )
    except BaseException:
        for fut in in_flight:
            fut.cancel()
        await asyncio.shield(
            asyncio.gather(
                *(abort(d.replica, d.request_id) for d in in_flight.values()),
                return_exceptions=True,
            )
        )
        raise
