"""The engine replicas as the dispatcher sees them: each one's state, last load and failures.

Invariants:
- A replica's state changes only in ``set_state``, and every change is told to the pool's
  ``PoolListener`` (the dispatcher, which keeps the scheduler's view of the replica in step).
  STARTING -> HEALTHY <-> DOWN | STALE; any -> FAILED, which is for good: no answer revives it.
- Every probe is bounded by ``replica_call_timeout_s``; a replica that does not answer is told
  to the listener as unreachable (its chunks still out are reclaimed there).
- Losses count per incident: the other chunks of a replica already DOWN failing too count once;
  ``max_replica_failures`` incidents within ``failure_window_s`` make it FAILED.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from app.api import ReplicaHealth, ReplicaState
from app.config import ServiceConfig
from app.serve.scheduler.metrics import ServiceMetrics
from core.drafting.step_drafter import DraftSettings
from core.engine import ChunkRequest, ChunkResult, EngineLoad
from core.scheduling.types import ReplicaSpec

log = logging.getLogger("seer.dispatcher")


class ReplicaUnavailable(RuntimeError):
    """The replica could not run the call (its process died, it is restarting, it timed out)."""


class EngineLinks(Protocol):
    """How the dispatcher reaches the engine replicas, by index."""

    @property
    def replica_ids(self) -> Sequence[str]: ...

    async def run_chunk(self, replica: int, chunk: ChunkRequest) -> ChunkResult: ...

    async def abort(self, replica: int, request_id: str, generated: int) -> bool:
        """Abort the chunk of ``request_id`` that continues at ``generated`` tokens, also when
        it has not reached the replica yet; True when it was running."""
        ...

    async def load(self, replica: int) -> EngineLoad: ...

    async def abort_all(self, replica: int) -> int:
        """Abort every chunk running on the replica; returns how many were."""
        ...

    async def configure_speculation(
        self, replica: int, settings: DraftSettings
    ) -> DraftSettings: ...

    async def release_groups(self, replica: int, group_ids: list[str]) -> int: ...

    async def update_weights(
        self, replica: int, path: str, version: int, digest: str | None
    ) -> str:
        """Load ``path`` as ``version``; with ``digest``, refuse a checkpoint of another one
        (nothing loaded). Returns the digest of what was loaded."""
        ...


@dataclass
class Replica:
    replica_id: str
    state: ReplicaState = ReplicaState.STARTING
    since: float = field(default_factory=time.time)
    failures: deque[float] = field(default_factory=deque)
    error: str | None = None
    load: EngineLoad | None = None
    syncing: bool = False  # loading the current weights before it rejoins


class PoolListener(Protocol):
    """Who keeps the rest of the service in step with the replicas' states."""

    def replica_changed(self, i: int, state: ReplicaState) -> None:
        """Replica i is now ``state`` (HEALTHY: back in rotation; anything else: out)."""
        ...

    def replica_unreachable(self, i: int, why: str) -> None:
        """Replica i did not answer: its chunks still out will not come back."""
        ...


class ReplicaPool:
    """The replicas' states, loads and failure history (see the module invariants)."""

    def __init__(
        self,
        links: EngineLinks,
        config: ServiceConfig,
        metrics: ServiceMetrics,
        listener: PoolListener,
    ) -> None:
        self.links = links
        self.config = config
        self.metrics = metrics
        self.listener = listener
        self.replicas = [Replica(rid) for rid in links.replica_ids]

    def __len__(self) -> int:
        return len(self.replicas)

    def __getitem__(self, i: int) -> Replica:
        return self.replicas[i]

    def live(self) -> list[int]:
        """Indices of the replicas in rotation."""
        return [i for i, r in enumerate(self.replicas) if r.state is ReplicaState.HEALTHY]

    def spec(self, i: int) -> ReplicaSpec:
        """Capacity of replica i from its last load report (engine config until it answers)."""
        eng = self.config.engine
        load = self.replicas[i].load
        kv = load.kv_capacity_tokens if load is not None else 0
        running = load.max_running if load is not None else 0
        return ReplicaSpec(
            self.replicas[i].replica_id,
            kv or eng.max_model_len * eng.max_num_seqs,
            running or eng.max_num_seqs,
        )

    def set_state(self, i: int, state: ReplicaState, error: str | None = None) -> None:
        rep = self.replicas[i]
        if rep.state is state:
            return
        level = logging.INFO if state is ReplicaState.HEALTHY else logging.WARNING
        log.log(level, "replica %s: %s -> %s (%s)", rep.replica_id, rep.state, state, error)
        rep.state = state
        rep.since = time.time()
        rep.error = error
        self.listener.replica_changed(i, state)

    def lost(self, i: int, error: str, now: float) -> None:
        """Replica i lost a chunk (it was unreachable): one incident, DOWN or FAILED."""
        rep = self.replicas[i]
        if rep.state in (ReplicaState.DOWN, ReplicaState.FAILED):
            return  # the same incident: its other chunks failing too count once
        rep.failures.append(now)
        while rep.failures and rep.failures[0] < now - self.config.failure_window_s:
            rep.failures.popleft()
        self.metrics.replica_failures.labels(rep.replica_id).inc()
        if len(rep.failures) >= self.config.max_replica_failures:
            self.set_state(i, ReplicaState.FAILED, error)
        else:
            self.set_state(i, ReplicaState.DOWN, error)
        self.listener.replica_unreachable(i, error)

    async def probe(self, i: int) -> EngineLoad | None:
        """One bounded health probe of replica i: its load when it answered (kept as its last
        load), None when it did not (then DOWN, its chunks reclaimed) or it is FAILED. The
        caller decides whether an answering replica rejoins (its weights may be stale)."""
        rep = self.replicas[i]
        if rep.state is ReplicaState.FAILED:
            return None
        try:
            load = await asyncio.wait_for(self.links.load(i), self.config.replica_call_timeout_s)
        except Exception as exc:  # noqa: BLE001 - unreachable for any reason
            why = f"health probe failed: {exc!r}"
            if rep.state in (ReplicaState.HEALTHY, ReplicaState.STALE):
                self.set_state(i, ReplicaState.DOWN, why)
            elif rep.state is ReplicaState.DOWN:
                rep.error = why
            self.listener.replica_unreachable(i, why)
            return None
        if rep.state is ReplicaState.FAILED:
            return None  # it failed for good while the probe was out
        rep.load = load
        return load

    def mark_loaded(self, replicas: list[int], version: int) -> None:
        """These replicas loaded ``version``: /healthz shows it before their next probe."""
        for i in replicas:
            rep = self.replicas[i]
            if rep.load is not None:
                rep.load = rep.load.model_copy(update={"policy_version": version})

    def health(self, reserved_kv_tokens: Sequence[int]) -> list[ReplicaHealth]:
        return [
            ReplicaHealth(
                replica_id=rep.replica_id,
                node_id=rep.load.node_id if rep.load is not None else "",
                gpu_ids=list(rep.load.gpu_ids) if rep.load is not None else [],
                state=rep.state,
                since=rep.since,
                failures=len(rep.failures),
                error=rep.error,
                load=rep.load,
                reserved_kv_tokens=reserved_kv_tokens[i],
            )
            for i, rep in enumerate(self.replicas)
        ]
