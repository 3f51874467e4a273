"""Speculation settings of every engine replica, changed live, and finished groups released.

Invariants:
- One current ``DraftSettings`` (version 0 = the engine config's, as every replica starts with
  them). ``set`` sends the new settings to every live replica at once, each call bounded by
  ``timeout_s``; a replica that failed to take them, or that rejoins later (Serve restarted it
  with the config's settings), gets the current ones when it is next seen healthy (``reapply``).
  Every accepted change is one ``SpeculationConfigChanged`` event (the store's audit table).
- A group whose requests all finished is released on every live replica and on the draft
  server in batches (one call per replica per flush, at most one flush in flight); engines and
  the draft server also drop idle groups on their own (TTL/LRU), so a lost release costs memory
  for a while, never correctness. New weights reset the draft server (``reset_shared``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any, Protocol

from app.api import ReplicaSpeculation, SpeculationState
from core.drafting.step_drafter import DraftSettings
from core.events import EventSink, SpeculationConfigChanged

log = logging.getLogger("seer.speculation")


class SpeculationLinks(Protocol):
    @property
    def replica_ids(self) -> Sequence[str]: ...

    async def configure_speculation(
        self, replica: int, settings: DraftSettings
    ) -> DraftSettings: ...

    async def release_groups(self, replica: int, group_ids: list[str]) -> int: ...


class SharedDrafts(Protocol):
    """The draft server, as the scheduler reaches it (``app.serve.replica.draft_server``)."""

    async def release(self, group_ids: list[str]) -> int: ...

    async def reset(self) -> int: ...


class SpeculationControl:
    def __init__(
        self,
        links: SpeculationLinks,
        settings: DraftSettings,
        timeout_s: float,
        sink: EventSink | None = None,
        shared: SharedDrafts | None = None,
        max_release_batch: int = 4096,
    ) -> None:
        self.links = links
        self.shared = shared
        self.settings = settings
        self.timeout_s = timeout_s
        self.sink = sink
        self.max_release_batch = max_release_batch
        self.version = 0
        self.updated_at: float | None = None
        self.updated_by: str | None = None
        self.reason: str | None = None
        n = len(links.replica_ids)
        self._replica_version = [0] * n
        self._replica_error: list[str | None] = [None] * n
        self._released: list[str] = []
        self._flushing = False
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ settings
    async def _send(self, i: int, settings: DraftSettings, version: int) -> None:
        try:
            await asyncio.wait_for(self.links.configure_speculation(i, settings), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - reported per replica, retried on rejoin
            self._replica_version[i] = -1
            self._replica_error[i] = f"{type(exc).__name__}: {exc}"
            log.warning("speculation settings v%d not applied on replica %d: %r", version, i, exc)
        else:
            self._replica_version[i] = version
            self._replica_error[i] = None

    async def set(
        self, settings: DraftSettings, who: str, reason: str | None, live: Sequence[int]
    ) -> SpeculationState:
        """Make ``settings`` current and send them to the ``live`` replicas."""
        async with self._lock:
            return await self._apply(settings, who, reason, live)

    async def update(
        self, patch: Mapping[str, Any], who: str, reason: str | None, live: Sequence[int]
    ) -> SpeculationState:
        """The current settings with ``patch``'s fields changed, made current as ``set`` does.
        Read and merged under the lock: of two concurrent updates neither is lost."""
        async with self._lock:
            return await self._apply(replace(self.settings, **patch), who, reason, live)

    async def _apply(
        self, settings: DraftSettings, who: str, reason: str | None, live: Sequence[int]
    ) -> SpeculationState:
        """Caller holds ``self._lock``."""
        old = self.settings
        self.settings = settings
        self.version += 1
        self.updated_at = time.time()
        self.updated_by = who
        self.reason = reason
        version = self.version
        for i in range(len(self._replica_version)):
            if i not in live:
                self._replica_version[i] = -1  # it gets them when it is seen healthy
        await asyncio.gather(*(self._send(i, settings, version) for i in live))
        if self.sink is not None:
            self.sink.emit(
                SpeculationConfigChanged(
                    at=self.updated_at,
                    who=who,
                    old=json.dumps(asdict(old), sort_keys=True),
                    new=json.dumps(asdict(settings), sort_keys=True),
                    reason=reason,
                )
            )
        return self.state()

    async def reapply(self, i: int) -> None:
        """Replica ``i`` is healthy (again): give it the current settings if it lacks them."""
        if self._replica_version[i] == self.version:
            return
        async with self._lock:
            if self._replica_version[i] != self.version:
                await self._send(i, self.settings, self.version)

    def replica_lost(self, i: int) -> None:
        """A restarted replica comes back with the config's settings (version 0)."""
        self._replica_version[i] = 0 if self.version == 0 else -1

    def state(self) -> SpeculationState:
        return SpeculationState(
            settings=asdict(self.settings),
            version=self.version,
            updated_at=self.updated_at,
            updated_by=self.updated_by,
            reason=self.reason,
            replicas=[
                ReplicaSpeculation(replica_id=rid, version=v, error=e)
                for rid, v, e in zip(
                    self.links.replica_ids,
                    self._replica_version,
                    self._replica_error,
                    strict=True,
                )
            ],
        )

    # ------------------------------------------------------------------ finished groups
    def group_done(self, group_id: str) -> None:
        self._released.append(group_id)

    @property
    def wants_flush(self) -> bool:
        return bool(self._released) and not self._flushing

    async def flush(self, live: Sequence[int]) -> None:
        """Release the finished groups so far on every live replica (bounded calls)."""
        if self._flushing:
            return
        self._flushing = True
        try:
            while self._released:
                batch = self._released[: self.max_release_batch]
                del self._released[: self.max_release_batch]
                await asyncio.gather(
                    self._release_shared(batch), *(self._release(i, batch) for i in live)
                )
        finally:
            self._flushing = False

    async def _release_shared(self, batch: list[str]) -> None:
        if self.shared is None:
            return
        try:
            await asyncio.wait_for(self.shared.release(batch), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - the draft server expires idle groups
            log.debug("release of %d groups on the draft server failed: %r", len(batch), exc)

    async def reset_shared(self) -> None:
        """Drop every group text the draft server holds (they are the old weights')."""
        if self.shared is None:
            return
        try:
            await asyncio.wait_for(self.shared.reset(), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - old texts only make drafts worse
            log.warning("draft server reset after new weights failed: %r", exc)

    async def _release(self, i: int, batch: list[str]) -> None:
        try:
            await asyncio.wait_for(self.links.release_groups(i, batch), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - engines also drop idle groups themselves
            log.debug("release of %d groups on replica %d failed: %r", len(batch), i, exc)
