"""HTTP schema of the rollout API (pydantic; unknown fields are rejected with 422)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.engine import SamplingParams


class RolloutRequest(BaseModel):
    """A batch of prompts; every prompt becomes a group of ``group_size`` sampled responses."""

    model_config = ConfigDict(extra="forbid")

    prompts: list[str | list[int]] = Field(
        min_length=1,
        max_length=4096,
        description="text prompts, or prompts already tokenized (lists of token ids)",
    )
    group_size: int = Field(ge=1, le=256, description="responses per prompt (G)")
    max_tokens: int = Field(ge=1, description="cap on generated tokens per response")
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    logprobs: bool = Field(True, description="return the logprob of every generated token")
    chat_template: bool = Field(
        True, description="wrap text prompts as one user turn of the model's chat template"
    )
    policy: str | None = Field(
        None, description="scheduling policy for this rollout (default: the app's policy)"
    )


class Response(BaseModel):
    index: int
    token_ids: list[int]
    text: str
    logprobs: list[float] | None
    finish_reason: str
    length: int


class GroupResult(BaseModel):
    group_id: str
    prompt_index: int
    prompt_token_ids: list[int]
    responses: list[Response]


class RolloutStats(BaseModel):
    elapsed_s: float
    output_tokens: int
    tokens_per_s: float
    requests: int
    chunks: int


class RolloutResponse(BaseModel):
    id: str
    model: str
    policy: str
    groups: list[GroupResult]
    stats: RolloutStats
