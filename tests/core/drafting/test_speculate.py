from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.drafting.automaton import ROOT, SuffixAutomaton
from core.drafting.group import GroupIndex
from core.drafting.recorded import RecordedGroup
from core.drafting.speculate import SpeculationParams, match_state, speculate
from core.drafting.store import DraftStore
from lab.bench.draft_replay import replay_lockstep


def _sam(*texts: list[int]) -> tuple[SuffixAutomaton, list[int]]:
    sam = SuffixAutomaton()
    ends = [sam.extend_all(ROOT, t) for t in texts]
    return sam, ends


def test_single_path_follows_the_most_frequent_continuation():
    # "1 2" is followed by 3 three times and by 4 once; the query text ends in "1 2"
    sam, ends = _sam([1, 2, 3, 1, 2, 3, 1, 2, 3, 5, 1, 2, 4, 8], [6, 1, 2])
    d = speculate(sam, ends[1], SpeculationParams(max_draft=3, min_token_prob=0.0, backoff=0))
    assert d.tokens[0] == 3
    assert d.probs[0] == pytest.approx(3 / 4)
    assert d.match_length == 2
    assert d.is_path
    assert list(d.probs) == sorted(d.probs, reverse=True)


def test_min_token_prob_cuts_the_path():
    sam, ends = _sam([1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2, 6], [1, 2])
    loose = speculate(sam, ends[1], SpeculationParams(max_draft=4, min_token_prob=0.0, backoff=0))
    strict = speculate(sam, ends[1], SpeculationParams(max_draft=4, min_token_prob=0.3, backoff=0))
    assert len(loose) >= 1 and loose.probs[0] == pytest.approx(0.25)
    assert len(strict) == 0


def test_tree_keeps_top_width_branches_best_first():
    # after "1 2": 3 (2/4), 4 (1/4), 5 (1/4); after "1 2 3": 7 or 8 (1/2 each)
    sam, ends = _sam([1, 2, 3, 7, 1, 2, 3, 8, 1, 2, 4, 9, 1, 2, 5, 6], [1, 2])
    tree = speculate(
        sam, ends[1], SpeculationParams(max_draft=3, width=2, min_token_prob=0.0, backoff=0)
    )
    assert not tree.is_path
    # best first: 3 (p .5), then a second root child (p .25, created before 3's children),
    # then one of 3's children (p .25); width 2 keeps only two of the three root options
    roots = [t for t, p in zip(tree.tokens, tree.parents, strict=True) if p == -1]
    assert roots[0] == 3 and len(roots) == 2 and roots[1] in (4, 5)
    assert tree.tokens[2] in (7, 8) and tree.parents[2] == 0
    assert tree.probs == pytest.approx((0.5, 0.25, 0.25))
    assert all(p < i for i, p in enumerate(tree.parents))
    path = speculate(
        sam, ends[1], SpeculationParams(max_draft=3, width=1, min_token_prob=0.0, backoff=0)
    )
    assert path.is_path and path.tokens[0] == 3


def test_blended_probabilities_computed_by_hand():
    # query "1 2"; texts 5 1 2 3 | 6 2 7 | 6 2 7.  Witten-Bell, backoff 2, smoothing 1:
    #  "1 2": {3:1}, N=1, T=1 -> lambda .5: P(3) = .5
    #  "2":   {3:1, 7:2}, N=3, T=2 -> lambda .6 of the remaining .5: P(3) += .3/3, P(7) = .3*2/3
    #  root:  12 tokens, keeps the remaining .2: P(3) += .2/12, P(7) += .2*2/12, P(2) = .2*4/12
    # the node after 3 ends text 1: only the root (lambda 12/18) predicts, P(2) = 2/3 * 4/12
    sam, ends = _sam([5, 1, 2, 3], [6, 2, 7], [6, 2, 7], [1, 2])
    d = speculate(
        sam, ends[3], SpeculationParams(max_draft=3, width=3, min_token_prob=0.0, backoff=2)
    )
    p3 = 0.5 + 0.3 / 3 + 0.2 / 12
    assert d.tokens == (3, 7, 2) and d.parents == (-1, -1, 0)
    assert d.probs == pytest.approx((p3, 0.2 + 0.2 * 2 / 12, p3 * (2 / 3) * (4 / 12)))
    plain = speculate(sam, ends[3], SpeculationParams(max_draft=3, width=3, backoff=0))
    assert plain.tokens == (3,) and plain.probs == (1.0,)  # SuffixDecoding: 3 is certain


