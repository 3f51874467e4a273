"""The scheduler's event trace: turns its state changes into ``core.events`` records.

Invariant: one entry per request from submission until it is terminal (then dropped), one
length list per group until its last request is terminal, so memory follows the live work.
Only built when the scheduler is given a real sink: the default costs one ``is None`` test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.events import (
    ChunkDone,
    EventSink,
    GroupEstimate,
    GroupFinished,
    RequestFinished,
)
from core.scheduling.estimate import GroupStats


@dataclass(slots=True)
class _Req:
    group_id: str
    prompt_key: str
    queued_at: float
    started_at: float | None = None
    chunk_started_at: float | None = None  # dispatch time of its latest chunk
    replicas: list[str] = field(default_factory=list)


class EventTrace:
    """Builds and emits the scheduler's events (see the module invariant)."""

    def __init__(self, sink: EventSink, clock: Callable[[], float]) -> None:
        self.sink = sink
        self.clock = clock
        self._req: dict[str, _Req] = {}
        self._lengths: dict[str, list[int]] = {}
        self._keys: dict[str, str] = {}  # group id -> prompt key, while the group is open
        self.policy_version = 0  # tags the requests that end from now on (set by the caller)

    def submitted(self, group_id: str, prompt_key: str, request_ids: Sequence[str]) -> None:
        now = self.clock()
        self._lengths[group_id] = []
        self._keys[group_id] = prompt_key
        for rid in request_ids:
            self._req[rid] = _Req(group_id, prompt_key, now)

    def joined(self, group_id: str, request_ids: Sequence[str]) -> None:
        prompt_key = self._keys[group_id]
        now = self.clock()
        for rid in request_ids:
            self._req[rid] = _Req(group_id, prompt_key, now)

    def dispatched(self, request_id: str, replica_id: str) -> None:
        req = self._req[request_id]
        req.chunk_started_at = self.clock()
        if req.started_at is None:
            req.started_at = req.chunk_started_at
        req.replicas.append(replica_id)

    def chunk_done(
        self,
        request_id: str,
        new_tokens: int,
        generated: int,
        reason: str,
        is_probe: bool,
        drafted: int = 0,
    ) -> None:
        req = self._req[request_id]
        self.sink.emit(
            ChunkDone(
                request_id=request_id,
                group_id=req.group_id,
                replica_id=req.replicas[-1],
                at=self.clock(),
                new_tokens=new_tokens,
                generated=generated,
                finish_reason=reason,
                is_probe=is_probe,
                started_at=req.chunk_started_at,
                drafted=drafted,
            )
        )

    def request_ended(self, request_id: str, length: int, reason: str, is_probe: bool) -> None:
        req = self._req.pop(request_id)
        if reason != "cancelled":
            self._lengths[req.group_id].append(length)
        self.sink.emit(
            RequestFinished(
                request_id=request_id,
                group_id=req.group_id,
                prompt_key=req.prompt_key,
                length=length,
                chunks=len(req.replicas),
                is_probe=is_probe,
                replicas=tuple(req.replicas),
                finish_reason=reason,
                queued_at=req.queued_at,
                started_at=req.started_at,
                finished_at=self.clock(),
                policy_version=self.policy_version,
            )
        )

    def estimate(self, group_id: str, g: GroupStats) -> None:
        mu, _ = g.log_mean()
        self.sink.emit(
            GroupEstimate(
                group_id=group_id,
                at=self.clock(),
                max_estimate=g.paper_estimate(),
                mean_estimate=min(g.cap, max(1, round(math.exp(mu)))),
                finished=g.n_finished,
            )
        )

    def group_ended(self, group_id: str) -> None:
        lengths = self._lengths.pop(group_id)
        del self._keys[group_id]
        self.sink.emit(GroupFinished(group_id=group_id, at=self.clock(), lengths=tuple(lengths)))
