"""Writer throughput and outage behaviour of the history store.

1. Sustained rows/s: events of a realistic mix (per request: a few chunk events, one
   RequestFinished, one GroupEstimate; per group: one GroupFinished) are emitted as fast as
   the producer can, and the time until every one is committed is measured; emit cost (the
   producer's side, what the rollout pays) is reported separately.
2. Outage: the database goes away (SQLite: another connection holds an exclusive lock;
   Postgres: the server is stopped) while events keep coming at a fixed rate; the backlog grows
   up to ``queue_size``, further events are dropped and counted; when the database returns,
   the time to drain the backlog is measured.

Run: ``python -m lab.bench.store_writer [--postgres]`` (Postgres: starts a throwaway server with
``initdb``/``pg_ctl`` from PATH, as the tests do; needs root's ``postgres`` user or non-root).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.store import migrate
from app.store.config import WriterConfig
from app.store.writer import StoreWriter
from core.events import ChunkDone, Event, GroupEstimate, GroupFinished, RequestFinished


def workload(n_events: int, group_size: int = 8, chunks: int = 4) -> Iterator[Event]:
    """``n_events`` events in the order a rollout emits them."""
    t, i, g = 1.0e9, 0, 0
    while True:
        gid = f"job-g{g}"
        for r in range(group_size):
            rid = f"{gid}-r{r}"
            for c in range(chunks):
                yield ChunkDone(
                    rid, gid, f"replica-{r % 4}", t, 256, 256 * (c + 1), "chunk", r == 0
                )
                i += 1
                if i >= n_events:
                    return
            yield RequestFinished(
                rid, gid, f"p{g}", 1024, chunks, r == 0, ("replica-0",) * chunks, "stop", t, t, t
            )
            yield GroupEstimate(gid, t, 1024, 1000, r + 1)
            i += 2
            if i >= n_events:
                return
        yield GroupFinished(gid, t, (1024,) * group_size)
        i += 1
        g += 1
        t += 0.01


@dataclass(frozen=True)
class Throughput:
    backend: str
    events: int
    emit_s: float
    total_s: float

    def line(self) -> str:
        emit_us = self.emit_s / self.events * 1e6
        return (
            f"{self.backend:9s} {self.events / self.total_s:9,.0f} rows/s sustained "
            f"({self.events:,} events in {self.total_s:.2f} s); emit {emit_us:.2f} "
            "µs/event on the producer side"
        )


def throughput(backend: str, url: str, n: int, batch_size: int) -> Throughput:
    migrate.upgrade(url)
    events = list(workload(n))
    w = StoreWriter(url, WriterConfig(queue_size=len(events) + 1, batch_size=batch_size)).start()
    t0 = time.perf_counter()
    for ev in events:
        w.emit(ev)
    t1 = time.perf_counter()
    if not w.flush(600):
        raise RuntimeError(f"{backend}: not flushed in 600 s: {w.stats()}")
    t2 = time.perf_counter()
    s = w.close()
    if s.written != len(events):
        raise RuntimeError(f"{backend}: wrote {s.written} of {len(events)}: {s}")
    return Throughput(backend, len(events), t1 - t0, t2 - t0)


@dataclass(frozen=True)
class Outage:
    backend: str
    rate: float
    outage_s: float
    queue_size: int
    accepted: int
    dropped: int
    peak_pending: int
    failed_writes: int
    drain_s: float
    written: int

    def line(self) -> str:
        return (
            f"{self.backend:9s} outage {self.outage_s:.1f} s at {self.rate:,.0f} events/s, "
            f"queue_size {self.queue_size:,}: backlog peaked at {self.peak_pending:,}, "
            f"{self.dropped:,} dropped (counted), {self.failed_writes} failed writes retried; "
            f"after recovery the backlog drained in {self.drain_s:.2f} s; "
            f"accepted {self.accepted:,} = written {self.written:,}"
        )


def outage(
    backend: str,
    url: str,
    down: Callable[[], None],
    up: Callable[[], None],
    rate: float,
    outage_s: float,
    queue_size: int,
) -> Outage:
    migrate.upgrade(url)
    cfg = WriterConfig(
        queue_size=queue_size, retry_initial_s=0.05, retry_max_s=0.5, busy_timeout_s=0.1,
        connect_timeout_s=1,
    )  # fmt: skip
    w = StoreWriter(url, cfg).start()
    events = workload(10**9)
    period = 1.0 / rate

    def feed(seconds: float) -> int:
        peak, start = 0, time.perf_counter()
        k = 0
        while (now := time.perf_counter()) - start < seconds:
            due = int((now - start) / period)
            while k < due:
                w.emit(next(events))
                k += 1
            peak = max(peak, w.stats().pending)
            time.sleep(0.002)
        return peak

    feed(0.5)
    down()
    try:
        peak = feed(outage_s)
    finally:
        up()
    t0 = time.perf_counter()
    if not w.flush(600):
        raise RuntimeError(f"{backend}: backlog not drained in 600 s: {w.stats()}")
    drain = time.perf_counter() - t0
    s = w.close()
    return Outage(
        backend, rate, outage_s, queue_size, s.accepted, s.dropped, peak, s.failed_writes, drain,
        s.written,
    )  # fmt: skip


def sqlite_lock(url: str) -> tuple[Callable[[], None], Callable[[], None], Callable[[], None]]:
    """(down, up, close) of a SQLite outage: another connection holding an exclusive lock."""
    lock = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=10, isolation_level=None)

    def down() -> None:
        lock.execute("BEGIN EXCLUSIVE")

    def up() -> None:
        lock.execute("ROLLBACK")

    return down, up, lock.close


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def postgres() -> Iterator[tuple[str, Callable[[], None], Callable[[], None]]]:
    """A throwaway Postgres (URL, stop, start) in a temp dir on a free loopback port."""
    base = Path(tempfile.mkdtemp(prefix="seer-pg-bench-"))
    data, sock, log = base / "data", base / "sock", base / "log"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=120)

    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1"
    start = lambda: run("pg_ctl", "-D", str(data), "-o", opts, "-l", str(log), "-w", "start")  # noqa: E731
    stop = lambda: run("pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")  # noqa: E731
    run("initdb", "-D", str(data), "--auth=trust", "-U", "postgres", "--no-instructions")
    start()
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", stop, start
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=5000.0, help="events/s during the outage run")
    ap.add_argument("--outage-s", type=float, default=3.0)
    ap.add_argument("--queue-size", type=int, default=10_000)
    ap.add_argument("--postgres", action="store_true", help="also on a throwaway Postgres")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        url = f"sqlite:///{d}/bench.db"
        print(throughput("sqlite", url, a.events, a.batch_size).line(), flush=True)
        down, up, close = sqlite_lock(url)
        print(
            outage(
                "sqlite",
                url,
                down,
                up,
                a.rate,
                a.outage_s,
                a.queue_size,
            ).line(),
            flush=True,
        )
        close()
    if a.postgres:
        with postgres() as (url, stop, start):
            print(throughput("postgres", url, a.events, a.batch_size).line(), flush=True)
            print(
                outage("postgres", url, stop, start, a.rate, a.outage_s, a.queue_size).line(),
                flush=True,
            )


if __name__ == "__main__":
    main()
