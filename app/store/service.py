"""The store as the scheduler deployment uses it: one writer (the dispatcher's event sink) and
one length prior, opened without blocking the event loop and closed with a bounded drain.

Invariant: nothing here waits on the database inside the event loop: opening builds objects
(the writer connects and migrates in its own thread), prior look-ups run in a worker thread
under ``prior_timeout_s``, and a failed look-up means "no prior" for that job, never an error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from app.api import WriterStats
from app.store.config import StoreConfig, redact
from app.store.prior import StoreLengthPrior
from app.store.writer import StoreWriter

log = logging.getLogger("seer.store")


class ServiceStore:
    def __init__(self, config: StoreConfig) -> None:
        """Blocking (imports SQLAlchemy, creates the SQLite folder): call in a thread."""
        from app.store.reader import StoreReader

        self.config = config
        self.url = config.url()
        self.writer = StoreWriter(
            self.url, config.writer, migrate=config.apply_migrations_on_start
        ).start()
        self.prior = StoreLengthPrior(StoreReader(self.url), limit=config.prior_limit)
        log.info("recording to %s", redact(self.url))

    @classmethod
    async def open(cls, config: StoreConfig) -> ServiceStore | None:
        """The store of ``config``, or None when it is disabled."""
        if not config.enabled:
            return None
        return await asyncio.to_thread(cls, config)

    async def prefetch(self, prompt_keys: Sequence[str]) -> int:
        """Load the prior of these prompts (at most ``prior_timeout_s``); returns how many have
        a recorded history (0 on timeout or error, logged)."""
        try:
            found = await asyncio.wait_for(
                asyncio.to_thread(self.prior.fetch, prompt_keys), self.config.prior_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - no prior is a valid answer
            log.warning("length prior of %d prompts unavailable: %r", len(prompt_keys), exc)
            return 0
        return self.prior.remember(prompt_keys, found)

    def stats(self) -> WriterStats:
        return self.writer.stats()

    async def close(self, timeout_s: float = 10.0) -> WriterStats:
        stats = await asyncio.to_thread(self.writer.close, timeout_s)
        await asyncio.to_thread(self.prior.reader.close)
        return stats
