"""Chunks in flight: each one call to its replica, abortable and reclaimable.

Invariants:
- A request has at most one chunk in flight, and every chunk in flight ends in exactly one
  outcome handed to ``done``: its ``ChunkResult``, the exception its call raised, or
  ``ReplicaUnavailable`` when it was reclaimed (its call cancelled because its replica became
  unreachable: a chunk sent to a replica whose node died may otherwise wait in Serve's router for
  a replica that never comes back).
- An abort is one call bounded by ``call_timeout_s``; the chunk it aborts reports either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from app.rollout import RequestRun
from app.serve.scheduler.jobs import Job
from app.serve.scheduler.replica_pool import EngineLinks, ReplicaUnavailable
from core.engine import ChunkRequest, ChunkResult
from core.scheduling.types import ChunkDecision

log = logging.getLogger("seer.dispatcher")

Outcome = ChunkResult | BaseException


@dataclass
class Flight:
    decision: ChunkDecision
    job: Job
    run: RequestRun
    started: float
    restart: bool = False  # aborted for a weight update: its tokens are dropped
    task: asyncio.Future[None] | None = None
    reclaimed: str | None = None  # why its replica's call was cancelled (it became unreachable)


class Flights:
    """The chunks in flight, by request id (see the module invariants). ``spawn`` runs a call
    beside the loop; ``done(flight, outcome)`` hears how each chunk ended."""

    def __init__(
        self,
        links: EngineLinks,
        call_timeout_s: float,
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Future[None]],
        done: Callable[[Flight, Outcome], None],
    ) -> None:
        self.links = links
        self.call_timeout_s = call_timeout_s
        self.spawn = spawn
        self.done = done
        self._by_request: dict[str, Flight] = {}

    def __len__(self) -> int:
        return len(self._by_request)

    def __iter__(self) -> Iterator[Flight]:
        return iter(list(self._by_request.values()))

    def __getitem__(self, request_id: str) -> Flight:
        return self._by_request[request_id]

    def start(self, flight: Flight, chunk: ChunkRequest) -> None:
        """Send ``chunk`` to the replica ``flight.decision`` names."""
        self._by_request[flight.decision.request_id] = flight
        flight.task = self.spawn(self._call(flight, chunk))

    def landed(self, flight: Flight) -> None:
        """``flight``'s outcome is being handled: it is no longer in flight."""
        del self._by_request[flight.decision.request_id]

    async def _call(self, flight: Flight, chunk: ChunkRequest) -> None:
        try:
            outcome: Outcome = await self.links.run_chunk(flight.decision.replica, chunk)
        except asyncio.CancelledError:
            if flight.reclaimed is None:
                raise
            outcome = ReplicaUnavailable(flight.reclaimed)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, which decides
            outcome = exc
        self.done(flight, outcome)

    def abort(self, flight: Flight) -> None:
        """Ask its replica to abort the chunk (bounded, beside the loop)."""
        self.spawn(self._abort(flight))

    async def _abort(self, flight: Flight) -> None:
        d = flight.decision
        try:
            await asyncio.wait_for(
                self.links.abort(d.replica, d.request_id, d.generated), self.call_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - the chunk reports back either way
            log.warning("abort of %s on replica %d failed: %r", d.request_id, d.replica, exc)

    def reclaim(self, replica: int, why: str) -> None:
        """Cancel the calls of every chunk still out on ``replica``; each reports as lost."""
        for flight in self:
            if flight.decision.replica == replica and flight.reclaimed is None and flight.task:
                flight.reclaimed = why
                flight.task.cancel()
