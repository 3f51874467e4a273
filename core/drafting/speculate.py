"""Drafting from a suffix automaton state: single path and top-W multi-path trees.

Invariant: a draft continues the longest suffix of the request's context that occurs somewhere
in the group with a continuation (found by walking suffix links from the request's own end
state). A candidate token's probability at a draft node is its continuation count over the
node's total (SuffixDecoding's child count / node count), blended PPM-style (Witten-Bell) with
the same estimate at up to ``backoff`` shorter contexts (the suffix-link chain); ``backoff=0``
is SuffixDecoding's estimate. Own-text scoring (when the caller names the request's source bits
``own``): a candidate the request's own text has already shown after the matched context ranks
``1 + own_boost`` times higher, and one seen only in siblings counts ``sibling_discount`` times
its estimate in the path probability (siblings are other samples: their continuations are
accepted about half as often as their counts say). A node is kept only while its path
probability is >= ``min_token_prob``. Trees grow best-first by path probability (ties: older
first), at most ``width`` children per node and ``max_draft`` nodes in all, so width 1 is the
highest-ranked path, one node at a time. Short contexts with many continuations are read from
the automaton's cached top list (counts at most 5% stale), so one draft node costs O(16)
whatever the group's vocabulary.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from core.drafting.automaton import ROOT, WIDE_STATE, SuffixAutomaton
from core.drafting.draft import EMPTY_DRAFT, Draft

S = TypeVar("S")  # a drafting state: an automaton state, or a pair of matches

MAX_DRAFT_TOKENS = 64
MAX_WIDTH = 16
MAX_BACKOFF = 8
# Candidates a wide shorter context (cached top list) adds besides re-weighting deeper ones.
NEW_FROM_WIDE = 4


@dataclass(frozen=True, slots=True)
class SpeculationParams:
    """What one speculation may return, and how candidates are scored."""

    max_draft: int = 8  # draft tokens in all (tree nodes), 0..MAX_DRAFT_TOKENS; 0 = no draft
    width: int = 1  # children kept per node, 1..MAX_WIDTH; 1 = single path
    # stop a path once its probability falls below, in [0, 1]. SuffixDecoding uses 0.1 on raw
    # counts; with own-text scoring (sibling-only continuations discounted) 0.01 drafts about
    # as many tokens per step as raw counts at 0.1 do on the recorded rollouts (docs/drafting.md)
    min_token_prob: float = 0.01
    # shorter contexts blended in, 0..MAX_BACKOFF; 0 = SuffixDecoding counts. 2 gains <0.01
    # acceptance length over 1 on the recorded rollouts for ~30% more draft time
    backoff: int = 1
    smoothing: float = 1.0  # Witten-Bell escape weight per distinct continuation, in (0, 100]
    # weight of the request's own-text automaton mixed into the ranking, in [0, 1]; 0 = the
    # group automaton alone (needs an index built with own_index=True when > 0; mixed.py)
    own_weight: float = 0.0
    # own-text scoring, used when the caller passes the request's source bits (``own``):
    # ranking weight 1 + own_boost for a continuation the request's own text has shown after
    # the same context, in [0, 100]; 0 = rank by the estimate alone
    own_boost: float = 2.0
    # factor on the estimate of a continuation seen only in siblings when it enters the path
    # probability, in (0, 1]; 1 = no discount (measured acceptance is ~0.4-0.7 of the estimate)
    sibling_discount: float = 0.6

    def __post_init__(self) -> None:
        if not 0 <= self.max_draft <= MAX_DRAFT_TOKENS:
            raise ValueError(f"max_draft must be in [0, {MAX_DRAFT_TOKENS}], got {self.max_draft}")
        if not 1 <= self.width <= MAX_WIDTH:
            raise ValueError(f"width must be in [1, {MAX_WIDTH}], got {self.width}")
        if not 0.0 <= self.min_token_prob <= 1.0:
            raise ValueError(f"min_token_prob must be in [0, 1], got {self.min_token_prob}")
        if not 0 <= self.backoff <= MAX_BACKOFF:
            raise ValueError(f"backoff must be in [0, {MAX_BACKOFF}], got {self.backoff}")
        if not (0.0 < self.smoothing <= 100.0) or math.isnan(self.smoothing):
            raise ValueError(f"smoothing must be in (0, 100], got {self.smoothing}")
        if not (0.0 <= self.own_weight <= 1.0) or math.isnan(self.own_weight):
            raise ValueError(f"own_weight must be in [0, 1], got {self.own_weight}")
        if not (0.0 <= self.own_boost <= 100.0) or math.isnan(self.own_boost):
            raise ValueError(f"own_boost must be in [0, 100], got {self.own_boost}")
        if not (0.0 < self.sibling_discount <= 1.0) or math.isnan(self.sibling_discount):
            raise ValueError(f"sibling_discount must be in (0, 1], got {self.sibling_discount}")

    @property
    def scores_own_text(self) -> bool:
        """Whether own-text scoring changes anything (a boost or a discount is set)."""
        return self.own_boost > 0.0 or self.sibling_discount < 1.0


def match_state(sam: SuffixAutomaton, end_state: int) -> int:
    """Deepest state on the suffix-link chain of ``end_state`` that has a continuation."""
    v = end_state
    while v != ROOT and not sam.children(v):
        v = sam.link(v)
    return v


def _counts_only(sam: SuffixAutomaton, state: int, width: int) -> list[tuple[float, int, int]]:
    """Top-``width`` (probability, token, next state) by plain continuation counts."""
    pairs, total, _ = sam.continuations(state)
    if not pairs:
        return []
    kids = sam.children(state)
    top = [max(pairs)] if width == 1 else heapq.nlargest(width, pairs)
    return [(c / total, t, kids[t]) for c, t in top]


def blend(
    sam: SuffixAutomaton, state: int, backoff: int, smoothing: float
) -> tuple[dict[int, float], dict[int, int]]:
    """Candidate probabilities by Witten-Bell blending over ``state`` and shorter contexts.

    Level j (j=0 is ``state``) gets the mass the deeper levels escaped, times
    lambda_j = N_j / (N_j + smoothing * T_j) (N: continuation count, T: distinct tokens); the
    last level keeps all the rest (``backoff=0``: plain counts at ``state``). Returns
    token -> probability and token -> next state (that of the token's deepest level). A wide
    shorter context only re-weights the deeper candidates and adds its top few.
    """
    cnt = sam.counts
    nxt = sam.transitions
    link = sam.links
    probs: dict[int, float] = {}
    states: dict[int, int] = {}
    rest = 1.0
    level = state
    for depth in range(backoff + 1):
        kids = nxt[level]
        if len(kids) <= WIDE_STATE:
            n = 0
            for u in kids.values():
                n += cnt[u]
            if n:
                lam = 1.0 if depth == backoff else n / (n + smoothing * len(kids))
                w = rest * lam / n
                for t, u in kids.items():
                    if t in probs:
                        probs[t] += w * cnt[u]
                    else:
                        probs[t] = w * cnt[u]
                        states[t] = u
                rest -= rest * lam
        else:
            pairs, n, distinct = sam.continuations(level)
            lam = 1.0 if depth == backoff else n / (n + smoothing * distinct)
            w = rest * lam / n
            if depth:  # a wide shorter context re-weights the deeper candidates, adds a few
                for t in probs:
                    hit = kids.get(t)
                    if hit is not None:
                        probs[t] += w * cnt[hit]
                for c, t in pairs[:NEW_FROM_WIDE]:
                    if t not in probs:
                        probs[t] = w * c
                        states[t] = kids[t]
            else:
                for c, t in pairs:
                    probs[t] = w * c
                    states[t] = kids[t]
            rest -= rest * lam
        if level == ROOT:
            break
        level = link[level]
    return probs, states


def _blended(
    sam: SuffixAutomaton, state: int, width: int, backoff: int, smoothing: float
) -> list[tuple[float, int, int]]:
    """Top-``width`` (probability, token, next state) by ``blend``."""
    probs, states = blend(sam, state, backoff, smoothing)
    if not probs:
        return []
    if width == 1:
        t = max(probs, key=probs.__getitem__)
        return [(probs[t], t, states[t])]
    top = heapq.nlargest(width, [(p, t) for t, p in probs.items()])
    return [(p, t, states[t]) for p, t in top]


def _own_scored(
    sam: SuffixAutomaton, state: int, params: SpeculationParams, own: int
) -> list[tuple[float, int, int]]:
    """Top-``width`` (path-probability factor, token, next state) by own-text scoring.

    Ranked by estimate x (1 + own_boost) for a continuation of ``state`` whose next state has
    one of the ``own`` source bits (the request's own text has shown it after the matched
    context; a candidate only a shorter backed-off context has is never "own": counting those
    measured worse); the factor is the estimate, times ``sibling_discount`` for the others.
    Ties keep the blend's order.
    """
    probs, states = blend(sam, state, params.backoff, params.smoothing)
    if not probs:
        return []
    src = sam.sources
    kids = sam.transitions[state]
    boost = 1.0 + params.own_boost
    disc = params.sibling_discount
    if params.width == 1:
        best_t = -1
        best_rank = best_p = -1.0
        for t, p in probs.items():
            if t in kids and src[kids[t]] & own:
                rank = p * boost
                if rank > best_rank:
                    best_t, best_rank, best_p = t, rank, p
            elif p > best_rank:
                best_t, best_rank, best_p = t, p, p * disc
        return [(best_p, best_t, states[best_t])]
    ranked = []
    for t, p in probs.items():
        if t in kids and src[kids[t]] & own:
            ranked.append((p * boost, p, t))
        else:
            ranked.append((p, p * disc, t))
    return [(p, t, states[t]) for _, p, t in heapq.nlargest(params.width, ranked)]


def grow_tree(
    expand: Callable[[S, float], Iterable[tuple[float, int, S]]], start: S, limit: int
) -> tuple[list[int], list[int], list[float]]:
    """Best-first draft tree: (tokens, parent indices, path probabilities).

    Invariant: the tree grows one node at a time, always the frontier node with the highest
    path probability (ties: the earlier created); ``expand(state, path_prob)`` yields the
    children worth keeping as (path probability, token, child state).
    """
    tokens: list[int] = []
    parents: list[int] = []
    probs: list[float] = []
    # frontier: (-path_prob, creation order, parent index, token, state)
    heap: list[tuple[float, int, int, int, S]] = []
    seq = 0
    parent = -1
    path_p = 1.0
    state = start
    while True:
        for pp, t, u in expand(state, path_p):
            heapq.heappush(heap, (-pp, seq, parent, t, u))
            seq += 1
        if not heap:
            break
        neg_p, _, grand, t, state = heapq.heappop(heap)
        parent = len(tokens)
        path_p = -neg_p
        tokens.append(t)
        parents.append(grand)
        probs.append(path_p)
        if len(tokens) >= limit:
            break
    return tokens, parents, probs


def speculate(
    sam: SuffixAutomaton, end_state: int, params: SpeculationParams, own: int | None = None
) -> Draft:
    """Draft up to ``params.max_draft`` tokens continuing the text that ends at ``end_state``.

    ``own``: the source bits of the request's own text (``SuffixAutomaton.extend``), which
    turns on own-text scoring; None = no source information (plain estimates; every text is
    the request's own, as in per-request suffix decoding).
    """
    if params.max_draft == 0:
        return EMPTY_DRAFT
    start = match_state(sam, end_state)
    min_p = params.min_token_prob
    width = params.width
    backoff = params.backoff
    smoothing = params.smoothing
    own_bits = own if own is not None and params.scores_own_text else None

    def expand(state: int, path_p: float) -> list[tuple[float, int, int]]:
        if own_bits is not None:
            # ranked by own-text scoring, not by p: a factor under the cut skips one candidate
            out = []
            for p, t, u in _own_scored(sam, state, params, own_bits):
                pp = path_p * p
                if pp >= min_p:
                    out.append((pp, t, u))
            return out
        if backoff:
            ranked = _blended(sam, state, width, backoff, smoothing)
        else:
            ranked = _counts_only(sam, state, width)
        out = []
        for p, t, u in ranked:  # ranked by p: the first one under the cut ends the list
            pp = path_p * p
            if pp < min_p:
                break
            out.append((pp, t, u))
        return out

    tokens, parents, probs = grow_tree(expand, start, params.max_draft)
    return Draft(tuple(tokens), tuple(parents), tuple(probs), sam.length(start))
