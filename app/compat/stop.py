"""Stop strings applied to a finished response.

Invariant: a response cut at a stop string keeps the shortest token prefix whose text contains
the earliest occurrence of any stop string, and its text ends right before that occurrence
(``keep_stop``: right after it). Engines generate in chunks without stop strings, so a stop
string is found here, over the whole response, whichever chunks its tokens came from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


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
