from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.drafting.group import DraftLifecycleError, GroupIndex
from core.drafting.speculate import SpeculationParams
from core.drafting.store import DraftStore, GroupDelta, TokenRun

appends = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c"]), st.lists(st.integers(0, 3), max_size=6)),
    max_size=10,
)


def _snapshot(store: DraftStore, gid: str) -> tuple:
    sam = store.group(gid).automaton
    return (sam._next, sam._link, sam._len, sam._cnt, store.group(gid)._ends)


@settings(max_examples=100, deadline=None)
@given(ops=appends, cut=st.integers(0, 10))
def test_incremental_export_import_round_trip(ops, cut):
    src = DraftStore()
    src.register_group("g", [1, 2])
    replica = DraftStore()
    cut = min(cut, len(ops))
    for r, toks in ops[:cut]:
        src.add_tokens("g", r, toks)
    replica.import_delta(src.export_since("g"))  # full copy from version 0
    v = src.version("g")
    for r, toks in ops[cut:]:
        src.add_tokens("g", r, toks)
    delta = src.export_since("g", v)
    assert delta.from_version == v and delta.to_version == src.version("g")
    replica.import_delta(delta)
    assert replica.version("g") == src.version("g")
    assert _snapshot(replica, "g") == _snapshot(src, "g")
    replica.check_integrity("g")
    for r in {r for r, _ in ops}:
        assert replica.speculate("g", r, SpeculationParams(max_draft=4, width=2)) == src.speculate(
            "g", r, SpeculationParams(max_draft=4, width=2)
        )


def test_delta_crosses_json():
    src = DraftStore()
    src.register_group("g", [5])
    src.add_tokens("g", "a", [1, 2])
    src.add_tokens("g", "b", [3])
    src.add_tokens("g", "a", [4])
    delta = src.export_since("g")
    assert [(r.request_id, r.token_ids) for r in delta.runs] == [
        ("a", [1, 2]),
        ("b", [3]),
        ("a", [4]),
    ]
    again = GroupDelta.model_validate_json(delta.model_dump_json())
    dst = DraftStore()
    dst.import_delta(again)
    assert dst.version("g") == 4
    assert dst.group("g").num_tokens("a") == 3


def test_delta_validates_versions():
    with pytest.raises(ValueError, match="versions 0->3 but runs hold 1 tokens"):
        GroupDelta(
            group_id="g",
            prompt_token_ids=[1],
            from_version=0,
            to_version=3,
            runs=[TokenRun(request_id="a", token_ids=[1])],
        )


def test_lifecycle_misuse_is_loud():
    s = DraftStore()
    with pytest.raises(DraftLifecycleError, match="group 'g' is not registered"):
        s.add_tokens("g", "a", [1])
    with pytest.raises(DraftLifecycleError, match="not registered"):
        s.speculate("g", "a", SpeculationParams(max_draft=4))
    with pytest.raises(DraftLifecycleError, match="not registered"):
        s.release_group("g")
    s.register_group("g", [1])
    with pytest.raises(DraftLifecycleError, match="already registered"):
        s.register_group("g", [1])
    with pytest.raises(ValueError, match="prompt_token_ids is empty"):
        s.register_group("h", [])
    with pytest.raises(ValueError, match="request_id must be a non-empty string"):
        s.add_tokens("g", "", [1])
    with pytest.raises(
        ValueError, match="request 'a': token ids must be non-negative ints, got -4"
    ):
        s.add_tokens("g", "a", [3, -4])
    assert s.version("g") == 0  # all-or-nothing: the valid 3 was not appended either
    s.add_tokens("g", "a", [2, 3])
    with pytest.raises(DraftLifecycleError, match="version 5 outside \\[0, 2\\]"):
        s.export_since("g", 5)
    s.release_group("g")
    assert "g" not in s and s.group_ids() == []
    with pytest.raises(DraftLifecycleError, match="not registered"):
        s.add_tokens("g", "a", [1])


