"""Routing policies: which replica runs a chunk.

Invariant: a routing function only returns a replica that can admit the chunk without
preemption, i.e. ``running < max_running`` and ``reserved + need <= capacity``; it returns -1
when no replica can. Reservations are the scheduler's own bookkeeping (context + chunk budget of
every in-flight chunk), so admission never depends on a stale load report.

``ReplicaTable`` keeps a tournament tree over the replicas (per node: the most free KV among
its replicas with a free slot, and their smallest load), so the least-loaded replica that fits
is found without scanning every replica, and a chunk that fits nowhere is refused in O(1).
The tree mirrors the lists: change them only through ``add`` and ``set_limits``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

_NO_ROOM = -(1 << 62)  # a replica without a free slot admits no chunk, whatever its KV
_INF = float("inf")


@dataclass(slots=True)
class ReplicaTable:
    """Mutable per-replica admission state, indexed by replica position."""

    capacity: list[int]
    max_running: list[int]
    running: list[int]
    reserved: list[int]
    _size: int = field(init=False, default=1)
    _room: list[int] = field(init=False, default_factory=list)  # max capacity - reserved
    _low: list[float] = field(init=False, default_factory=list)  # min load
    _first: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.capacity)
        size = 1
        while size < n:
            size *= 2
        self._size = size
        self._room = [_NO_ROOM] * (2 * size)
        self._low = [_INF] * (2 * size)
        self._first = [0] * (2 * size)  # per node: its leftmost replica index
        for node in range(2 * size - 1, 0, -1):
            self._first[node] = node - size if node >= size else self._first[2 * node]
        for i in range(n):
            self._set_leaf(i)
        room, low = self._room, self._low
        for node in range(size - 1, 0, -1):
            room[node] = max(room[2 * node], room[2 * node + 1])
            low[node] = min(low[2 * node], low[2 * node + 1])

    def fits(self, i: int, need: int) -> bool:
        return self.running[i] < self.max_running[i] and self.reserved[i] + need <= self.capacity[i]

    def load(self, i: int) -> float:
        """KV-reservation fraction + running-slot fraction (what ``least_loaded`` minimises)."""
        return self.reserved[i] / self.capacity[i] + self.running[i] / self.max_running[i]

    def add(self, i: int, running: int, reserved: int) -> None:
        """Change replica ``i``'s chunks in flight and reserved KV tokens by these deltas."""
        self.running[i] += running
        self.reserved[i] += reserved
        self._update(i)

    def set_limits(self, i: int, capacity: int, max_running: int) -> None:
        """Replica ``i``'s KV capacity and running-chunk limit (0 = out of rotation)."""
        self.capacity[i] = capacity
        self.max_running[i] = max_running
        self._update(i)

    def least_loaded(self, need: int) -> int:
        """Replica with the smallest load among those that fit ``need`` KV tokens, the lowest
        index on ties (as a scan in index order would pick), or -1."""
        room, low, first = self._room, self._low, self._first
        if room[1] < need:
            return -1
        size = self._size
        best = size  # (best_load, best): the best (load, index) found so far
        best_load = 3.0  # above any load (each fraction is <= 1 where a slot is free)
        stack = [1]  # nodes holding a replica that fits
        while stack:
            node = stack.pop()
            while True:
                x = low[node]
                # every replica under node has a load >= x and an index >= first[node]
                if x > best_load or (x == best_load and first[node] > best):
                    break  # none of them can beat (best_load, best)
                if node >= size:
                    best, best_load = node - size, x
                    break
                a = 2 * node
                b = a + 1
                if low[b] < low[a]:
                    a, b = b, a  # the child with the smaller load first (the left one on ties)
                if room[a] >= need:
                    if room[b] >= need:
                        stack.append(b)
                    node = a
                else:
                    node = b  # room[node] >= need: one child has the room
        return best if best < size else -1

    def _set_leaf(self, i: int) -> None:
        node = self._size + i
        if self.running[i] < self.max_running[i]:
            self._room[node] = self.capacity[i] - self.reserved[i]
            self._low[node] = self.load(i)
        else:
            self._room[node] = _NO_ROOM
            self._low[node] = _INF

    def _update(self, i: int) -> None:
        self._set_leaf(i)
        room, low = self._room, self._low
        node = (self._size + i) >> 1
        while node:
            a, b = room[2 * node], room[2 * node + 1]
            r = a if a >= b else b
            x, y = low[2 * node], low[2 * node + 1]
            m = x if x <= y else y
            if room[node] == r and low[node] == m:
                break  # the ancestors already hold these values
            room[node] = r
            low[node] = m
            node >>= 1


RoutingFn = Callable[[ReplicaTable, int, int, int], int]
"""(table, kv_replica or -1, need in KV tokens, cache threshold) -> replica index or -1."""


def least_loaded(table: ReplicaTable, kv_replica: int, need: int, threshold: int) -> int:
    """Replica with the smallest KV-reservation + running-slot fraction that fits the chunk."""
    return table.least_loaded(need)


def cache_aware(table: ReplicaTable, kv_replica: int, need: int, threshold: int) -> int:
    """OSDI rule: stay on the replica holding the request's KV unless its in-flight count
    exceeds the least-loaded replica's by more than ``threshold``."""
    best = table.least_loaded(need)
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
