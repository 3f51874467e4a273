"""The read API and ``StoreLengthPrior``: lengths recorded by one iteration seed the next
iteration's ``context-prior`` scheduler (the scheduler itself emits what the store records)."""

from __future__ import annotations

import pytest

from app.store.config import WriterConfig
from app.store.prior import StoreLengthPrior
from app.store.reader import StoreReader
from app.store.writer import StoreWriter
from core.events import RequestFinished
from core.scheduling import GroupSpec, ReplicaSpec, get_policy, make_scheduler
from tests.core.scheduling.factories import run_to_end

WAIT = 60.0


def finished(key: str, length: int, at: float, reason: str = "stop") -> RequestFinished:
    return RequestFinished(f"r{at}", "g", key, length, 1, False, ("a",), reason, 0.0, 0.0, at)


def test_recent_lengths_newest_first_limited(any_url: str) -> None:
    w = StoreWriter(any_url, WriterConfig(batch_size=3), migrate=True).start()
    for i, length in enumerate([5, 6, 7, 8, 9]):
        w.emit(finished("p", length, float(i)))
    w.emit(finished("p", 99, 10.0, "cancelled"))
    w.emit(finished("q", 3, 1.0, "length"))
    assert w.flush(WAIT)
    w.close()
    r = StoreReader(any_url)
    try:
        assert r.recent_lengths("p", 3) == [9, 8, 7]
        assert r.recent_lengths("p", 100) == [9, 8, 7, 6, 5]
        assert r.recent_lengths("unseen", 3) == []
        assert r.recent_lengths_many(["p", "q", "x"], 2) == {"p": [9, 8], "q": [3]}
        with pytest.raises(ValueError, match="limit=0"):
            r.recent_lengths("p", 0)
    finally:
        r.close()


def test_prior_reads_only_its_cache(sqlite_url: str) -> None:
    w = StoreWriter(sqlite_url, migrate=True).start()
    w.emit(finished("p", 40, 1.0))
    assert w.flush(WAIT)
    w.close()
    prior = StoreLengthPrior(StoreReader(sqlite_url), limit=4, max_prompts=2)
    assert prior.lengths("p") is None  # not prefetched: no database call on the hot path
    assert prior.prefetch(["p", "x"]) == 1
    assert prior.lengths("p") == [40] and prior.lengths("x") is None
    prior.prefetch(["y"])  # the cache keeps max_prompts=2: 'p' (oldest) goes
    assert prior.lengths("p") is None
    with pytest.raises(ValueError, match="limit=0"):
        StoreLengthPrior(StoreReader(sqlite_url), limit=0)


def test_one_iteration_seeds_the_next(any_url: str) -> None:
    """Iteration 1 runs with the writer as its scheduler's sink; iteration 2's context-prior
    scheduler is seeded with exactly what iteration 1 produced for the same prompts."""
    plan = get_policy("context-prior")
    reps = [ReplicaSpec("a", 100_000, 4)]
    lengths = {"it1-g0-r0": 30, "it1-g0-r1": 50, "it1-g1-r0": 7, "it1-g1-r1": 9}
    groups = [
        GroupSpec("it1-g0", ("it1-g0-r0", "it1-g0-r1"), 100, 4, prompt_key="prompt-A"),
        GroupSpec("it1-g1", ("it1-g1-r0", "it1-g1-r1"), 100, 4, prompt_key="prompt-B"),
    ]
    w = StoreWriter(any_url, migrate=True).start()
    s1 = make_scheduler(plan.config, reps, sink=w)
    s1.submit(groups)
    run_to_end(s1, lengths)
    assert w.flush(WAIT)
    w.close()

    prior = StoreLengthPrior(StoreReader(any_url))
    assert prior.prefetch(["prompt-A", "prompt-B", "prompt-C"]) == 2
    assert sorted(prior.lengths("prompt-A") or []) == [30, 50]
    assert sorted(prior.lengths("prompt-B") or []) == [7, 9]
    s2 = make_scheduler(plan.config, reps, prior=prior)
    s2.submit([GroupSpec("it2-g0", ("x", "y"), 100, 4, prompt_key="prompt-B")])
    g = s2.groups.stats[0]
    assert g.prior_weight == pytest.approx(2 * plan.config.prior_weight)
