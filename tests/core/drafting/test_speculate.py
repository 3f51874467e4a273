from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.drafting.automaton import ROOT, SuffixAutomaton
from core.drafting.speculate import SpeculationParams, match_state, speculate


def _sam(*texts: list[int]) -> tuple[SuffixAutomaton, list[int]]:
    sam = SuffixAutomaton()
    ends = [sam.extend_all(ROOT, t) for t in texts]
    return sam, ends


def test_single_path_follows_the_most_frequent_continuation():
    # "1 2" is followed by 3 three times and by 4 once; the query text ends in "1 2"
    sam, ends = _sam([1, 2, 3, 1, 2, 3, 1, 2, 3, 5, 1, 2, 4, 8], [6, 1, 2])
    d = speculate(sam, ends[1], SpeculationParams(max_tokens=3, min_token_prob=0.0, backoff=0))
    assert d.tokens[0] == 3
    assert d.probs[0] == pytest.approx(3 / 4)
    assert d.match_length == 2
    assert d.is_path
    assert list(d.probs) == sorted(d.probs, reverse=True)


def test_min_token_prob_cuts_the_path():
    sam, ends = _sam([1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2, 6], [1, 2])
    loose = speculate(sam, ends[1], SpeculationParams(max_tokens=4, min_token_prob=0.0, backoff=0))
    strict = speculate(sam, ends[1], SpeculationParams(max_tokens=4, min_token_prob=0.3, backoff=0))
    assert len(loose) >= 1 and loose.probs[0] == pytest.approx(0.25)
    assert len(strict) == 0


def test_tree_keeps_top_width_branches_best_first():
    # after "1 2": 3 (2/4), 4 (1/4), 5 (1/4); after "1 2 3": 7 or 8 (1/2 each)
    sam, ends = _sam([1, 2, 3, 7, 1, 2, 3, 8, 1, 2, 4, 9, 1, 2, 5, 6], [1, 2])
    tree = speculate(
        sam, ends[1], SpeculationParams(max_tokens=3, width=2, min_token_prob=0.0, backoff=0)
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
        sam, ends[1], SpeculationParams(max_tokens=3, width=1, min_token_prob=0.0, backoff=0)
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
        sam, ends[3], SpeculationParams(max_tokens=3, width=3, min_token_prob=0.0, backoff=2)
    )
    p3 = 0.5 + 0.3 / 3 + 0.2 / 12
    assert d.tokens == (3, 7, 2) and d.parents == (-1, -1, 0)
    assert d.probs == pytest.approx((p3, 0.2 + 0.2 * 2 / 12, p3 * (2 / 3) * (4 / 12)))
    plain = speculate(sam, ends[3], SpeculationParams(max_tokens=3, width=3, backoff=0))
    assert plain.tokens == (3,) and plain.probs == (1.0,)  # SuffixDecoding: 3 is certain


def test_zero_budget_and_empty_automaton():
    sam, ends = _sam([1, 2, 1])
    assert len(speculate(sam, ends[0], SpeculationParams(max_tokens=0))) == 0
    empty = SuffixAutomaton()
    assert len(speculate(empty, ROOT, SpeculationParams())) == 0
    assert match_state(empty, ROOT) == ROOT


def test_defaults():
    p = SpeculationParams()
    assert (p.max_tokens, p.width, p.min_token_prob, p.backoff, p.smoothing) == (8, 1, 0.05, 1, 1.0)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"max_tokens": -1}, "max_tokens must be in \\[0, 64\\], got -1"),
        ({"max_tokens": 65}, "got 65"),
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
        max_tokens=max_tokens,
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
