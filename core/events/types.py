"""The event records (frozen dataclasses with slots: cheap to build, safe to share across
threads). Times are seconds on the emitter's clock (``time.time()`` in the service, virtual
time in the simulator). Ids are the service's own strings (job, group, request, replica).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One prompt group of a job, as submitted. ``prompt_key`` identifies the prompt across RL
    iterations (the trainer's prompt id, else ``prompt_hash``); ``prompt_hash`` is a hash of
    its token ids; ``prompt_id`` the trainer's id when given."""

    group_id: str
    prompt_key: str
    prompt_hash: str
    prompt_id: str | None
    group_size: int
    max_tokens: int
    prompt_tokens: int


@dataclass(frozen=True, slots=True)
class JobStarted:
    """A rollout job entered the scheduler (``iteration``: the trainer's RL step, if given)."""

    job_id: str
    at: float
    created_at: float
    policy: str
    iteration: int | None
    max_tokens: int
    groups: tuple[GroupInfo, ...]
    policy_version: int = 0  # weights version when it entered the scheduler


@dataclass(frozen=True, slots=True)
class JobFinished:
    """A job became terminal (``state``: done | cancelled | failed)."""

    job_id: str
    at: float
    state: str
    requests_done: int
    output_tokens: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ChunkDone:
    """One chunk of a request reported back to the scheduler. ``finish_reason``: stop |
    length | chunk | abort; ``generated``: the request's tokens after it; ``started_at``: when
    it was dispatched; ``drafted``: draft tokens its engine proposed (0: it did not speculate)."""

    request_id: str
    group_id: str
    replica_id: str
    at: float
    new_tokens: int
    generated: int
    finish_reason: str
    is_probe: bool
    started_at: float | None = None
    drafted: int = 0


@dataclass(frozen=True, slots=True)
class RequestFinished:
    """A request reached a terminal phase. ``finish_reason``: stop | length | cancelled;
    ``replicas``: the replica of each chunk, in order; ``started_at`` is None when no chunk
    was ever dispatched."""

    request_id: str
    group_id: str
    prompt_key: str
    length: int
    chunks: int
    is_probe: bool
    replicas: tuple[str, ...]
    finish_reason: str
    queued_at: float
    started_at: float | None
    finished_at: float
    policy_version: int = 0  # weights version that sampled its tokens (of its last start)


@dataclass(frozen=True, slots=True)
class GroupEstimate:
    """The scheduler's view of a group's length after one of its requests finished:
    ``max_estimate`` is the paper's (max finished sibling, the cap before any), ``mean_estimate``
    the geometric mean the ``context`` orderings use (prior included, raised to the furthest
    running sibling), ``finished`` how many siblings are done."""

    group_id: str
    at: float
    max_estimate: int
    mean_estimate: int
    finished: int


@dataclass(frozen=True, slots=True)
class GroupFinished:
    """Every request of the group is terminal; ``lengths`` of the finished ones, by request."""

    group_id: str
    at: float
    lengths: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DraftStats:
    """Speculative decoding of one chunk: ``drafted`` tokens proposed over ``steps`` verify
    steps, ``accepted`` of them accepted."""

    request_id: str
    group_id: str
    replica_id: str
    at: float
    drafted: int
    accepted: int
    steps: int


@dataclass(frozen=True, slots=True)
class ReplicaLoadSample:
    """One replica's load as measured by a health probe."""

    replica_id: str
    at: float
    running: int
    waiting: int
    chunks_in_flight: int
    kv_usage: float
    reserved_kv_tokens: int


@dataclass(frozen=True, slots=True)
class SpeculationConfigChanged:
    """Operators changed the speculation settings: ``old``/``new`` as JSON text."""

    at: float
    who: str
    old: str
    new: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SchedulerStarted:
    """A scheduler started (``at``) holding no job: every job recorded as running that started
    before it belonged to a scheduler that is gone, and ended with it."""

    at: float


Event = (
    SchedulerStarted
    | JobStarted
    | JobFinished
    | ChunkDone
    | RequestFinished
    | GroupEstimate
    | GroupFinished
    | DraftStats
    | ReplicaLoadSample
    | SpeculationConfigChanged
)
