"""The native job API: ``POST /v1/rollouts``, ``GET``/``DELETE /v1/rollouts/{id}`` and the
NDJSON stream of ``GET /v1/rollouts/{id}/groups``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from app.api.base import (
    DEPLOYMENT_BOUND,
    LOGPROBS_MODE,
    MAX_PROMPTS,
    MAX_VERSION,
    NEW_TOKENS_BOUND,
    STRICT,
    ClientRequest,
    PromptIds,
    PromptText,
)
from core.engine import SamplingParams
from core.engine.types import LogprobsMode


class RolloutRequest(ClientRequest):
    """A batch of prompts; every prompt becomes a group of ``group_size`` sampled responses."""

    model_config = STRICT

    prompts: list[PromptText | PromptIds] = Field(
        min_length=1,
        max_length=MAX_PROMPTS,
        description="text prompts, or prompts already tokenized (lists of token ids)",
    )
    prompt_ids: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        None,
        description="optional caller id of each prompt, stable across RL iterations (same length "
        "as prompts; 1-256 characters each); returned with its group",
    )
    group_size: int = Field(ge=1, le=256, description="responses per prompt (G)")
    max_tokens: int = Field(
        ge=1,
        le=1_048_576,
        description="cap on generated tokens per response (below the model's context)",
        json_schema_extra=NEW_TOKENS_BOUND,
    )
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    logprobs: bool = Field(True, description="return the logprob of every generated token")
    logprobs_mode: LogprobsMode | None = Field(
        None,
        description="which logprobs the caller expects: raw (the model's untempered "
        "log-softmax) or processed (of the distribution each token was sampled from, after "
        "temperature/top_k/top_p). The service's engines compute one (engine.logprobs_mode, "
        "default raw; GET /healthz shows it): another is 422. None: the service's",
        json_schema_extra={DEPLOYMENT_BOUND: LOGPROBS_MODE},
    )
    chat_template: bool = Field(
        True, description="wrap text prompts as one user turn of the model's chat template"
    )
    iteration: int | None = Field(
        None,
        ge=0,
        le=MAX_VERSION,
        description="the trainer's RL iteration (step) of this batch, recorded with the job",
    )
    # chooses nothing (the policy is the service's): a check of what the caller expects, named
    # so inside; the wire field is ``policy``
    expected_policy: str | None = Field(
        None,
        alias="policy",
        description="scheduling policy the caller expects; must be the one the service runs "
        "(GET /healthz shows it), else 422",
    )
    group_key: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="join the responses to every other request carrying the same key while "
        "that group is open (siblings sent one call at a time, e.g. by agent loops): the "
        "scheduler treats them as one group. Needs exactly one prompt",
    )
    wait: bool = Field(
        False,
        description="false: answer 202 with the job's URLs at once; true: answer when the "
        "rollout is done, with every group (the one-call form)",
    )

    @model_validator(mode="after")
    def _one_prompt_per_key(self) -> RolloutRequest:
        if self.group_key is not None and len(self.prompts) != 1:
            raise ValueError(
                f"group_key needs exactly one prompt (its group); got {len(self.prompts)} prompts"
            )
        return self


class Response(BaseModel):
    index: int = Field(description="position of this response in its group (0..G-1)")
    token_ids: list[int]
    text: str
    logprobs: list[float] | None
    logprobs_mode: LogprobsMode = Field(
        "raw",
        description="what logprobs holds: raw = the model's untempered log-softmax of each "
        "token; processed = its log-probability under the distribution it was sampled from "
        "(after temperature, top_k, top_p); the service's engine.logprobs_mode",
    )
    finish_reason: str = Field(
        description="stop | length | abort (abort: the job was cancelled before it finished)"
    )
    length: int
    chunks: int = Field(description="chunks (engine calls) that generated it")
    replicas: list[str] = Field(description="engine replicas that ran its chunks, in order")
    finished_after_s: float = Field(
        description="seconds from the job's acceptance to this response's last token"
    )
    drafted_tokens: int = Field(0, description="draft tokens verified for it (speculation)")
    accepted_tokens: int = Field(0, description="of those, accepted by the target model")
    policy_version: int = Field(
        0,
        description="version of the policy weights that sampled every token of it (POST "
        "/v1/weights sets it; a response never mixes two versions)",
    )


class GroupResult(BaseModel):
    group_id: str
    prompt_index: int
    prompt_id: str | None = Field(description="the caller's prompt id, if given")
    prompt_token_ids: list[int]
    responses: list[Response]


class RolloutStats(BaseModel):
    elapsed_s: float
    output_tokens: int
    tokens_per_s: float
    requests: int
    chunks: int
    drafted_tokens: int = 0
    accepted_tokens: int = 0


#: What a seed promises for a job (``JobStatus.seed_guarantee``):
#: ``identical`` = re-sent with the same seed, policy, weights and config, it samples the same
#: tokens (every chunk is seeded at its position; up to floating-point differences of batch
#: composition); ``distribution`` = its chunks may carry draft tokens, which depend on how far
#: the siblings got (timing) and change how the engine's seeded generator is consumed, so a
#: re-sent job samples the same distribution (speculation is lossless) but not the same
#: tokens; ``none`` = no seed was given.
SeedGuarantee = Literal["identical", "distribution", "none"]
SEED_GUARANTEE_DOC = (
    "identical (a re-sent seeded job samples the same tokens) | distribution (its chunks may "
    "draft: same distribution, not the same tokens) | none (no seed)"
)


class RolloutResponse(BaseModel):
    id: str
    model: str
    policy: str
    seed_guarantee: SeedGuarantee = Field(description=SEED_GUARANTEE_DOC)
    groups: list[GroupResult]
    stats: RolloutStats


class JobState(StrEnum):
    """Lifecycle of a rollout job: QUEUED -> RUNNING -> DONE | FAILED | CANCELLED."""

    QUEUED = "queued"  # accepted, waiting for the scheduler (e.g. a policy switch pending)
    RUNNING = "running"  # its groups are in the scheduler
    DONE = "done"  # every group finished
    FAILED = "failed"  # cannot finish (``error`` says why); its running chunks were aborted
    CANCELLED = "cancelled"  # DELETE /v1/rollouts/{id}, a timeout, or a shutdown

    @property
    def terminal(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


class JobAccepted(BaseModel):
    id: str
    status_url: str
    groups_url: str
    cancel_token: str = Field(
        description="secret that lets its holder cancel this job: DELETE /v1/rollouts/{id} with "
        "Authorization: Bearer <cancel_token> (or the operator token). Returned only here"
    )


class JobProgress(BaseModel):
    groups: int
    groups_done: int
    requests: int
    requests_done: int
    output_tokens: int
    elapsed_s: float
    estimated_remaining_s: float | None = Field(
        description="time left at the current token rate and the groups' estimated lengths "
        "(None until there is evidence)"
    )


class JobStatus(BaseModel):
    id: str
    state: JobState
    policy: str
    seed_guarantee: SeedGuarantee = Field(description=SEED_GUARANTEE_DOC)
    error: str | None
    created_at: float = Field(description="Unix time the job was accepted")
    finished_at: float | None
    progress: JobProgress
