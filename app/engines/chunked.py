"""One response generated chunk by chunk on one engine, as the service's dispatcher chunks it
(for engine-level tools: ``seer exactness``, ``lab.bench.speculation_methods``).

Invariant: chunk k continues exactly where chunk k-1 stopped (``generated_token_ids`` = every
token so far); the response ends when a chunk finishes it (stop or length). A chunk that neither
finishes nor returns a token (an abort) is an error: the caller would loop for ever.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engines.base import ChunkEngine
from core.engine import ChunkRequest, SamplingParams


@dataclass(slots=True)
class ResponseRun:
    prompt: list[int]
    tokens: list[int]
    logprobs: list[float]
    drafted: int  # draft tokens verified over all its chunks
    accepted: int


async def generate_response(
    engine: ChunkEngine,
    group_id: str,
    index: int,
    prompt: list[int],
    sampling: SamplingParams,
    max_tokens: int,
    chunk_tokens: int,
    speculate: bool = True,
) -> ResponseRun:
    """Response ``index`` of group ``group_id`` (request id ``{group_id}-{index}``; response 0
    is the group's probe)."""
    run = ResponseRun(prompt, [], [], 0, 0)
    while True:
        res = await engine.run_chunk(
            ChunkRequest(
                request_id=f"{group_id}-{index}",
                group_id=group_id,
                response_index=index,
                prompt_token_ids=prompt,
                generated_token_ids=run.tokens,
                chunk_cap=chunk_tokens,
                max_tokens=max_tokens,
                sampling=sampling,
                is_probe=index == 0,
                speculate=speculate,
            )
        )
        run.tokens = run.tokens + res.token_ids
        run.logprobs += res.logprobs or []
        run.drafted += res.drafted_tokens
        run.accepted += res.accepted_tokens
        if res.finished:
            return run
        if not res.token_ids:
            raise RuntimeError(f"{group_id}-{index}: a chunk ended {res.finish_reason} empty")
