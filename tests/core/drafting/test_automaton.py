from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.drafting.automaton import ROOT, SuffixAutomaton
from core.drafting.group import GroupIndex
from core.drafting.speculate import match_state

tokens = st.lists(st.integers(0, 2), min_size=1, max_size=6)
# a schedule of (request index, tokens) appends, interleaving up to 3 requests
schedules = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.integers(0, 2), max_size=5)), max_size=8
)


def build(brute, prompt: list[int], schedule: list[tuple[int, list[int]]]) -> tuple:
    idx = GroupIndex("g", prompt)
    ref = brute(prompt)
    for r, toks in schedule:
        idx.add_tokens(f"r{r}", toks)
        ref.add(f"r{r}", toks)
    return idx, ref


@settings(max_examples=150, deadline=None)
@given(prompt=tokens, schedule=schedules)
def test_counts_match_brute_force_for_every_short_string(brute, prompt, schedule):
    idx, ref = build(brute, prompt, schedule)
    sam = idx.automaton
    idx.check()
    for n in range(0, 5):
        for w in itertools.product(range(3), repeat=n):
            assert sam.occurrences(w) == ref.count(w), w


@settings(max_examples=150, deadline=None)
@given(prompt=tokens, schedule=schedules)
def test_match_state_is_longest_suffix_with_a_continuation(brute, prompt, schedule):
    idx, ref = build(brute, prompt, schedule)
    sam = idx.automaton
    for r in ref.outs:
        end = sam.find(ref.text(r))
        assert end is not None and sam.length(end) == len(ref.text(r))
        v = match_state(sam, end)
        assert sam.length(v) == ref.match_length(r)
        text = ref.text(r)
        w = text[len(text) - sam.length(v) :]
        got = {t: sam.count(u) for t, u in sam.children(v).items()}
        assert got == dict(ref.continuations(w))


@settings(max_examples=60, deadline=None)
@given(prompt=tokens, schedule=schedules)
def test_substrings_found_iff_they_occur(brute, prompt, schedule):
    idx, ref = build(brute, prompt, schedule)
    texts = [ref.prompt] + [ref.text(r) for r in ref.outs]
    subs = {tuple(t[i:j]) for t in texts for i in range(len(t)) for j in range(i + 1, len(t) + 1)}
    for w in subs:
        assert idx.automaton.find(w) is not None
    for w in itertools.product(range(3), repeat=3):
        assert (idx.automaton.find(w) is not None) == (w in subs)


def test_interleaved_appends_keep_end_states_valid():
    # r0 and r1 write the same text in alternation: shared states must be split correctly
    sam = SuffixAutomaton()
    p = sam.extend_all(ROOT, [5, 6])
    a = b = p
    for t in [1, 2, 1, 2, 3, 1, 2]:
        a = sam.extend(a, t)
        b = sam.extend(b, t)
        assert a == b
    c = sam.extend(a, 9)
    assert sam.length(c) == 2 + 7 + 1
    sam.check()
    assert sam.occurrences([1, 2]) == 3 + 3  # three times in each of the two requests
    assert sam.occurrences([5, 6]) == 1  # the prompt is counted once


def test_check_reports_a_corrupted_count():
    sam = SuffixAutomaton()
    sam.extend_all(ROOT, [1, 2, 1, 2])
    v = sam.find([1, 2])
    assert v is not None
    sam._cnt[v] = 0  # corrupt on purpose
    with pytest.raises(AssertionError, match="count"):
        sam.check()


def test_memory_grows_with_tokens():
    sam = SuffixAutomaton()
    small = sam.approx_bytes()
    sam.extend_all(ROOT, range(100))
    assert sam.approx_bytes() > small
    assert sam.num_states == 101
    assert sam.num_transitions >= 100


def test_wide_state_serves_a_cached_top_list_refreshed_on_growth():
    from core.drafting.automaton import REFRESH_FRACTION, TOP_CACHED, WIDE_STATE

    sam = SuffixAutomaton()
    # token 0 followed by 40 distinct tokens; token 1 follows it most often
    text = []
    for t in range(1, 41):
        text += [0, t]
    text += [0, 1] * 5
    end = sam.extend_all(ROOT, text)
    zero = sam.find([0])
    assert zero is not None and len(sam.children(zero)) == 40 > WIDE_STATE
    pairs, total, distinct = sam.continuations(zero)
    assert len(pairs) == TOP_CACHED and pairs[0] == (6, 1)
    assert pairs == sorted(pairs, reverse=True)
    assert (total, distinct) == (45, 40)
    # one more "0 2": under REFRESH_FRACTION growth the cached (stale) list is served
    end = sam.extend_all(end, [0, 2])
    assert sam.count(zero) <= 45 * (1 + REFRESH_FRACTION)
    assert sam.continuations(zero)[1] == 45
    # enough growth refreshes it: "0 2" x 5 more
    end = sam.extend_all(end, [0, 2] * 5)
    pairs, total, _ = sam.continuations(zero)
    assert total == 51 and pairs[0] == (7, 2)
    # narrow states are always exact
    one = sam.find([1])
    assert one is not None
    assert sam.continuations(one)[1] == sum(sam.count(u) for u in sam.children(one).values())


@pytest.mark.parametrize("seed", range(5))
def test_long_random_interleavings_match_brute_force(brute, seed):
    import random

    rng = random.Random(seed)
    prompt = [rng.randrange(4) for _ in range(rng.randrange(1, 12))]
    idx = GroupIndex("g", prompt)
    ref = brute(prompt)
    for _ in range(60):  # 60 appends of 1-4 tokens, random requests, repetitive text
        r = f"r{rng.randrange(4)}"
        toks = [rng.randrange(4) for _ in range(rng.randrange(1, 5))]
        idx.add_tokens(r, toks)
        ref.add(r, toks)
    idx.check()
    sam = idx.automaton
    for n in range(1, 4):
        for w in itertools.product(range(4), repeat=n):
            assert sam.occurrences(w) == ref.count(w), w
    for r in ref.outs:
        end = sam.find(ref.text(r))
        assert end is not None
        assert sam.length(match_state(sam, end)) == ref.match_length(r)


@settings(max_examples=150, deadline=None)
@given(prompt=tokens, schedule=schedules)
def test_sources_match_brute_force_for_every_short_string(brute, prompt, schedule):
    # the prompt appends as bit 0, each request as bit i + 1 in the order of its first append
    idx, ref = build(brute, prompt, schedule)
    sam = idx.automaton
    order = list(dict.fromkeys(f"r{r}" for r, toks in schedule if toks))  # empty: no append
    bits = {r: 1 << (i + 1) for i, r in enumerate(order)}
    for n in range(1, 5):
        for w in itertools.product(range(3), repeat=n):
            want = 0
            if ref.count_in(ref.prompt, 0, w):
                want |= 1
            for r, b in bits.items():
                if ref.count_in(ref.text(r), len(ref.prompt), w):
                    want |= b
            state = sam.find(w)
            assert (0 if state is None else sam.sources[state]) == want, w


def test_check_reports_a_source_bit_missing_on_the_suffix_link():
    sam = SuffixAutomaton()
    end = sam.extend_all(ROOT, [1, 2, 1, 2], source=2)
    sam.check()
    sam.sources[end] |= 8  # corrupt: a bit its suffix link lacks
    with pytest.raises(AssertionError, match="source bit its suffix link lacks"):
        sam.check()
