"""What the trainer dialects (``openai``, ``sglang``) share: the native job a dialect's request
becomes, where a native field's error is in the dialect's own fields, and stop strings.

Invariant of the stop strings: a response cut at a stop string keeps the shortest token prefix
whose text contains the earliest occurrence of any stop string, and its text ends right before
that occurrence (``keep_stop``: right after it). Engines generate in chunks without stop strings,
so a stop string is found here, over the whole response, whichever chunks its tokens came from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from app.api.native import RolloutRequest
from core.engine import SamplingParams


def native_rollout(
    prompts: list[str | list[int]],
    *,
    group_size: int,
    max_tokens: int,
    sampling: SamplingParams,
    logprobs: bool,
    group_key: str | None,
    prompt_id: str | None,
) -> RolloutRequest:
    """One group per prompt, answered when done; prompts are used as they are (no chat
    template). ValueError naming the field when ``group_key`` or ``prompt_id`` is given with
    more than one prompt (``RolloutRequest`` checks ``group_key``)."""
    if prompt_id is not None and len(prompts) != 1:
        raise ValueError(f"prompt_id needs exactly one prompt; got {len(prompts)}")
    return RolloutRequest(
        prompts=prompts,
        prompt_ids=[prompt_id] if prompt_id is not None else None,
        group_size=group_size,
        max_tokens=max_tokens,
        sampling=sampling,
        logprobs=logprobs,
        chat_template=False,
        group_key=group_key,
        wait=True,
    )


Loc = list[str | int]


def own_loc(loc: Sequence[str | int], names: Mapping[str, Loc], prompt: str, batched: bool) -> Loc:
    """The location, in a trainer request, of what ``loc`` names in the native job it became:
    ``names`` maps a native field (or ``sampling.<field>``) to the request's own; a prompt
    (``prompts``, index) is ``prompt`` itself, or its index when the request sent a list."""
    if not loc:
        return []
    head, rest = str(loc[0]), list(loc[1:])
    if head == "prompts":
        return [prompt, *rest] if batched else [prompt, *rest[1:]]
    if head == "sampling" and rest:
        return [*names.get(f"sampling.{rest[0]}", [head, *rest[:1]]), *rest[1:]]
    return [*names.get(head, [head]), *rest]


@dataclass(frozen=True)
class StopCut:
    token_ids: list[int]
    logprobs: list[float] | None
    text: str
    matched: str | None  # the stop string found (None: no cut)


def cut_at_stop(
    token_ids: Sequence[int],
    logprobs: Sequence[float] | None,
    text: str,
    stop: Sequence[str],
    decode: Callable[[list[int]], str],
    keep_stop: bool = False,
) -> StopCut:
    """``text`` is ``decode(token_ids)``; see the module invariant."""
    hits = [(text.find(s), s) for s in stop if s and s in text]
    if not hits:
        return StopCut(list(token_ids), None if logprobs is None else list(logprobs), text, None)
    pos, matched = min(hits)
    lo, hi = 1, len(token_ids)  # smallest k whose decoded prefix holds the stop string
    while lo < hi:
        mid = (lo + hi) // 2
        if matched in decode(list(token_ids[:mid])):
            hi = mid
        else:
            lo = mid + 1
    end = pos + len(matched) if keep_stop else pos
    return StopCut(
        list(token_ids[:lo]),
        None if logprobs is None else list(logprobs[:lo]),
        text[:end],
        matched,
    )


def cut_at_stop_token(
    token_ids: Sequence[int], logprobs: Sequence[float] | None, stop_ids: Sequence[int]
) -> tuple[list[int], list[float] | None, int | None]:
    """The response up to and including the first token in ``stop_ids`` (and that token;
    None: no cut)."""
    stops = set(stop_ids)
    for i, t in enumerate(token_ids):
        if t in stops:
            return (
                list(token_ids[: i + 1]),
                None if logprobs is None else list(logprobs[: i + 1]),
                t,
            )
    return list(token_ids), None if logprobs is None else list(logprobs), None