def test_zero_budget_and_empty_automaton():
    sam, ends = _sam([1, 2, 1])
    assert len(speculate(sam, ends[0], SpeculationParams(max_draft=0))) == 0
    empty = SuffixAutomaton()
    assert len(speculate(empty, ROOT, SpeculationParams())) == 0
    assert match_state(empty, ROOT) == ROOT


def test_defaults():
    p = SpeculationParams()
    assert (p.max_draft, p.width, p.min_token_prob, p.backoff, p.smoothing) == (8, 1, 0.01, 1, 1.0)
    assert (p.own_weight, p.own_boost, p.sibling_discount) == (0.0, 2.0, 0.6)
    assert p.scores_own_text
    assert not SpeculationParams(own_boost=0.0, sibling_discount=1.0).scores_own_text


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"max_draft": -1}, "max_draft must be in \\[0, 64\\], got -1"),
        ({"max_draft": 65}, "got 65"),
        ({"width": 0}, "width must be in \\[1, 16\\], got 0"),
        ({"min_token_prob": 1.5}, "min_token_prob must be in \\[0, 1\\], got 1.5"),
        ({"backoff": 9}, "backoff must be in \\[0, 8\\], got 9"),
        ({"smoothing": 0.0}, "smoothing must be in \\(0, 100\\], got 0.0"),
    ],
)
def test_params_validation(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        SpeculationParams(**kwargs)


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=30), min_size=1, max_size=4),
    max_tokens=st.integers(0, 12),
    width=st.integers(1, 4),
    min_p=st.sampled_from([0.0, 0.05, 0.3]),
    backoff=st.integers(0, 3),
    smoothing=st.sampled_from([0.5, 1.0, 4.0]),
)
def test_every_draft_is_a_well_formed_tree(texts, max_tokens, width, min_p, backoff, smoothing):
    sam, ends = _sam(*texts)
    params = SpeculationParams(
        max_draft=max_tokens,
        width=width,
        min_token_prob=min_p,
        backoff=backoff,
        smoothing=smoothing,
    )
    d = speculate(sam, ends[-1], params)
    assert len(d) <= max_tokens
    kids: dict[int, list[int]] = {}
    for t, p, pr in zip(d.tokens, d.parents, d.probs, strict=True):
        assert min_p <= pr <= 1.0 + 1e-12
        if p >= 0:
            assert pr <= d.probs[p] + 1e-12  # path probability never grows
        kids.setdefault(p, []).append(t)
    for siblings in kids.values():
        assert len(siblings) <= width and len(set(siblings)) == len(siblings)
    # a draft's root candidates exist as continuations somewhere in the group
    for t, p in zip(d.tokens, d.parents, strict=True):
        if p == -1:
            assert sam.find([t]) is not None


# SuffixDecoding counts without own-text scoring, for comparisons
PLAIN = {"backoff": 0, "min_token_prob": 0.0, "own_boost": 0.0, "sibling_discount": 1.0}


def _own_vs_sibling() -> GroupIndex:
    # after "1 2": 3 once (a's own text), 4 twice (b); a's text ends in "3 1 2", which has no
    # continuation yet: a's match is "1 2" (b's is "1 2 4 1 2", its own repetition)
    idx = GroupIndex("g", [9])
    idx.add_tokens("a", [1, 2, 3, 1, 2])
    idx.add_tokens("b", [1, 2, 4, 1, 2, 4, 1, 2])
    return idx


def test_own_continuation_outranks_a_more_frequent_sibling_one():
    idx = _own_vs_sibling()
    plain = idx.speculate("a", SpeculationParams(max_draft=1, **PLAIN))
    assert plain.tokens == (4,) and plain.probs[0] == pytest.approx(2 / 3)
    # own-text scoring: 3 ranks 1/3 * (1 + 2) = 1 over 4's 2/3, and keeps its estimate
    own = idx.speculate("a", SpeculationParams(max_draft=1, backoff=0, min_token_prob=0.0))
    assert own.tokens == (3,) and own.probs[0] == pytest.approx(1 / 3)
    assert own.match_length == plain.match_length == 2
    # b matches "1 2 4 1 2", followed by 4 in its own text only: certain, undiscounted
    b = idx.speculate("b", SpeculationParams(max_draft=1, backoff=0, min_token_prob=0.0))
    assert b.tokens == (4,) and b.probs[0] == 1.0 and b.match_length == 5
    # a boost of 0 ranks by the estimate alone
    no_boost = idx.speculate(
        "a", SpeculationParams(max_draft=1, backoff=0, min_token_prob=0.0, own_boost=0.0)
    )
    assert no_boost.tokens == (4,) and no_boost.probs[0] == pytest.approx(2 / 3 * 0.6)


