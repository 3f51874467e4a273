"""The service's state and its operator controls: ``GET /healthz`` (replicas, load, the history
store's writer), ``GET``/``PUT /v1/speculation`` (live drafting settings) and ``GET``/``POST
/v1/weights`` (the policy weights). Changes need the operator bearer token
(``app.serve.ingress.auth``).

Weights, one update at a time (the invariant the dispatcher keeps): a chunk runs only on a
replica whose loaded weights are the service's current version, and a response's tokens all
come from one version: an update pauses dispatch, lets the chunks in flight finish (or aborts
them), restarts from its prompt every unfinished request that has tokens of the old version,
loads the new weights into every replica, then resumes. A replica that reports another version
(it restarted, or missed the update) leaves rotation until it has loaded the current one.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.api.base import MAX_VERSION, ClientRequest
from core.drafting.speculate import MAX_DRAFT_TOKENS
from core.engine import EngineLoad
from core.engine.types import LogprobsMode


# ------------------------------------------------------------------ health
class ReplicaState(StrEnum):
    """STARTING -> HEALTHY <-> DOWN | STALE; any -> FAILED (kept out of rotation for good)."""

    STARTING = "starting"  # has not answered a health probe yet
    HEALTHY = "healthy"  # in rotation
    DOWN = "down"  # lost a chunk or missed a probe; back in rotation once it answers again
    STALE = "stale"  # answers, but runs other weights than the current version: out of
    # rotation, loading them; back once it reports the current version
    FAILED = "failed"  # lost chunks max_replica_failures times within failure_window_s


class ReplicaHealth(BaseModel):
    replica_id: str
    node_id: str  # the Ray node it last reported from ('' until it answers)
    gpu_ids: list[str]  # the GPUs it was given (empty on CPU)
    state: ReplicaState
    since: float
    failures: int
    error: str | None
    load: EngineLoad | None
    reserved_kv_tokens: int


class WriterStats(BaseModel):
    """Counters of a ``StoreWriter`` (``accepted = written + rejected + pending``)."""

    state: str  # starting | ok | retrying | closed
    accepted: int  # events taken into the backlog
    written: int  # events committed to the database
    rejected: int  # events the database refused for good (bad data), logged
    dropped: int  # events refused because the backlog was full
    pending: int  # accepted, not yet written (backlog + the batch being written)
    failed_writes: int  # write attempts that failed and were retried
    last_error: str | None
    last_error_at: float | None
    last_write_at: float | None


class ServiceHealth(BaseModel):
    status: str  # ok (every replica healthy) | degraded (some) | unavailable (none)
    policy: str
    logprobs_mode: LogprobsMode  # which logprobs every response carries (engine.logprobs_mode)
    accepting: bool
    open_jobs: int
    scheduler_node_id: str  # the Ray node the scheduler runs on (app.serve.replica.placement)
    replicas: list[ReplicaHealth]
    store: WriterStats | None = None  # the history store's writer (None: recording is off)


# ------------------------------------------------------------------ speculation
class SpeculationUpdate(ClientRequest):
    """Body of ``PUT /v1/speculation``: fields of ``settings`` not given keep their value."""

    model_config = ConfigDict(extra="forbid")

    settings: dict[str, Any] = Field(
        description="any of: enabled (bool), max_draft (1..64, capped by the engine's K), "
        "min_token_prob ([0, 1]), adaptive (bool), probe_priority (>= 1)",
        json_schema_extra={  # what settings_patch checks, for clients and fuzzers
            "properties": {
                "enabled": {"type": "boolean"},
                "max_draft": {"type": "integer", "minimum": 1, "maximum": MAX_DRAFT_TOKENS},
                "min_token_prob": {"type": "number", "minimum": 0, "maximum": 1},
                "adaptive": {"type": "boolean"},
                "probe_priority": {"type": "number", "minimum": 1},
            },
            "additionalProperties": False,
        },
    )
    reason: str | None = Field(None, max_length=500, description="why (kept in the audit log)")


class ReplicaSpeculation(BaseModel):
    replica_id: str
    version: int = Field(description="settings version the replica runs (-1: unknown)")
    error: str | None = Field(None, description="why the last change did not reach it")


class SpeculationState(BaseModel):
    settings: dict = Field(description="enabled, max_draft, min_token_prob, adaptive, ...")
    version: int = Field(description="0 = the engine config's; +1 per accepted change")
    updated_at: float | None = None
    updated_by: str | None = None
    reason: str | None = None
    replicas: list[ReplicaSpeculation]


# ------------------------------------------------------------------ weights
class WeightsState(BaseModel):
    """The weights the service samples with (GET /v1/weights)."""

    version: int = Field(description="policy version every new token is sampled with")
    path: str | None = Field(
        None, description="checkpoint directory of that version (None: the model it started with)"
    )
    digest: str | None = Field(
        None,
        description="its checkpoint digest (app.weights_digest) as every replica verified it "
        "(None: the model it started with)",
    )
    updated_at: float | None = Field(None, description="Unix time of the last update")
    updating: bool = Field(False, description="an update is running (dispatch paused)")


class WeightsUpdateRequest(ClientRequest):
    """POST /v1/weights."""

    model_config = ConfigDict(extra="forbid", strict=True)

    path: str = Field(
        min_length=1,
        max_length=4096,
        description="directory with the new weights as *.safetensors (HF names), readable by "
        "every engine replica",
    )
    version: int | None = Field(
        None,
        ge=1,
        le=MAX_VERSION,
        description="the new policy version (must be above the current one; None = current + 1)",
    )
    abort_running: bool = Field(
        False,
        description="abort the chunks in flight instead of letting them finish (their requests "
        "restart from the prompt under the new weights either way)",
    )
    sha256: str | None = Field(
        None,
        pattern="^[0-9a-f]{64}$",
        description="the checkpoint's digest as the trainer computed it "
        "(app.weights_digest.checkpoint_digest): a replica that reads another loads nothing. "
        "None: the replicas must agree with each other",
    )


class WeightsUpdate(BaseModel):
    """What an update did."""

    version: int
    previous_version: int
    seconds: float = Field(description="from the request to dispatch resuming")
    drain_seconds: float = Field(description="waiting for the chunks in flight")
    load_seconds: float = Field(description="every replica loading the weights (in parallel)")
    restarted_requests: int = Field(description="unfinished requests started over")
    aborted_chunks: int
    replicas: list[str] = Field(description="replicas running the new version")
    failed_replicas: dict[str, str] = Field(
        default_factory=dict, description="replica -> error; they left rotation"
    )
    digest: str = Field(description="the checkpoint's digest every replica in it verified")
