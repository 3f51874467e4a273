"""Drafting from a mixture of the group's automaton and the request's own-text automaton.

Invariant: both automata follow the same text (the request's context, then the drafted path):
each keeps the state and length of the longest suffix of that text it knows (suffix links on a
miss), so the two estimates always condition on the same history. A candidate is ranked by
(1 - w) * P_group + w * P_own (both ``speculate.blend`` estimates; w = ``own_weight``, scaled
down by own match length / group match length when the own match is the shorter); its path
probability, which orders the best-first growth and meets ``min_token_prob``, multiplies the
larger of the two, so a path continues while either source is confident. Siblings dilute a
request's own repetitions in the group counts; the own automaton restores them.
"""

from __future__ import annotations

import heapq

from core.drafting.automaton import ROOT, SuffixAutomaton
from core.drafting.draft import EMPTY_DRAFT, Draft
from core.drafting.speculate import SpeculationParams, blend, grow_tree, match_state


def advance(sam: SuffixAutomaton, state: int, length: int, token: int) -> tuple[int, int]:
    """Match (state, length) of text + ``token``, given the match of text: the state and length
    of the longest suffix that ``sam`` contains (SAM matching: suffix links on a miss)."""
    nxt = sam.transitions
    link = sam.links
    while state != -1 and token not in nxt[state]:
        state = link[state]
        length = sam.length(state) if state != -1 else 0
    if state == -1:
        return ROOT, 0
    return nxt[state][token], length + 1


def speculate_mixed(
    group: SuffixAutomaton,
    group_end: int,
    own: SuffixAutomaton,
    own_end: int,
    params: SpeculationParams,
) -> Draft:
    """Draft for the text ending at ``group_end`` in ``group`` and at ``own_end`` in ``own``."""
    if params.max_draft == 0:
        return EMPTY_DRAFT
    start = match_state(group, group_end)
    w = params.own_weight
    min_p = params.min_token_prob
    backoff = params.backoff
    smoothing = params.smoothing
    width = params.width
    Match = tuple[int, int]

    def expand(
        state: tuple[Match, Match], path_p: float
    ) -> list[tuple[float, int, tuple[Match, Match]]]:
        g_match, o_match = state
        pg, _ = blend(group, g_match[0], backoff, smoothing)
        po, _ = blend(own, o_match[0], backoff, smoothing)
        # the own text counts as much as its match is specific: a shorter own match than the
        # group's gets a proportionally smaller weight (none for an own match of length 0)
        w_eff = w * min(1.0, o_match[1] / max(1, g_match[1]))
        mix = {t: (1.0 - w_eff) * p for t, p in pg.items()}
        for t, p in po.items():
            mix[t] = mix.get(t, 0.0) + w_eff * p
        out = []
        for _, t in heapq.nlargest(width, [(p, t) for t, p in mix.items()]):
            pp = path_p * max(pg.get(t, 0.0), po.get(t, 0.0) if w_eff > 0.0 else 0.0)
            if pp < min_p:  # ranked by the mix, not by pp: keep looking
                continue
            nxt_g = advance(group, g_match[0], g_match[1], t)
            nxt_o = advance(own, o_match[0], o_match[1], t)
            out.append((pp, t, (nxt_g, nxt_o)))
        return out

    o_state = match_state(own, own_end)
    first = ((start, group.length(start)), (o_state, own.length(o_state)))
    tokens, parents, probs = grow_tree(expand, first, params.max_draft)
    return Draft(tuple(tokens), tuple(parents), tuple(probs), group.length(start))
