"""Refresh cost of the dashboard:
``python -m lab.bench.dashboard_refresh [--jobs 10] [--requests 512]``.

Fills a temporary SQLite store (through ``app.store``'s writer) with synthetic history
(``lab.bench.synthetic_history``: the last job half done), then times what one refresh of each page
computes (its queries and figures, ``dashboard.refresh``; rendering in the browser excluded):
best and median of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from app.store.reader import StoreReader
from app.store.writer import StoreWriter
from dashboard import refresh
from dashboard.config import DashboardConfig
from lab.bench.synthetic_history import Shape, history


def fill(url: str, shape: Shape, seed: int = 0) -> int:
    """Write the synthetic history into ``url`` (schema migrated); returns the rows written."""
    events = history(shape, t0=time.time() - 3600, seed=seed)
    writer = StoreWriter(url, migrate=True).start()
    step = writer.config.queue_size // 2  # never more than the backlog takes
    for i in range(0, len(events), step):
        for e in events[i : i + step]:
            writer.emit(e)
        if not writer.wait_for(lambda s: s.pending == 0, timeout=300):
            raise RuntimeError(f"store not written within 300 s: {writer.stats()}")
    stats = writer.close(timeout=60)
    if stats.written != len(events):
        raise RuntimeError(f"store filled partly: {stats}")
    return stats.written


def timings(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return min(runs), statistics.median(runs)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m lab.bench.dashboard_refresh", description=__doc__)
    p.add_argument("--jobs", type=int, default=10)
    p.add_argument("--requests", type=int, default=512, help="per job (groups x G=4)")
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    shape = Shape(jobs=a.jobs, groups=max(1, a.requests // 4), group_size=4)
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{Path(d) / 'seer.db'}"
        t = time.perf_counter()
        events = fill(url, shape)
        print(
            f"store: {a.jobs} jobs x {shape.groups * 4} requests, {events} events written "
            f"in {time.perf_counter() - t:.1f} s (SQLite)"
        )
        r = StoreReader(url)
        print("rows: " + ", ".join(f"{k} {v}" for k, v in r.counts().items()))
        cfg = DashboardConfig(database_url=url, service_url="http://127.0.0.1:1")
        pages: dict[str, Callable[[], object]] = {
            "Now": lambda: refresh.now_page(r, cfg, time.time()),
            "Speculation": lambda: refresh.speculation_page(r, cfg),
            "History": lambda: refresh.history_page(r, cfg),
            "Tuning (audit log)": lambda: refresh.audit_log(r),
        }
        print(
            f"{'page':<20} {'best ms':>8} {'median ms':>10}   (queries + figures, {a.repeat} runs)"
        )
        for name, fn in pages.items():
            best, med = timings(fn, a.repeat)
            print(f"{name:<20} {best * 1000:>8.1f} {med * 1000:>10.1f}")
        r.close()


if __name__ == "__main__":
    main()
