"""The ``verl`` baseline policy: whole groups handed round-robin to replicas up front.

Invariant: every group goes, whole (all G requests, no chunking), to exactly one replica, and
group k (in submission order, counted over every ``submit``) goes to replica
``(start + k) % num_replicas``. The replica's own engine admits everything it is given, as soon
as it is queued (one chunk per request: up to its max_tokens, reserving prompt + max_tokens);
nothing is re-balanced later, except that a group whose replica left rotation moves, whole, to
the next live replica in the rotation. This is what veRL does and what every Seer policy is
measured against. ``VerlScheduler`` is the ``BaseScheduler`` that runs it (what
``make_scheduler`` builds for a config that is not ``divided``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.scheduling.base import BaseScheduler
from core.scheduling.queues import FifoLine
from core.scheduling.types import ChunkDecision


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """Group ``group_id`` runs, whole, on replica index ``replica``."""

    group_id: str
    replica: int


def verl_assign(
    group_ids: Sequence[str], num_replicas: int, start: int = 0
) -> list[GroupAssignment]:
    """Assign groups round-robin, starting at replica ``start`` (0 <= start < num_replicas)."""
    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
    if not 0 <= start < num_replicas:
        raise ValueError(f"start must be in [0, {num_replicas}), got {start}")
    if len(set(group_ids)) != len(group_ids):
        dup = sorted({g for g in group_ids if list(group_ids).count(g) > 1})
        raise ValueError(f"duplicate group ids: {dup[:5]}")
    return [
        GroupAssignment(group_id=g, replica=(start + k) % num_replicas)
        for k, g in enumerate(group_ids)
    ]


class VerlScheduler(BaseScheduler):
    """The veRL baseline (the ``verl`` policy; a config with ``divided`` False): same public API
    as the divided ``Scheduler``."""

    _divided = False

    def _start(self) -> None:
        self._line = FifoLine(self.requests)
        self._next = 0  # groups placed so far (over every submit): the rotation goes on

    def schedule(self) -> list[ChunkDecision]:
        """Dispatch every queued request, whole, to its group's replica (no admission)."""
        q = self.requests
        out: list[ChunkDecision] = []
        live = [i for i, ok in enumerate(self._available) if ok]
        if not live:
            return out
        while (r := self._line.pop()) >= 0:
            self._take(r)
            gi = q.group[r]
            rep = self.groups.replica[gi]
            if not self._available[rep]:  # its replica left rotation: the group moves, whole
                rep = live[self._next % len(live)]
                self._next += 1
                self.groups.replica[gi] = rep
            budget = q.max_tokens[r] - q.generated[r]
            need = q.prompt[r] + q.max_tokens[r]
            out.append(self._dispatch(r, rep, budget, need, q.kv_replica[r]))
        return out

    def _placed(self, new_groups: list[int]) -> None:
        """New groups continue the round-robin rotation (``verl_assign``)."""
        ids = [self.groups.group_id[g] for g in new_groups]
        n = len(self.replicas)
        for a, gi in zip(verl_assign(ids, n, self._next % n), new_groups, strict=True):
            self.groups.replica[gi] = a.replica
        self._next += len(new_groups)

    def _queue(self, r: int) -> None:
        self._line.append(r)

    def _compact_queues(self, new_r: dict[int, int]) -> None:
        self._line.compact(new_r)
