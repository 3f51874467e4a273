"""``python -m lab.bench.store_writer`` building blocks on a small SQLite run."""

from __future__ import annotations

from core.events import ChunkDone, GroupFinished, RequestFinished
from lab.bench.store_writer import outage, sqlite_lock, throughput, workload


def test_workload_mix() -> None:
    evs = list(workload(100, group_size=2, chunks=3))
    assert len(evs) >= 100
    assert {type(e) for e in evs} >= {ChunkDone, RequestFinished, GroupFinished}


def test_throughput_and_outage(sqlite_url: str) -> None:
    t = throughput("sqlite", sqlite_url, 2000, 100)
    assert t.events >= 2000 and "rows/s" in t.line()
    down, up, close = sqlite_lock(sqlite_url)
    try:
        o = outage("sqlite", sqlite_url, down, up, rate=2000, outage_s=0.3, queue_size=100)
    finally:
        close()
    assert o.accepted == o.written and o.accepted > 0
    assert o.peak_pending >= 100 and o.dropped > 0
