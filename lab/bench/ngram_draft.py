"""Prompt-lookup (n-gram) drafting on a request's own context, like vLLM's ``ngram`` method.

Invariant: for n from ``max_n`` down to ``min_n``, the last n tokens of the context are searched
for an earlier occurrence (the earliest one wins, as in vLLM); the draft is the up to
``max_tokens`` tokens that followed it. No match at any n means no draft.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.drafting.draft import EMPTY_DRAFT, Draft


def ngram_draft(context: Sequence[int], max_tokens: int, min_n: int = 2, max_n: int = 4) -> Draft:
    """Draft by prompt lookup; ``context`` is prompt + generated tokens."""
    if not 1 <= min_n <= max_n:
        raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    n_ctx = len(context)
    if max_tokens == 0:
        return EMPTY_DRAFT
    ctx = list(context)
    for n in range(min(max_n, n_ctx - 1), min_n - 1, -1):
        pattern = ctx[n_ctx - n :]
        first = pattern[0]
        # earliest start i < n_ctx - n with ctx[i:i+n] == pattern
        i = -1
        while True:
            try:
                i = ctx.index(first, i + 1, n_ctx - n)
            except ValueError:
                break
            if ctx[i : i + n] == pattern:
                follow = ctx[i + n : i + n + max_tokens]
                if follow:
                    k = len(follow)
                    return Draft(tuple(follow), tuple(range(-1, k - 1)), (1.0,) * k, n)
    return EMPTY_DRAFT
