"""The background writer: every event is written, rejected or counted as dropped; under an
outage (SQLite locked, Postgres stopped mid-stream) nothing accepted is lost and the backlog
drains on recovery. Waits are bounded and event-driven (``wait_for`` / ``flush``)."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from sqlalchemy import select

from app.api import WriterStats
from app.store import migrate
from app.store.config import WriterConfig
from app.store.reader import StoreReader
from app.store.rows import ORPHANED
from app.store.tables import GroupRow, JobRow, RequestRow
from app.store.writer import StoreWriter
from core.events import (
    ChunkDone,
    DraftStats,
    GroupEstimate,
    GroupFinished,
    GroupInfo,
    JobFinished,
    JobStarted,
    ReplicaLoadSample,
    RequestFinished,
    SchedulerStarted,
    SpeculationConfigChanged,
)

FAST = WriterConfig(retry_initial_s=0.01, retry_max_s=0.1, busy_timeout_s=0.05)
WAIT = 60.0  # upper bound of every wait (never reached when the code works)


def chunk(i: int) -> ChunkDone:
    return ChunkDone(f"r{i}", "g", "replica-0", float(i), 4, 4 * (i + 1), "chunk", False)


def _count(url: str, table: str) -> int:
    r = StoreReader(url)
    try:
        return r.counts()[table]
    finally:
        r.close()


def _consistent(s: WriterStats) -> None:
    assert s.accepted == s.written + s.rejected + s.pending


def test_every_event_kind_is_recorded(any_url: str) -> None:
    w = StoreWriter(any_url, FAST, migrate=True).start()
    groups = (
        GroupInfo("j-g0", "p0", "sha256:aa", "p0", 2, 64, 5),
        GroupInfo("j-g1", "sha256:bb", "sha256:bb", None, 2, 64, 7),
    )
    w.emit(JobStarted("j", 10.0, 9.0, "context-prior", 3, 64, groups))
    w.emit(ChunkDone("j-g0-r0", "j-g0", "replica-0", 11.0, 8, 8, "stop", True))
    w.emit(
        RequestFinished("j-g0-r0", "j-g0", "p0", 8, 1, True, ("replica-0",), "stop", 10, 10.5, 11)
    )
    w.emit(GroupEstimate("j-g0", 11.0, 8, 8, 1))
    w.emit(RequestFinished("j-g0-r1", "j-g0", "p0", 0, 0, False, (), "cancelled", 10, None, 12))
    w.emit(GroupFinished("j-g0", 12.0, (8,)))
    w.emit(DraftStats("j-g1-r0", "j-g1", "replica-1", 12.0, 10, 6, 4))
    w.emit(DraftStats("j-g1-r1", "j-g1", "replica-1", 13.0, 6, 2, 2))  # same 10 s bucket
    w.emit(ReplicaLoadSample("replica-1", 13.0, 3, 1, 2, 0.5, 1000))
    w.emit(SpeculationConfigChanged(14.0, "ops", '{"max_draft": 4}', '{"max_draft": 8}', "test"))
    w.emit(JobFinished("j", 15.0, "done", 3, 20))
    assert w.flush(WAIT)
    s = w.close()
    assert (s.accepted, s.written, s.rejected, s.dropped, s.pending) == (11, 11, 0, 0, 0)
    r = StoreReader(any_url)
    try:
        counts = r.counts()
        assert counts == {
            "jobs": 1,
            "groups": 2,
            "group_estimates": 1,
            "requests": 2,
            "chunks": 1,
            "acceptance_samples": 1,  # summed per (group, replica, bucket)
            "replica_load_samples": 1,
            "speculation_config_versions": 1,
        }
        with r.engine.connect() as conn:
            job = conn.execute(select(JobRow)).one()
            assert (job.state, job.iteration, job.output_tokens, job.finished_at) == (
                "done",
                3,
                20,
                15.0,
            )
            g0 = conn.execute(select(GroupRow).where(GroupRow.group_id == "j-g0")).one()
            assert g0.final_lengths == [8] and g0.finished_at == 12.0
            req = conn.execute(select(RequestRow).where(RequestRow.request_id == "j-g0-r0")).one()
            assert req.replicas == ["replica-0"] and req.is_probe
        assert r.recent_lengths("p0", 5) == [8]  # the cancelled one is not a length
    finally:
        r.close()


def test_a_started_scheduler_ends_the_jobs_a_gone_one_left_running(any_url: str) -> None:
    """Issue 38, defect 11: a job lost with its scheduler stayed ``running`` in the store for
    good (a ghost on the dashboard's Now page, its elapsed time counting). A scheduler that
    starts says so, and every job recorded as running before it ends, failed, naming why; a
    job that ended before, and one that starts after, keep their own states, and one that then
    ends for real (its old scheduler drained it during a redeploy) records that end."""
    w = StoreWriter(any_url, FAST, migrate=True).start()
    g = (GroupInfo("g", "p", "sha256:aa", None, 2, 64, 5),)
    w.emit(JobStarted("done", 1.0, 1.0, "seer", None, 64, g))
    w.emit(JobFinished("done", 2.0, "done", 2, 9))
    w.emit(JobStarted("lost", 3.0, 3.0, "seer", None, 64, ()))
    w.emit(SchedulerStarted(5.0))
    w.emit(JobStarted("new", 6.0, 6.0, "seer", None, 64, ()))
    w.emit(JobStarted("drained", 4.0, 4.0, "seer", None, 64, ()))
    w.emit(SchedulerStarted(5.0))  # a redeploy: the old scheduler drains beside the new one
    w.emit(JobFinished("drained", 7.0, "done", 2, 9))  # and its job ends for real: kept
    assert w.flush(WAIT)
    w.close()
    r = StoreReader(any_url)
    try:
        with r.engine.connect() as conn:
            jobs = {j.job_id: j for j in conn.execute(select(JobRow))}
        assert {k: j.state for k, j in jobs.items()} == {
            "done": "done",
            "lost": "failed",
            "new": "running",
            "drained": "done",
        }
        assert jobs["drained"].error is None and jobs["drained"].finished_at == 7.0
        assert jobs["lost"].finished_at == 5.0 and jobs["lost"].error == ORPHANED
        assert "scheduler restarted" in ORPHANED and jobs["done"].error is None
    finally:
        r.close()


def test_full_backlog_drops_and_counts(sqlite_url: str) -> None:
    w = StoreWriter(sqlite_url, WriterConfig(queue_size=10), migrate=True)  # not started yet
    for i in range(25):
        w.emit(chunk(i))
    s = w.stats()
    assert (s.accepted, s.dropped, s.pending, s.written) == (10, 15, 10, 0)
    w.start()
    assert w.flush(WAIT)
    s = w.close()
    assert (s.accepted, s.written, s.dropped, s.pending) == (10, 10, 15, 0)
    assert _count(sqlite_url, "chunks") == 10
    w.emit(chunk(99))  # after close: refused and counted
    assert w.stats().dropped == 16


def test_bad_event_is_rejected_not_blocking(any_url: str) -> None:
    """A batch the database refuses is split; only the offending event is rejected."""
    w = StoreWriter(any_url, FAST, migrate=True).start()
    w.emit(chunk(0))
    w.emit("not an event")  # type: ignore[arg-type]
    w.emit(SpeculationConfigChanged(1.0, "ops", "[1]", "{}", None))  # old is not an object
    w.emit(chunk(1))
    assert w.flush(WAIT)
    s = w.close()
    assert (s.written, s.rejected, s.pending) == (2, 2, 0)
    assert _count(any_url, "chunks") == 2


def test_postgres_data_error_splits_the_batch(pg_url: str) -> None:
    w = StoreWriter(pg_url, FAST, migrate=True).start()
    bad = ChunkDone("r", "g", "replica-0", 1.0, 1, 1, "x" * 100, False)  # > String(16)
    for ev in (chunk(0), bad, chunk(1)):
        w.emit(ev)
    assert w.flush(WAIT)
    s = w.close()
    assert (s.written, s.rejected, s.pending) == (2, 1, 0)
    assert "StringDataRightTruncation" in (s.last_error or "")
    assert _count(pg_url, "chunks") == 2


def test_sqlite_locked_outage_loses_nothing(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url)
    w = StoreWriter(sqlite_url, FAST.model_copy(update={"queue_size": 50})).start()
    for i in range(20):
        w.emit(chunk(i))
    assert w.flush(WAIT)
    path = sqlite_url.removeprefix("sqlite:///")
    lock = sqlite3.connect(path, timeout=0, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # the outage: every write fails with 'database is locked'
    try:
        for i in range(20, 40):
            w.emit(chunk(i))
        assert w.wait_for(lambda s: s.failed_writes >= 2 and s.state == "retrying", WAIT)
        for i in range(40, 200):  # the backlog fills up: the rest are dropped, counted
            w.emit(chunk(i))
        s = w.stats()
        assert "locked" in (s.last_error or "")
        # The backlog is full (50); the batch in the writer's hands is pending too.
        assert s.written == 20 and s.pending >= 50 and s.dropped > 0
        assert s.accepted + s.dropped == 200
        _consistent(s)
        accepted, dropped = s.accepted, s.dropped
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert w.flush(WAIT)  # recovery: the backlog drains
    s = w.close()
    assert (s.accepted, s.written, s.dropped, s.pending) == (accepted, accepted, dropped, 0)
    assert _count(sqlite_url, "chunks") == accepted


def test_postgres_down_at_start_and_mid_stream(own_pg: Any) -> None:
    """The writer starts while the server is down (schema step retried), then loses it
    mid-stream: every accepted event is written once the server is back."""
    url = own_pg.url()
    w = StoreWriter(url, FAST.model_copy(update={"connect_timeout_s": 1}), migrate=True).start()
    for i in range(10):
        w.emit(chunk(i))
    assert w.wait_for(lambda s: s.failed_writes >= 1, WAIT)
    assert w.stats().written == 0
    own_pg.start()
    assert w.flush(WAIT)
    assert migrate.current(url) == migrate.head()
    for i in range(10, 510):
        w.emit(chunk(i))
    own_pg.stop("fast")  # mid-stream: some of these may have been written already
    for i in range(510, 1010):
        w.emit(chunk(i))
    assert w.wait_for(lambda s: s.state == "retrying", WAIT)
    s = w.stats()
    assert s.pending > 0 and s.dropped == 0
    _consistent(s)
    own_pg.start()
    assert w.flush(WAIT)
    s = w.close()
    assert (s.accepted, s.written, s.dropped, s.rejected, s.pending) == (1010, 1010, 0, 0, 0)
    assert _count(url, "chunks") == 1010


def test_close_during_outage_reports_pending(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    lock = sqlite3.connect(path, timeout=0, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        w = StoreWriter(sqlite_url, FAST).start()
        for i in range(5):
            w.emit(chunk(i))
        assert w.wait_for(lambda s: s.failed_writes >= 1, WAIT)
        s = w.close(timeout=0.1)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert (s.state, s.accepted, s.written, s.pending) == ("closed", 5, 0, 5)


def test_flush_times_out_while_down(sqlite_url: str) -> None:
    migrate.upgrade(sqlite_url)
    path = sqlite_url.removeprefix("sqlite:///")
    lock = sqlite3.connect(path, timeout=0, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    w = StoreWriter(sqlite_url, FAST).start()
    try:
        w.emit(chunk(0))
        assert not w.flush(0.2)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert w.flush(WAIT)
    w.close()


@pytest.mark.parametrize("bad", [{"queue_size": 0}, {"batch_size": 0}, {"retry_max_s": 0}])
def test_writer_config_bounds(bad: dict[str, int]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=next(iter(bad))):
        WriterConfig(**bad)
