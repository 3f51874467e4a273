"""Drafting from a suffix automaton state: single path and top-W multi-path trees.

Invariant: a draft continues the longest suffix of the request's context that occurs somewhere
in the group with a continuation (found by walking suffix links from the request's own end
state). Each candidate token's probability is its continuation count over the state's total
continuation count (SuffixDecoding's child count / node count); a node is kept only while its
path probability is >= ``min_token_prob``. Trees grow best-first by path probability, at most
``width`` children per node and ``max_tokens`` nodes in all, so a width-1 tree is the greedy
single path.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from core.drafting.automaton import ROOT, SuffixAutomaton
from core.drafting.draft import EMPTY_DRAFT, Draft

MAX_DRAFT_TOKENS = 64
MAX_WIDTH = 16


@dataclass(frozen=True, slots=True)
class SpeculationParams:
    """What one speculation may return."""

    max_tokens: int = 8  # draft tokens in all (tree nodes), 0..MAX_DRAFT_TOKENS; 0 = no draft
    width: int = 1  # children kept per node, 1..MAX_WIDTH; 1 = single path
    min_token_prob: float = 0.1  # stop a path once its probability falls below, in [0, 1]

    def __post_init__(self) -> None:
        if not 0 <= self.max_tokens <= MAX_DRAFT_TOKENS:
            raise ValueError(
                f"max_tokens must be in [0, {MAX_DRAFT_TOKENS}], got {self.max_tokens}"
            )
        if not 1 <= self.width <= MAX_WIDTH:
            raise ValueError(f"width must be in [1, {MAX_WIDTH}], got {self.width}")
        if not 0.0 <= self.min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob must be in [0, 1], got {self.min_token_prob}")


def match_state(sam: SuffixAutomaton, end_state: int) -> int:
    """Deepest state on the suffix-link chain of ``end_state`` that has a continuation."""
    v = end_state
    while v != ROOT and not sam.children(v):
        v = sam.link(v)
    return v


def _ranked(sam: SuffixAutomaton, state: int, width: int) -> tuple[list[tuple[int, int, int]], int]:
    """Top-``width`` (count, token, next_state) continuations of ``state`` and their total count."""
    kids = sam.children(state)
    cnt = sam.count
    scored = [(cnt(u), t, u) for t, u in kids.items()]
    total = 0
    for c, _, _ in scored:
        total += c
    if width == 1:
        return ([max(scored)] if scored else []), total
    return heapq.nlargest(width, scored), total


def speculate(sam: SuffixAutomaton, end_state: int, params: SpeculationParams) -> Draft:
    """Draft up to ``params.max_tokens`` tokens continuing the text that ends at ``end_state``."""
    if params.max_tokens == 0:
        return EMPTY_DRAFT
    start = match_state(sam, end_state)
    min_p = params.min_token_prob
    width = params.width
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    # frontier: (-path_prob, creation order, parent index, token, state)
    heap: list[tuple[float, int, int, int, int]] = []
    seq = 0
    parent = -1
    path_p = 1.0
    state = start
    limit = params.max_tokens
    while True:
        ranked, total = _ranked(sam, state, width)
        for c, t, u in ranked:
            p = path_p * c / total
            if p < min_p:
                break
            heapq.heappush(heap, (-p, seq, parent, t, u))
            seq += 1
        if not heap or len(tokens) >= limit:
            break
        neg_p, _, grand, t, state = heapq.heappop(heap)
        parent = len(tokens)
        path_p = -neg_p
        tokens.append(t)
        parents.append(grand)
        probs.append(path_p)
    return Draft(tuple(tokens), tuple(parents), tuple(probs), sam.length(start))
