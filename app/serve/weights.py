"""Policy weights of the service: which version the engines run, and one update at a time.

Invariant: a chunk runs only on a replica whose loaded weights are the service's current
version, and a response's tokens all come from one version: an update pauses dispatch, lets
the chunks in flight finish (or aborts them), restarts from its prompt every unfinished request
that has tokens of the old version, loads the new weights into every replica, then resumes. A
replica that reports another version (it restarted, or missed the update) leaves rotation until
it has loaded the current one.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.api import ClientRequest


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
        le=2**31 - 1,
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
