"""Health probes of the engine replicas, every ``health_period_s`` and on demand.

Invariant: a replica is made HEALTHY only by a probe that found it answering on the current
weights; one on other weights is STALE and loads them first (``WeightUpdater.out_of_date``), one
that does not answer within ``replica_call_timeout_s`` is left to the pool (``ReplicaPool.probe``:
DOWN, its chunks reclaimed). Each probe of a live replica is one ``ReplicaLoadSample`` event.
Each round probes every replica at once and reads their answers together, so a scheduler that
restarted adopts the newest weights they report before any of them rejoins; and before a replica
first joins a scheduler, the chunks it runs (a gone scheduler's) are aborted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from app.api import ReplicaHealth, ReplicaState
from app.serve.scheduler.replica_pool import ReplicaPool
from app.serve.scheduler.weight_updater import WeightUpdater
from core.engine import EngineLoad
from core.events import EventSink, ReplicaLoadSample

log = logging.getLogger("seer.dispatcher")


class ReplicaProbes:
    """The probes of every replica of ``pool`` (see the module invariant); ``reserved()``: the
    KV tokens the scheduler holds reserved on each replica."""

    def __init__(
        self,
        pool: ReplicaPool,
        updater: WeightUpdater,
        period_s: float,
        reserved: Callable[[], list[int]],
        sink: EventSink | None = None,
    ) -> None:
        self.pool = pool
        self.updater = updater
        self.period_s = period_s
        self.reserved = reserved
        self.sink = sink
        self._met: set[int] = set()  # replicas that answered this scheduler (see _first_contact)

    async def probe(self, i: int) -> None:
        """One bounded health probe of replica i: it rejoins when it answers on the current
        weights (on others it loads them first)."""
        await self._admit(i, await self.pool.probe(i))

    async def _first_contact(self, i: int) -> bool:
        """Before replica i first answers to this scheduler: every chunk it runs was sent by
        one that is gone (its callers with it), and is aborted. False when the abort was not
        answered within ``replica_call_timeout_s`` (then it is not admitted this round)."""
        if i in self._met:
            return True
        rep = self.pool[i]
        try:
            n = await asyncio.wait_for(
                self.pool.links.abort_all(i), self.pool.config.replica_call_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - not admitted; the next probe tries again
            rep.error = f"aborting what a gone scheduler left running failed: {exc!r}"
            return False
        self._met.add(i)
        if n:
            log.warning("replica %s: aborted %d chunks a gone scheduler left", rep.replica_id, n)
        return True

    async def _admit(self, i: int, load: EngineLoad | None) -> None:
        if load is None or not await self._first_contact(i):
            return
        if self.updater.out_of_date(i, load.policy_version):
            return
        if self.sink is not None:
            self.sink.emit(
                ReplicaLoadSample(
                    self.pool[i].replica_id,
                    time.time(),
                    load.running,
                    load.waiting,
                    load.chunks_in_flight,
                    load.kv_usage,
                    self.reserved()[i],
                )
            )
        self.pool.set_state(i, ReplicaState.HEALTHY)

    async def probe_all(self) -> None:
        """Every replica at once; what they answered may first tell a scheduler that started
        after a weight update which weights the service runs (``WeightUpdater.adopt``)."""
        loads = await asyncio.gather(*(self.pool.probe(i) for i in range(len(self.pool))))
        self.updater.adopt([load for load in loads if load is not None])
        await asyncio.gather(*(self._admit(i, load) for i, load in enumerate(loads)))

    async def forever(self) -> None:
        """Probe every replica each ``period_s`` until cancelled."""
        while True:
            await self.probe_all()
            await asyncio.sleep(self.period_s)

    def health(self) -> list[ReplicaHealth]:
        return self.pool.health(self.reserved())
