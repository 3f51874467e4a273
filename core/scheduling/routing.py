"""Routing policies: which replica runs a chunk.

Invariant: a routing function only returns a replica that can admit the chunk without
preemption, i.e. ``running < max_running`` and ``reserved + need <= capacity``; it returns -1
when no replica can. Reservations are the scheduler's own bookkeeping (context + chunk budget of
every in-flight chunk), so admission never depends on a stale load report.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class ReplicaTable:
    """Mutable per-replica admission state, indexed by replica position."""

    capacity: list[int]
    max_running: list[int]
    running: list[int]
    reserved: list[int]

    def fits(self, i: int, need: int) -> bool:
        return self.running[i] < self.max_running[i] and self.reserved[i] + need <= self.capacity[i]


RoutingFn = Callable[[ReplicaTable, int, int, int], int]
"""(table, kv_replica or -1, need in KV tokens, cache threshold) -> replica index or -1."""


def least_loaded(table: ReplicaTable, kv_replica: int, need: int, threshold: int) -> int:
    """Replica with the smallest KV-reservation + running-slot fraction that fits the chunk."""
    best = -1
    best_load = 3.0
    cap = table.capacity
    mr = table.max_running
    run = table.running
    res = table.reserved
    for i in range(len(cap)):
        if run[i] >= mr[i] or res[i] + need > cap[i]:
            continue
        load = res[i] / cap[i] + run[i] / mr[i]
        if load < best_load:
            best, best_load = i, load
    return best


def cache_aware(table: ReplicaTable, kv_replica: int, need: int, threshold: int) -> int:
    """OSDI rule: stay on the replica holding the request's KV unless its in-flight count
    exceeds the least-loaded replica's by more than ``threshold``."""
    best = least_loaded(table, kv_replica, need, threshold)
    if kv_replica < 0 or best < 0 or not table.fits(kv_replica, need):
        return best
    if table.running[kv_replica] - table.running[best] <= threshold:
        return kv_replica
    return best


ROUTINGS: dict[str, RoutingFn] = {"least-loaded": least_loaded, "cache-aware": cache_aware}


def get_routing(name: str) -> RoutingFn:
    try:
        return ROUTINGS[name]
    except KeyError:
        raise ValueError(f"unknown routing {name!r}; valid: {sorted(ROUTINGS)}") from None
