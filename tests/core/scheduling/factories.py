"""Shared factories of the scheduler tests: groups and replicas by count, and a loop that runs
every open request to its length."""

from __future__ import annotations

from core.engine.types import FinishReason
from core.scheduling import BaseScheduler, GroupSpec, ReplicaSpec


def groups(n: int, g: int, max_tokens: int = 100, prompt: int = 10) -> list[GroupSpec]:
    """``n`` groups ``g0``.. of ``g`` requests ``g0-0``.., each capped at ``max_tokens``."""
    return [
        GroupSpec(f"g{i}", tuple(f"g{i}-{k}" for k in range(g)), max_tokens, prompt)
        for i in range(n)
    ]


def replicas(n: int, kv: int = 10_000, running: int = 8) -> list[ReplicaSpec]:
    return [ReplicaSpec(f"r{i}", kv, running) for i in range(n)]


def run_to_end(s: BaseScheduler, lengths: dict[str, int]) -> None:
    """Complete every chunk as soon as it is scheduled until no request is open; request x
    stops at ``lengths[x]`` tokens."""
    while not s.done:
        decisions = s.schedule()
        assert decisions, "stuck: requests open and nothing scheduled"
        for d in decisions:
            left = lengths[d.request_id] - d.generated
            if left <= d.chunk_cap:
                s.complete(d.request_id, left, FinishReason.STOP)
            else:
                s.complete(d.request_id, d.chunk_cap, FinishReason.CHUNK)