def test_sibling_only_continuations_are_discounted_in_the_path_probability():
    idx = _own_vs_sibling()
    # a request with no tokens yet drafts from the prompt "9": everything came from siblings
    params = SpeculationParams(max_draft=2, backoff=0, min_token_prob=0.0)
    d = idx.speculate("new", params)
    assert d.tokens == (1, 2) and d.probs == pytest.approx((0.6, 0.36))
    # the cut applies to the discounted probability: 0.6 passes 0.5, 0.36 does not
    cut = idx.speculate("new", SpeculationParams(max_draft=2, backoff=0, min_token_prob=0.5))
    assert cut.tokens == (1,)
    undiscounted = idx.speculate("new", SpeculationParams(max_draft=2, **PLAIN))
    assert undiscounted.probs == (1.0, 1.0)
    # no source information (a plain automaton): plain estimates whatever the params say
    sam, ends = _sam([1, 2, 3, 1, 2, 4, 1, 2, 4], [1, 2])
    bare = speculate(sam, ends[1], SpeculationParams(max_draft=1, backoff=0))
    assert bare.tokens == (4,) and bare.probs[0] == pytest.approx(2 / 3)


def test_tree_keeps_own_continuations_and_discounts_the_others():
    idx = _own_vs_sibling()
    # width 1 keeps the own 3; width 2 keeps both, grown best-first by path probability
    one = idx.speculate("a", SpeculationParams(max_draft=2, width=1, backoff=0))
    assert one.tokens[0] == 3
    tree = idx.speculate("a", SpeculationParams(max_draft=2, width=2, backoff=0))
    assert tree.tokens == (4, 3) and tree.parents == (-1, -1)
    assert tree.probs == pytest.approx((2 / 3 * 0.6, 1 / 3))


def test_store_single_path_default_is_own_text_scoring():
    # what the engine's proposer calls: DraftStore.speculate(group, request, params of k, width 1)
    store = DraftStore()
    store.register_group("g", [9])
    store.add_tokens("g", "a", [1, 2, 3, 1, 2])
    store.add_tokens("g", "b", [1, 2, 4, 1, 2, 4, 1, 2])
    assert store.speculate("g", "a", SpeculationParams(max_draft=1, width=1)).tokens == (3,)
    assert store.speculate("g", "a", SpeculationParams(max_draft=1, own_boost=0.0)).tokens == (4,)
    assert [d.tokens for d in store.batch_speculate([("g", "a", 1), ("g", "b", 1)])] == [
        (3,),
        (4,),
    ]


def test_own_text_scoring_is_right_where_greedy_follows_the_siblings():
    # a repeats "1 2 3 x", its siblings "1 2 4 x" (x differs each time, so the match after a
    # new "x 1 2" is "1 2", where 4 outnumbers 3 two to one): lockstep, one path of 4 tokens
    a = (1, 2, 3, 5, 1, 2, 3, 6, 1, 2, 3, 7, 1, 2, 3, 8)
    b = (1, 2, 4, 5, 1, 2, 4, 6, 1, 2, 4, 7, 1, 2, 4, 8)
    group = RecordedGroup("rep", (9,), (a, b, b))
    own = replay_lockstep(group, ["grouped"], [4], SpeculationParams())["grouped"][4]
    greedy = replay_lockstep(
        group, ["grouped"], [4], SpeculationParams(own_boost=0.0, sibling_discount=1.0)
    )["grouped"][4]
    assert own.tokens == greedy.tokens == 48
    assert own.steps < greedy.steps


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"own_boost": -0.5}, "own_boost must be in \\[0, 100\\], got -0.5"),
        ({"own_boost": float("nan")}, "own_boost must be in"),
        ({"sibling_discount": 0.0}, "sibling_discount must be in \\(0, 1\\], got 0.0"),
        ({"sibling_discount": 1.5}, "got 1.5"),
    ],
)
def test_own_text_params_are_validated(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        SpeculationParams(**kwargs)
