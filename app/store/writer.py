"""``StoreWriter``: the ``EventSink`` that records events off the hot path.

Invariants:
- ``emit`` never blocks on the database and never raises: it appends to a bounded backlog under
  a lock held for microseconds; when the backlog is full the event is refused and counted in
  ``dropped`` (so every event is either accepted or counted as dropped, never lost silently).
- One background thread takes up to ``batch_size`` accepted events at a time and writes them in
  one transaction; a batch leaves the writer's hands only when committed (``written``) or when
  the database refuses an event for good (bad data: ``rejected``, logged). A failed connection,
  a locked or unreachable database, a missing schema: the same batch is retried with bounded
  exponential backoff, while new events keep filling the backlog; on recovery the backlog
  drains. Hence ``accepted = written + rejected + pending`` at every moment.
- The schema step (alembic upgrade, when asked) runs in the thread before the first write and is
  retried the same way, so a service never waits for its database at start.
A batch whose commit succeeded but whose acknowledgement was lost is written again (at-least-
once); rows carry no unique key to detect it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from app.api import WriterStats
from app.store.config import WriterConfig, check_url, redact
from core.events import Event

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

log = logging.getLogger("seer.store")


class _SchemaError(Exception):
    """The schema step failed (retried like an outage)."""


def _transient(exc: BaseException) -> bool:
    """True when retrying later may succeed (connection, lock, missing schema); False for data
    the database will never take (integrity, type errors)."""
    from sqlalchemy import exc as sa

    if isinstance(exc, sa.IntegrityError | sa.DataError):
        return False
    return isinstance(
        exc, sa.DBAPIError | sa.DisconnectionError | sa.TimeoutError | OSError | _SchemaError
    )


class StoreWriter:
    """Batched background writer of ``core.events`` to the store (see the module invariants)."""

    def __init__(
        self,
        url: str,
        config: WriterConfig | None = None,
        migrate: bool = False,
        engine_factory: Callable[[str, WriterConfig], Engine] | None = None,
    ) -> None:
        """``migrate``: bring the schema to the newest revision before the first write.
        ``engine_factory`` (tests): builds the SQLAlchemy engine (default ``make_engine``)."""
        self.url = check_url(url)
        self.config = config or WriterConfig()
        self.migrate = migrate
        self._engine_factory = engine_factory
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)
        self._progress = threading.Condition(self._lock)
        self._backlog: deque[Event] = deque()
        self._batch: deque[Event] = deque()  # taken from the backlog, not yet written
        self._stopping = False
        self._abandon = threading.Event()  # close() gave up waiting: leave at once
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None
        self._state = "starting"
        self._accepted = 0
        self._written = 0
        self._rejected = 0
        self._dropped = 0
        self._failed = 0
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._last_write_at: float | None = None

    # ------------------------------------------------------------------ producer side
    def emit(self, event: Event) -> None:
        """Accept ``event`` into the backlog, or count it as dropped when the backlog is full
        or the writer is closed. Never blocks on I/O, never raises."""
        with self._lock:
            if self._stopping or len(self._backlog) >= self.config.queue_size:
                self._dropped += 1
                if self._dropped == 1 or self._dropped % 10_000 == 0:
                    log.warning(
                        "store backlog full (%d events) or closed: %d events dropped so far",
                        len(self._backlog),
                        self._dropped,
                    )
                return
            self._backlog.append(event)
            self._accepted += 1
            self._has_work.notify()

    def stats(self) -> WriterStats:
        with self._lock:
            return self._stats()

    def _stats(self) -> WriterStats:
        return WriterStats(
            state=self._state,
            accepted=self._accepted,
            written=self._written,
            rejected=self._rejected,
            dropped=self._dropped,
            pending=len(self._backlog) + len(self._batch),
            failed_writes=self._failed,
            last_error=self._last_error,
            last_error_at=self._last_error_at,
            last_write_at=self._last_write_at,
        )

    def wait_for(self, predicate: Callable[[WriterStats], bool], timeout: float) -> bool:
        """Block until ``predicate(stats)`` holds (re-checked after every write attempt) or
        ``timeout`` seconds pass; returns whether it holds. Not for ``async def`` callers."""
        with self._progress:
            return self._progress.wait_for(lambda: predicate(self._stats()), timeout)

    def flush(self, timeout: float) -> bool:
        """Block until every event accepted so far is written or rejected (True), or
        ``timeout`` seconds pass (False)."""
        with self._lock:
            target = self._accepted
        return self.wait_for(lambda s: s.written + s.rejected >= target, timeout)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> StoreWriter:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="seer-store-writer", daemon=True)
            self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> WriterStats:
        """Refuse new events, write the backlog for at most ``timeout`` seconds, stop the
        thread; events still pending then are logged as not written."""
        with self._lock:
            self._stopping = True
            self._has_work.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                self._abandon.set()
                self._thread.join(max(self.config.busy_timeout_s, 5.0))
        with self._lock:
            self._state = "closed"
            stats = self._stats()
            self._progress.notify_all()
        if stats.pending:
            log.error("store writer closed with %d events not written", stats.pending)
        if self._engine is not None:
            self._engine.dispose()
        return stats

    # ------------------------------------------------------------------ writer thread
    def _run(self) -> None:
        cfg = self.config
        while True:
            with self._lock:
                self._has_work.wait_for(lambda: bool(self._backlog) or self._stopping)
                if not self._backlog:
                    return
                n = min(cfg.batch_size, len(self._backlog))
                self._batch.extend(self._backlog.popleft() for _ in range(n))
            delay = cfg.retry_initial_s
            while self._batch:
                try:
                    self._write_batch()
                except Exception as exc:  # noqa: BLE001 - transient: retried below
                    self._failed_attempt(exc)
                    if self._abandon.wait(delay):
                        return
                    delay = min(delay * 2, cfg.retry_max_s)

    def _connect(self) -> Engine:
        if self._engine is None:
            from app.store.engine import make_engine

            factory = self._engine_factory or make_engine
            self._engine = factory(self.url, self.config)
        if self.migrate:
            from app.store.migrate import upgrade

            try:
                upgrade(self.url, engine=self._engine)
            except Exception as exc:
                raise _SchemaError(f"schema upgrade failed: {exc}") from exc
            self.migrate = False
        return self._engine

    def _write_batch(self) -> None:
        """Write ``self._batch``; raises on a transient error (the batch is kept). A permanent
        error splits the batch: events are then written one by one and the ones the database
        refuses are rejected."""
        from app.store.rows import plan_batch

        engine = self._connect()
        batch = list(self._batch)
        plan = plan_batch(batch, self.config.bucket_s)
        try:
            with engine.begin() as conn:
                plan.execute(conn)
        except Exception as exc:
            if _transient(exc):
                raise
            if len(batch) == 1:
                self._done(0, batch, exc)
                return
            log.warning("store batch of %d refused (%r); writing one by one", len(batch), exc)
            while self._batch:
                one = self._batch[0]
                single = plan_batch([one], self.config.bucket_s)
                try:
                    with engine.begin() as conn:
                        single.execute(conn)
                except Exception as exc1:
                    if _transient(exc1):
                        raise
                    self._done(0, [one], exc1)
                else:
                    self._done(1 - len(single.rejected), single.rejected, None)
            return
        self._done(len(batch) - len(plan.rejected), plan.rejected, None)

    def _done(self, written: int, rejected: Sequence[object], error: BaseException | None) -> None:
        """``written + len(rejected)`` events at the head of the batch are settled."""
        if rejected:
            log.error(
                "store rejected %d events (%s): %r",
                len(rejected),
                error if error is not None else "unknown event type",
                rejected[:3],
            )
        with self._lock:
            for _ in range(written + len(rejected)):
                self._batch.popleft()
            self._written += written
            self._rejected += len(rejected)
            now = time.time()
            if error is not None:
                self._last_error, self._last_error_at = repr(error), now
            if written:
                self._last_write_at = now
            if self._state != "ok":
                if self._state == "retrying":
                    log.warning(
                        "store %s reachable again; %d events pending",
                        redact(self.url),
                        len(self._backlog) + len(self._batch),
                    )
                self._state = "ok"
            self._progress.notify_all()

    def _failed_attempt(self, exc: BaseException) -> None:
        with self._lock:
            self._failed += 1
            self._last_error, self._last_error_at = repr(exc), time.time()
            if self._state != "retrying":
                log.warning("store %s: write failed, retrying: %r", redact(self.url), exc)
                self._state = "retrying"
            self._progress.notify_all()