def test_import_misuse_is_loud():
    src = DraftStore()
    src.register_group("g", [1])
    src.add_tokens("g", "a", [2, 3])
    dst = DraftStore()
    with pytest.raises(DraftLifecycleError, match="needs a copy at that version"):
        dst.import_delta(src.export_since("g", 1))
    dst.import_delta(src.export_since("g", 0))
    with pytest.raises(
        DraftLifecycleError, match="starts at version 1 but this copy is at version 2"
    ):
        dst.import_delta(src.export_since("g", 1))
    other = DraftStore()
    other.register_group("g", [9])
    with pytest.raises(DraftLifecycleError, match="delta prompt differs"):
        other.import_delta(src.export_since("g", 0))


def test_memory_and_integrity():
    s = DraftStore()
    s.register_group("g", [1, 2, 3])
    m0 = s.memory("g")
    s.add_tokens("g", "a", range(50))
    s.add_tokens("g", "b", [1, 2, 3, 4])
    m = s.memory("g")
    assert (m.prompt_tokens, m.appended_tokens, m.requests) == (3, 54, 2)
    assert m.approx_bytes > m0.approx_bytes and m.states > m0.states
    assert s.total_bytes() == m.approx_bytes
    s.check_integrity("g")
    s.group("g")._ends["a"] = 0  # corrupt on purpose
    with pytest.raises(AssertionError, match="request 'a' end state"):
        s.check_integrity("g")


def test_single_token_fast_path_equals_bulk_add():
    a = GroupIndex("g", [1])
    b = GroupIndex("g", [1])
    for t in [2, 3, 2, 3]:
        a.add_token("r", t)
    b.add_tokens("r", [2, 3, 2, 3])
    assert a.log_since(0) == b.log_since(0) == [("r", [2, 3, 2, 3])]
    assert a.automaton._cnt == b.automaton._cnt
    assert a.request_ids() == ["r"] and a.num_tokens("r") == 4 and a.num_tokens("x") == 0
    with pytest.raises(ValueError, match="request_id must be non-empty"):
        a.add_token("", 1)
    with pytest.raises(ValueError, match="group_id must be a non-empty string"):
        GroupIndex("", [1])


def test_batch_speculate_matches_single_calls_and_fails_whole():
    s = DraftStore()
    s.register_group("g", [1, 2])
    s.register_group("h", [7])
    s.add_tokens("g", "a", [3, 4, 5, 1, 2])
    s.add_tokens("h", "b", [8, 9, 7])
    got = s.batch_speculate([("g", "a", 2), ("h", "b", 4), ("g", "new", 3)])
    assert got == [
        s.speculate("g", "a", SpeculationParams(max_draft=2)),
        s.speculate("h", "b", SpeculationParams(max_draft=4)),
        s.speculate("g", "new", SpeculationParams(max_draft=3)),
    ]
    assert got[0].tokens == (3, 4) and got[1].tokens[:2] == (8, 9)
    with pytest.raises(DraftLifecycleError, match="group 'x' is not registered"):
        s.batch_speculate([("g", "a", 2), ("x", "b", 2)])


def test_speculate_defaults_and_new_request_drafts_from_prompt():
    s = DraftStore()
    s.register_group("g", [1, 2])
    s.add_tokens("g", "a", [3, 4, 5])
    d = s.speculate(
        "g", "new", SpeculationParams(max_draft=8)
    )  # defaults: width 1, min_token_prob 0.05
    assert d.tokens == (3, 4, 5) and d.is_path and d.match_length == 2


def test_memory_estimate_tracks_the_real_footprint():
    import random
    import tracemalloc

    rng = random.Random(0)
    tracemalloc.start()
    try:
        s = DraftStore()
        s.register_group("g", [1, 2, 3])
        for r in range(8):
            s.add_tokens("g", f"r{r}", [rng.randrange(50) for _ in range(400)])
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    est = s.memory("g").approx_bytes
    assert 0.65 * used <= est <= 1.35 * used, (est, used)
