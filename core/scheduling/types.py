"""Typed state in and typed decisions out of the divided-rollout scheduler.

Plain frozen dataclasses with slots (not pydantic): the scheduler makes tens of thousands of
decisions per second and these objects never cross HTTP, Ray or the database on their own; the
Serve app converts a ``ChunkDecision`` into a ``core.engine.types.ChunkRequest`` at its edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RequestPhase(StrEnum):
    """Lifecycle of one request inside the scheduler: QUEUED <-> RUNNING -> FINISHED, and
    QUEUED -> CANCELLED or RUNNING -> (chunk reported) -> CANCELLED when its group is cancelled.
    FINISHED and CANCELLED are terminal."""

    QUEUED = "queued"  # waiting for its next chunk to be dispatched
    RUNNING = "running"  # one chunk is in flight on a replica
    FINISHED = "finished"  # EOS or its own max_tokens reached
    CANCELLED = "cancelled"  # its group was cancelled; no chunk of it is in flight


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """One prompt and its G sampled responses, as submitted by the trainer.

    ``request_ids`` name the G requests (distinct, non-empty); ``max_tokens`` is each request's
    cap on generated tokens (>= 1); ``prompt_tokens`` is the prompt length (>= 1), used for KV
    sizing; ``prompt_key`` identifies the prompt across RL iterations for the length prior
    (defaults to the group id).
    """

    group_id: str
    request_ids: tuple[str, ...]
    max_tokens: int
    prompt_tokens: int
    prompt_key: str | None = None

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must be non-empty")
        if not self.request_ids:
            raise ValueError(f"group {self.group_id!r} has no request_ids")
        if len(set(self.request_ids)) != len(self.request_ids):
            raise ValueError(f"group {self.group_id!r} has duplicate request_ids")
        if self.max_tokens < 1:
            raise ValueError(f"group {self.group_id!r}: max_tokens={self.max_tokens} < 1")
        if self.prompt_tokens < 1:
            raise ValueError(f"group {self.group_id!r}: prompt_tokens={self.prompt_tokens} < 1")


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """Capacity of one engine replica as the scheduler sizes admission.

    ``kv_capacity_tokens`` (>= 1): KV token slots the scheduler may reserve on it;
    ``max_running`` (>= 1): most chunks in flight at once (the engine's max_num_seqs).
    """

    replica_id: str
    kv_capacity_tokens: int
    max_running: int

    def __post_init__(self) -> None:
        if self.kv_capacity_tokens < 1:
            raise ValueError(
                f"replica {self.replica_id!r}: kv_capacity_tokens={self.kv_capacity_tokens} < 1"
            )
        if self.max_running < 1:
            raise ValueError(f"replica {self.replica_id!r}: max_running={self.max_running} < 1")


@dataclass(frozen=True, slots=True)
class ChunkDecision:
    """Run the next chunk of ``request_id`` on replica index ``replica``.

    The chunk continues from ``generated`` tokens and may produce at most ``chunk_cap``.
    ``priority``: lower runs first inside the engine (probes 0, others 1). ``is_probe``: the
    group's speculative (probe) request. ``migrate_tokens``: context tokens whose KV is not on
    this replica (0 when the replica already holds the request's KV, or for a fresh request
    whose only context is its shared prompt).
    """

    request_id: str
    group_id: str
    replica: int
    generated: int
    chunk_cap: int
    priority: int
    is_probe: bool
    migrate_tokens: int


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """What the scheduler has in flight on one replica (reservations, not measured usage)."""

    replica_id: str
    running: int
    reserved_kv_tokens: int
    kv_capacity_tokens: int
