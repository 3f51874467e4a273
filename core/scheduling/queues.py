"""The schedulers' ready queues: which queued request goes next, by lazy deletion.

Invariant: an entry names a request slot and a tag it had when the entry was pushed (its
``version`` in a heap, its enqueue ``stamp`` in the FIFO line); it is live iff the request
still has that tag and is QUEUED, and only a live entry is ever returned (stale ones are
skipped when met, dropped by ``compact``). Every change of a request's state bumps its version,
so the queues never need to find an entry to delete it. In ``ReadyQueues`` a queued request has
exactly one live entry in the probe heap (a probe) or the keyed heap (any other), plus one in
the explore heap while it has generated nothing (when exploring) and one in the FIFO line (when
starvation is guarded); the key of that keyed entry is what the ordering gives now (``rekey``
is called whenever an input of it changes).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable

from core.scheduling.config import SchedulerConfig
from core.scheduling.ordering import (
    GROUP_KEYED_ORDERINGS,
    OrderingFn,
    OrderingState,
    fifo_key,
    get_ordering,
)
from core.scheduling.tables import RequestTable
from core.scheduling.types import RequestPhase

_QUEUED = RequestPhase.QUEUED


class FifoLine:
    """Queued requests in the order they were (re-)queued: the veRL baseline's only queue,
    and the divided scheduler's starvation guard (the longest-waiting request)."""

    __slots__ = ("_entries", "_phase", "_stamp")

    def __init__(self, requests: RequestTable) -> None:
        self._entries: deque[tuple[int, int]] = deque()
        self._stamp = requests.stamp
        self._phase = requests.phase

    def append(self, r: int) -> None:
        """Queued request ``r`` (its stamp just bumped) waits at the back."""
        self._entries.append((r, self._stamp[r]))

    def appendleft(self, r: int) -> None:
        """Queued request ``r`` goes back to the front, keeping its stamp (its waiting place)."""
        self._entries.appendleft((r, self._stamp[r]))

    def pop(self) -> int:
        """The longest-waiting live request (its entry removed), or -1."""
        entries, stamp, phase = self._entries, self._stamp, self._phase
        while entries:
            r, st = entries.popleft()
            if st == stamp[r] and phase[r] is _QUEUED:
                return r
        return -1

    def compact(self, new_r: dict[int, int]) -> None:
        """Keep the live entries of the kept slots (renumbered by ``new_r``), in order; the
        request table is already compacted."""
        stamp = self._stamp
        self._entries = deque(
            (new_r[r], st) for r, st in self._entries if r in new_r and st == stamp[new_r[r]]
        )


