"""The divided-rollout scheduler: a pure state machine shared by the Serve app and the simulator.

Invariant (beyond ``core.scheduling.base``'s): a chunk is dispatched only where its KV
reservation (prompt + generated + chunk budget, at most ``chunk_tokens`` new tokens) fits and a
slot is free, so the scheduler never causes preemption. Dispatch order: probes first (smallest
generated first), then every ``explore_interval``-th slot to the shortest-looking unstarted
request, every ``starvation_interval``-th slot to the longest-waiting request, otherwise the
ordering policy's smallest key (``queues.ReadyQueues``; every queued key is current: it is
re-keyed whenever the group evidence it reads changes, and all of them every ``rekey_every``
finished requests). Routing: the configured routing policy, except that a request with at least
``rebalance_tokens`` generated is routed as if it held no KV (least-loaded replica that fits).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.scheduling.base import BaseScheduler
from core.scheduling.estimate import GroupStats
from core.scheduling.ordering import ORACLE_ORDERINGS, STATIC_ORDERINGS
from core.scheduling.queues import ReadyQueues
from core.scheduling.routing import get_routing
from core.scheduling.types import ChunkDecision

_MAX_SKIPS = 8  # queued requests set aside per schedule() call when no replica fits them


class Scheduler(BaseScheduler):
    """Divided rollout + context-aware ordering (the policies with ``config.divided``)."""

    _divided = True

    def _start(self) -> None:
        config = self.config
        self._route = get_routing(config.routing)
        self._needs_oracle = config.ordering in ORACLE_ORDERINGS
        self.oracle_lengths: Sequence[int] | None = (
            self.requests.oracle if self._needs_oracle else None
        )
        self._group_keys_depend = config.ordering not in STATIC_ORDERINGS
        self._rekeyed_at = 0  # finished requests when every key was last recomputed
        self._queues = ReadyQueues(config, self)

    def schedule(self) -> list[ChunkDecision]:
        """Dispatch as many queued requests as the replicas can admit, best first."""
        q = self.requests
        generated, max_tokens, kv_replica = q.generated, q.max_tokens, q.kv_replica
        pop, take, route = self._queues.pop, self._take, self._route
        out: list[ChunkDecision] = []
        skipped: list[int] = []
        t = self._table
        chunk = self.config.chunk_tokens
        rebalance = self.config.rebalance_tokens
        threshold = self.config.cache_threshold
        while self._free_slots > 0 and self._n_queued > 0:
            r = pop(self._dispatches)
            if r < 0:
                break
            take(r)
            gen = generated[r]
            budget = min(chunk, max_tokens[r] - gen)
            need = q.prompt[r] + gen + budget
            kv = kv_replica[r]
            rep = route(t, -1 if rebalance and gen >= rebalance else kv, need, threshold)
            if rep < 0:
                skipped.append(r)
                if len(skipped) >= _MAX_SKIPS:
                    break
                continue
            out.append(self._dispatch(r, rep, budget, need, kv))
        if skipped:  # back in line, keeping their waiting position (and their key)
            self._n_queued += len(skipped)
            self._queues.put_back(skipped)
        return out

    # ------------------------------------------------------------------ queues
    def _queue(self, r: int) -> None:
        self._queues.add(r)

    def _compact_queues(self, new_r: dict[int, int]) -> None:
        self._queues.compact(new_r)

    def _key_inputs(self, g: GroupStats) -> object:
        """The group estimates an ordering key may read (None when the ordering reads none)."""
        return (g.log_mean(), g.paper_estimate()) if self._group_keys_depend else None

    def _evidence_changed(self, g: GroupStats, before: object, skip: int) -> None:
        """Every ``rekey_every`` finished requests the population statistics are refreshed and
        every queued key recomputed; otherwise the keys of ``g``'s requests, if its estimates
        moved."""
        if not self._group_keys_depend:
            return
        if self._n_finished - self._rekeyed_at >= self.config.rekey_every:
            self._rekeyed_at = self._n_finished
            self.population.refresh()
            self._queues.rekey_all(self._n_queued)
        elif self._key_inputs(g) != before:
            self._queues.rekey(g.members, skip)
