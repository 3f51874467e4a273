from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.drafting.automaton import ROOT, SuffixAutomaton
from core.drafting.group import DraftLifecycleError, GroupIndex
from core.drafting.mixed import advance, speculate_mixed
from core.drafting.speculate import SpeculationParams
from core.drafting.store import DraftStore


def _index() -> GroupIndex:
    # request a repeats "1 2 3"; sibling b writes "1 2 4" three times
    idx = GroupIndex("g", [9], own_index=True)
    idx.add_tokens("a", [1, 2, 3, 1, 2])
    idx.add_tokens("b", [1, 2, 4, 1, 2, 4, 1, 2, 4])
    return idx


def test_own_weight_hand_computed():
    idx = _index()
    # group after "1 2": 3 once (a), 4 three times (b) -> {3: 1/4, 4: 3/4}; a's own: {3: 1}
    plain = {"min_token_prob": 0.0, "backoff": 0, "own_boost": 0.0, "sibling_discount": 1.0}
    group_only = idx.speculate("a", SpeculationParams(**plain))
    assert group_only.tokens[0] == 4 and group_only.probs[0] == pytest.approx(0.75)
    # mixed .5: 3 ranks .5 * 1/4 + .5 * 1 = .625 over 4's .375; its path probability is the
    # more confident source's (own: 1.0); then "1 2 3" -> 1 -> 2 in both, then a's end: stop
    mixed = idx.speculate("a", SpeculationParams(min_token_prob=0.0, backoff=0, own_weight=0.5))
    assert mixed.tokens == (3, 1, 2) and mixed.probs == (1.0, 1.0, 1.0)
    assert mixed.match_length == 2
    idx.check()


def test_own_weight_needs_an_own_index_and_new_requests_use_the_prompt():
    plain = GroupIndex("g", [9])
    plain.add_tokens("a", [1, 2])
    with pytest.raises(DraftLifecycleError, match="own_weight=0.5 needs an index built"):
        plain.speculate("a", SpeculationParams(own_weight=0.5))
    idx = _index()
    d = idx.speculate("new", SpeculationParams(own_weight=0.5, min_token_prob=0.0))
    assert d.tokens[0] == 1  # from the prompt "9": everyone continued with 1
    with pytest.raises(ValueError, match="own_weight must be in \\[0, 1\\], got 1.5"):
        SpeculationParams(own_weight=1.5)


def test_advance_follows_suffix_links_on_a_miss():
    sam = SuffixAutomaton()
    sam.extend_all(ROOT, [1, 2, 3, 2, 4])
    s12 = sam.find([1, 2])
    assert s12 is not None
    assert advance(sam, s12, 2, 3) == (sam.find([1, 2, 3]), 3)
    assert advance(sam, s12, 2, 4) == (sam.find([2, 4]), 2)  # "1 2 4" unseen -> "2 4"
    assert advance(sam, s12, 2, 7) == (ROOT, 0)  # never seen


def test_store_with_own_index_round_trips_and_accounts_memory():
    src = DraftStore(own_index=True)
    src.register_group("g", [5, 6])
    src.add_tokens("g", "a", [1, 2, 1, 2])
    dst = DraftStore(own_index=True)
    dst.import_delta(src.export_since("g"))
    dst.check_integrity("g")
    params = SpeculationParams(max_draft=4, width=2, own_weight=0.4, min_token_prob=0.0)
    assert dst.speculate("g", "a", params) == src.speculate("g", "a", params)
    assert src.batch_speculate([("g", "a", 4)], params) == [src.speculate("g", "a", params)]
    plain = DraftStore()
    plain.register_group("g", [5, 6])
    plain.add_tokens("g", "a", [1, 2, 1, 2])
    assert src.memory("g").approx_bytes > plain.memory("g").approx_bytes
    src.group("g")._own["a"] = (SuffixAutomaton(), 0)  # corrupt on purpose
    with pytest.raises(AssertionError, match="own automaton is not its text"):
        src.check_integrity("g")


@settings(max_examples=150, deadline=None)
@given(
    own=st.lists(st.integers(0, 4), min_size=1, max_size=25),
    other=st.lists(st.integers(0, 4), min_size=1, max_size=25),
    max_tokens=st.integers(0, 10),
    width=st.integers(1, 3),
    w=st.sampled_from([0.2, 0.5, 1.0]),
    min_p=st.sampled_from([0.0, 0.1]),
)
def test_mixed_drafts_are_well_formed_trees(own, other, max_tokens, width, w, min_p):
    group = SuffixAutomaton()
    group.extend_all(ROOT, other)
    g_end = group.extend_all(ROOT, own)
    mine = SuffixAutomaton()
    o_end = mine.extend_all(ROOT, own)
    params = SpeculationParams(
        max_draft=max_tokens, width=width, min_token_prob=min_p, own_weight=w
    )
    d = speculate_mixed(group, g_end, mine, o_end, params)
    assert len(d) <= max_tokens
    kids: dict[int, list[int]] = {}
    for t, p, pr in zip(d.tokens, d.parents, d.probs, strict=True):
        assert min_p <= pr <= 1.0 + 1e-12
        if p >= 0:
            assert pr <= d.probs[p] + 1e-12
        kids.setdefault(p, []).append(t)
    assert all(len(v) <= width and len(set(v)) == len(v) for v in kids.values())
