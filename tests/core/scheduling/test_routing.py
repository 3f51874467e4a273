"""The indexed replica table: the least-loaded query equals a scan in index order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.scheduling.routing import ReplicaTable, cache_aware, least_loaded


def scan(t: ReplicaTable, need: int) -> int:
    """The definition: smallest load among the replicas that fit, lowest index on ties."""
    best, best_load = -1, 3.0
    for i in range(len(t.capacity)):
        if t.fits(i, need) and t.load(i) < best_load:
            best, best_load = i, t.load(i)
    return best


def table(n: int, cap: int = 100, mr: int = 4) -> ReplicaTable:
    return ReplicaTable([cap] * n, [mr] * n, [0] * n, [0] * n)


ops = st.lists(
    st.tuples(
        st.integers(0, 2),  # 0: dispatch, 1: complete, 2: change limits
        st.integers(0, 40),  # replica (taken modulo n)
        st.integers(1, 60),  # KV tokens
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 37), ops=ops, needs=st.lists(st.integers(1, 120), min_size=1))
def test_least_loaded_matches_a_scan_under_random_updates(
    n: int, ops: list[tuple[int, int, int]], needs: list[int]
) -> None:
    t = table(n)
    held: list[tuple[int, int]] = []
    for kind, i, tokens in ops:
        i %= n
        if kind == 0:  # dispatch where it fits (what the scheduler does) or force it (verl)
            t.add(i, 1, tokens)
            held.append((i, tokens))
        elif kind == 1 and held:
            j, tok = held.pop(tokens % len(held))
            t.add(j, -1, -tok)
        elif kind == 2:
            t.set_limits(i, tokens * 2, tokens % 5)  # max_running 0 = out of rotation
        for need in needs:
            assert t.least_loaded(need) == scan(t, need)
            assert least_loaded(t, -1, need, 0) == scan(t, need)


def test_ties_go_to_the_lowest_index_and_nothing_fits_is_minus_one() -> None:
    t = table(5)
    t.add(0, 1, 10)
    assert t.least_loaded(10) == 1  # 1..4 tie at load 0
    for i in range(1, 5):
        t.add(i, 1, 10)
    assert t.least_loaded(10) == 0  # all tie again
    assert t.least_loaded(91) == -1  # no replica has 91 free tokens
    t.set_limits(0, 100, 1)  # replica 0 is full (1 running of 1)
    assert t.least_loaded(10) == 1


def test_cache_aware_stays_within_threshold() -> None:
    t = table(3)
    t.add(2, 2, 20)
    assert cache_aware(t, 2, 10, 2) == 2  # 2 more in flight than the least loaded: stays
    assert cache_aware(t, 2, 10, 1) == 0  # more than the threshold: least loaded
    assert cache_aware(t, 2, 81, 5) == 0  # its KV replica cannot fit the chunk
