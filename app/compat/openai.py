"""``POST /v1/completions``: the OpenAI completions subset RL trainers use, as one job.

Each prompt is one group of ``n`` choices (choice ``i * n + j`` is response j of prompt i);
requests sent one at a time join one group with ``group_key`` (``extra_body`` in the OpenAI
client). Token in, token out: every choice carries its ``token_ids`` and the ``policy_version``
of the weights that sampled it; ``logprobs`` (any value 0-5) returns the sampled token's logprob
at every position (``top_logprobs`` holds only the sampled token: engines return no
alternatives); ``return_tokens_as_token_ids`` names tokens ``token_id:<id>`` as vLLM does.
"""

from __future__ import annotations

from collections.abc import Callable

from app.api import (
    Choice,
    ChoiceLogprobs,
    CompletionRequest,
    CompletionResponse,
    GroupResult,
    Usage,
)
from app.compat.stop import cut_at_stop


def completion_response(
    req: CompletionRequest,
    groups: list[GroupResult],
    job_id: str,
    model: str,
    created: int,
    decode: Callable[[list[int]], str],
) -> CompletionResponse:
    """The OpenAI answer for a finished job (groups in prompt order); blocking (detokenizes)."""
    choices: list[Choice] = []
    stops = req.stops()
    prompt_tokens = 0
    for g in groups:
        prompt_tokens += len(g.prompt_token_ids)  # once per prompt, as vLLM counts
        for r in g.responses:
            cut = cut_at_stop(r.token_ids, r.logprobs, decode(r.token_ids), stops, decode)
            lp = None
            if req.logprobs is not None and cut.logprobs is not None:
                lp = _logprobs(cut.token_ids, cut.logprobs, req.return_tokens_as_token_ids, decode)
            choices.append(
                Choice(
                    index=g.prompt_index * req.n + r.index,
                    text=cut.text,
                    logprobs=lp,
                    finish_reason="stop" if cut.matched is not None else r.finish_reason,
                    stop_reason=cut.matched,
                    token_ids=cut.token_ids,
                    prompt_token_ids=g.prompt_token_ids,
                    policy_version=r.policy_version,
                    logprobs_mode=r.logprobs_mode,
                )
            )
    completion = sum(len(c.token_ids) for c in choices)
    return CompletionResponse(
        id=f"cmpl-{job_id}",
        created=created,
        model=model,
        choices=choices,
        usage=Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion,
            total_tokens=prompt_tokens + completion,
        ),
        policy_version=max((c.policy_version for c in choices), default=0),
    )


def _logprobs(
    token_ids: list[int],
    logprobs: list[float],
    as_ids: bool,
    decode: Callable[[list[int]], str],
) -> ChoiceLogprobs:
    pieces = [decode([t]) for t in token_ids]  # each token's text, decoded once
    names = [f"token_id:{t}" for t in token_ids] if as_ids else pieces
    offsets: list[int] = []
    at = 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    return ChoiceLogprobs(
        tokens=names,
        token_logprobs=list(logprobs),
        top_logprobs=[{n: lp} for n, lp in zip(names, logprobs, strict=True)],
        text_offset=offsets,
    )