class ReadyQueues:
    """The divided scheduler's queues: probes (fewest generated first), the ordering's keyed
    heap (smallest key first), the explore heap (unstarted, largest key first) and, with a
    starvation interval, the FIFO line."""

    __slots__ = (
        "_explore",
        "_explore_interval",
        "_group_keyed",
        "_heap",
        "_order",
        "_probes",
        "_requests",
        "_starvation_interval",
        "_state",
        "line",
    )

    def __init__(self, config: SchedulerConfig, state: OrderingState) -> None:
        """``state``: the scheduler the ordering reads (its request table holds the tags)."""
        self._state = state
        self._requests = state.requests
        self._order: OrderingFn = get_ordering(config.ordering)
        self._group_keyed = config.ordering in GROUP_KEYED_ORDERINGS
        self._explore_interval = config.explore_interval
        self._starvation_interval = config.starvation_interval
        self._heap: list[tuple[float, int, int]] = []
        self._probes: list[tuple[int, int, int]] = []
        self._explore: list[tuple[float, int, int]] = []  # unstarted, shortest estimate first
        self.line = FifoLine(state.requests) if config.starvation_interval > 0 else None

    def add(self, r: int) -> None:
        """Request ``r`` was just queued (its version and stamp bumped): its entries, a fresh
        key."""
        if self.line is not None:
            self.line.append(r)
        self.push(r)

    def put_back(self, skipped: list[int]) -> None:
        """Requests popped but not dispatched (no replica fits them), queued again: each goes
        back where it was, a fresh entry (version bumped) with its key as last computed
        (nothing it depends on changed) and the front of the line, in this order."""
        version, keys, line, push = self._requests.version, self._requests.key, self.line, self.push
        for r in skipped:
            version[r] += 1
            push(r, keys[r])
            if line is not None:
                line.appendleft(r)

    def push(self, r: int, key: float | None = None) -> None:
        """(Re-)insert the live entry of queued request ``r`` in its heap; ``key``: its key as
        last computed, when nothing it depends on changed since (else computed now)."""
        q = self._requests
        ver = q.version[r]
        if q.is_probe[r]:
            heapq.heappush(self._probes, (q.generated[r], r, ver))
        else:
            if key is None:
                key = self._order(self._state, r)
                q.key[r] = key
            heapq.heappush(self._heap, (key, r, ver))
            if self._explore_interval > 0 and q.generated[r] == 0:
                heapq.heappush(self._explore, (-key, r, ver))

    def pop(self, dispatches: int) -> int:
        """The request the next slot goes to (its entry removed), or -1: a probe, else every
        ``explore_interval``-th slot (``dispatches`` made so far) the unstarted request with
        the smallest estimate, every ``starvation_interval``-th the longest waiting, else the
        smallest key."""
        q = self._requests
        version = q.version
        phase = q.phase
        probes = self._probes
        while probes:
            _, r, ver = heapq.heappop(probes)
            if ver == version[r] and phase[r] is _QUEUED:
                return r
        ei = self._explore_interval
        if ei > 0 and dispatches % ei == ei - 1:
            explore = self._explore
            while explore:
                _, r, ver = heapq.heappop(explore)
                if ver == version[r] and phase[r] is _QUEUED:
                    return r
        si = self._starvation_interval
        if si > 0 and dispatches % si == si - 1 and self.line is not None:
            r = self.line.pop()
            if r >= 0:
                return r
        heap = self._heap
        while heap:
            _, r, ver = heapq.heappop(heap)
            if ver == version[r] and phase[r] is _QUEUED:
                return r
        return -1

    def rekey(self, requests: Iterable[int], skip: int) -> None:
        """Recompute the keys of the queued non-probe requests among ``requests`` (but
        ``skip``); only a key that changed is re-pushed (an unchanged live entry already sits
        where a fresh one would: same key, same request). Orderings keyed by (group, generated
        tokens) compute each such pair once."""
        order = self._order
        state = self._state
        q = self._requests
        phase = q.phase
        is_probe = q.is_probe
        keys = q.key
        group_of = q.group
        generated = q.generated
        version = q.version
        memo: dict[tuple[int, int], float] | None = {} if self._group_keyed else None
        for r in requests:
            if r == skip or phase[r] is not _QUEUED or is_probe[r]:
                continue
            if memo is None:
                key = order(state, r)
            else:
                pair = (group_of[r], generated[r])
                found = memo.get(pair)
                if found is None:
                    found = memo[pair] = order(state, r)
                key = found
            if key != keys[r]:
                version[r] += 1
                keys[r] = key
                self.push(r, key)

    def rekey_all(self, queued: int) -> None:
        """Recompute every queued key (each live queued non-probe request has exactly one live
        entry in the keyed heap); ``queued``: requests queued now, to tell when the stale
        entries are worth dropping."""
        version = self._requests.version
        self.rekey([r for _, r in self.live_keys()], skip=-1)
        if len(self._heap) > 2 * queued + 64:  # drop the stale entries
            self._heap = [e for e in self._heap if e[2] == version[e[1]]]
            heapq.heapify(self._heap)
            self._explore = [e for e in self._explore if e[2] == version[e[1]]]
            heapq.heapify(self._explore)

    def live_keys(self) -> list[tuple[float, int]]:
        """(key, request) of every live entry of the keyed heap, in heap order (a phase check
        is left to the caller: an entry of a request cancelled while queued still counts)."""
        version = self._requests.version
        return [(key, r) for key, r, ver in self._heap if ver == version[r]]

    def compact(self, new_r: dict[int, int]) -> None:
        """Keep the live entries of the kept slots (renumbered by ``new_r``), heap order
        restored; the request table is already compacted. Under ``fifo`` (the one key that
        is the slot) the keys are renumbered too."""
        version = self._requests.version

        def live(entries: list[tuple[float, int, int]]) -> list[tuple[float, int, int]]:
            kept = [
                (key, new_r[r], ver)
                for key, r, ver in entries
                if r in new_r and ver == version[new_r[r]]
            ]
            heapq.heapify(kept)
            return kept

        if self.line is not None:
            self.line.compact(new_r)
        probes = [
            (gen, new_r[r], ver)
            for gen, r, ver in self._probes
            if r in new_r and ver == version[new_r[r]]
        ]
        heapq.heapify(probes)
        self._probes = probes
        self._heap = live(self._heap)
        self._explore = live(self._explore)
        if self._order is fifo_key:  # the only key that is the request slot: renumber
            self._heap = [(float(r), r, ver) for _, r, ver in self._heap]
            heapq.heapify(self._heap)
            self._requests.key[:] = [float(r) for r in range(len(self._requests))]
