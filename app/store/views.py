"""Typed results of the store's read API for the dashboard (plain frozen dataclasses: no
SQLAlchemy object ever leaves ``app.store``). Times are Unix seconds, as recorded."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class JobView:
    """A rollout job. ``requests``: responses asked for (sum of G over its groups);
    ``requests_finished``: those recorded as terminal so far (cancelled included)."""

    job_id: str
    iteration: int | None
    policy: str
    state: str  # running | done | cancelled | failed
    groups: int
    requests: int
    requests_finished: int
    max_tokens: int
    created_at: float
    started_at: float
    finished_at: float | None
    output_tokens: int | None
    error: str | None


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """One terminal request of a job."""

    request_id: str
    group_id: str
    length: int
    is_probe: bool
    finish_reason: str  # stop | length | cancelled
    queued_at: float
    finished_at: float


@dataclass(frozen=True, slots=True)
class GroupView:
    """A group of a job with the scheduler's estimates of its length (None before any sibling
    finished): ``first_*`` made when its first request finished (what scheduling went on),
    the others the newest; ``final_lengths`` is None while it runs."""

    job_id: str
    group_id: str
    prompt_key: str
    group_size: int
    max_tokens: int
    submitted_at: float
    finished_at: float | None
    final_lengths: tuple[int, ...] | None
    first_max_estimate: int | None
    first_mean_estimate: int | None
    max_estimate: int | None
    mean_estimate: int | None
    estimate_finished: int  # siblings finished when the estimate was made


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One health-probe sample of a replica."""

    replica_id: str
    at: float
    running: int
    waiting: int
    chunks_in_flight: int
    kv_usage: float


@dataclass(frozen=True, slots=True)
class DraftTotals:
    """Speculative decoding summed over a time bucket or a group: ``drafted`` tokens proposed
    over ``steps`` verify steps, ``accepted`` of them accepted."""

    key: str | float  # the bucket start (s) or the group id
    drafted: int
    accepted: int
    steps: int

    @property
    def acceptance_length(self) -> float:
        """Tokens per verify step, bonus token included (1.0 = nothing accepted)."""
        return (self.accepted + self.steps) / self.steps if self.steps else math.nan

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else math.nan

    @property
    def draft_length(self) -> float:
        """Mean draft tokens per verify step."""
        return self.drafted / self.steps if self.steps else math.nan


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """Output tokens and chunks reported within one time bucket (all chunks, drafted or not)."""

    bucket: float
    tokens: int
    chunks: int


@dataclass(frozen=True, slots=True)
class ChunkSpan:
    """One chunk of a request: dispatched at ``started_at`` (None: recorded before the store
    kept it) on ``replica_id``, back at ``finished_at`` with ``new_tokens``; ``drafted``: draft
    tokens its engine proposed (0: it ran without speculation)."""

    request_id: str
    group_id: str
    replica_id: str
    started_at: float | None
    finished_at: float
    new_tokens: int
    drafted: int
    finish_reason: str


@dataclass(frozen=True, slots=True)
class JobTiming:
    """Finish times of a job's finished requests (stop or length): ``n`` of them, the first,
    the one that starts the tail (the request at rank ceil(0.9 n)) and the last."""

    job_id: str
    n: int
    output_tokens: int
    first_finish: float
    tail_start: float
    last_finish: float

    @property
    def tail_s(self) -> float:
        """Time spent on the last 10% of requests (as ``core.stats.tail_time``)."""
        return self.last_finish - self.tail_start


@dataclass(frozen=True, slots=True)
class PromptLengths:
    """A prompt's finished lengths in time order: ``(finished_at, length)`` pairs."""

    prompt_key: str
    samples: tuple[tuple[float, int], ...]


@dataclass(frozen=True, slots=True)
class ConfigVersion:
    """One accepted change of the speculation settings (the audit log)."""

    at: float
    who: str
    old: dict[str, Any] = field(default_factory=dict)
    new: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    def changes(self) -> dict[str, tuple[Any, Any]]:
        """Settings whose value changed: name -> (old, new)."""
        names = sorted(set(self.old) | set(self.new))
        return {
            k: (self.old.get(k), self.new.get(k))
            for k in names
            if self.old.get(k) != self.new.get(k)
        }
