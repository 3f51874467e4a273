"""The draft server deployment (the paper's DGDS): group texts shared by every engine replica.

Invariant: one replica holds one ``core.drafting.shared.SharedGroups``; every method is a bounded
in-memory operation (no I/O, no wait), so an exchange costs time proportional to its batch. Engine
replicas reach it through their sync loop (``app.serve.replica.engine_replica``), never from the
decode path; the scheduler releases finished groups and resets it when the weights change. If it is
down, exchanges time out, replicas draft from their own data and rollouts go on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import serve

from app.config import DraftServerConfig
from app.serve import logs
from app.serve.options import SINGLETON
from core.drafting.shared import SharedGroups, SharedStats, SyncBatch, SyncReply

log = logging.getLogger("seer.draft_server")


@serve.deployment(**SINGLETON)
class DraftServer:
    async def __init__(self, config: DraftServerConfig) -> None:  # type: ignore[misc]
        logs.configure()
        self.groups = SharedGroups(
            max_groups=config.max_groups,
            max_tokens=config.max_tokens,
            group_ttl_s=config.group_ttl_s,
        )

    async def exchange(self, batch: SyncBatch) -> SyncReply:
        return self.groups.exchange(batch)

    async def release(self, group_ids: list[str]) -> int:
        return self.groups.release(group_ids)

    async def reset(self) -> int:
        return self.groups.reset()

    async def stats(self) -> SharedStats:
        return self.groups.stats()


class DraftServerLink:
    """The scheduler's side: release, reset and stats over a handle, each call bounded."""

    def __init__(self, handle: Any, timeout_s: float) -> None:
        self.handle = handle
        self.timeout_s = timeout_s

    async def release(self, group_ids: list[str]) -> int:
        return int(await asyncio.wait_for(self.handle.release.remote(group_ids), self.timeout_s))

    async def reset(self) -> int:
        return int(await asyncio.wait_for(self.handle.reset.remote(), self.timeout_s))

    async def stats(self) -> SharedStats | None:
        """None when the server does not answer in time."""
        try:
            stats: SharedStats = await asyncio.wait_for(self.handle.stats.remote(), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - metrics then show no draft server figures
            log.debug("draft server stats unavailable: %r", exc)
            return None
        return stats
