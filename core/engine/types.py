"""Typed params/results of one engine *chunk*.

Divided rollout sends every request as a sequence of chunks. Invariant: a chunk continues a
request exactly where the previous chunk stopped; ``prompt_token_ids + generated_token_ids`` is
the full context, and the chunk generates at most ``chunk_cap`` more tokens. A request is
finished when a chunk ends with ``stop`` (EOS / stop token) or ``length`` (the request's own
``max_tokens`` reached); ``chunk`` means "chunk budget used, re-queue me".
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class FinishReason(StrEnum):
    STOP = "stop"  # EOS or a stop token was generated
    LENGTH = "length"  # the request's own max_tokens is reached
    CHUNK = "chunk"  # this chunk's budget is used; the request continues in a later chunk
    ABORT = "abort"  # the chunk was aborted before it finished


#: Which log-probabilities a chunk's ``logprobs`` hold (fixed per engine, at its start):
#: ``raw`` = the model's own, log-softmax of the untempered logits (vLLM ``raw_logprobs``);
#: ``processed`` = of the distribution each token was actually sampled from, after temperature,
#: top_k and top_p (vLLM ``processed_logprobs``); the two agree only at T=1 with no truncation.
LogprobsMode = Literal["raw", "processed"]

#: Seeds are 32-bit: engines on CPU draw identical samples for seeds that differ by 2**32.
SEED_SPACE = 2**32


class SamplingParams(BaseModel):
    """Sampling settings of one request. Strict: unknown fields (they would be ignored),
    strings for numbers and NaN/Infinity are rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    temperature: float = Field(1.0, ge=0.0, le=10.0, description="0 = greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, le=1_000_000, description="0 = disabled")
    seed: int | None = Field(
        None,
        ge=0,
        lt=SEED_SPACE,
        description="seed in [0, 2**32); None = the engine's RNG. Every response and every chunk "
        "of it gets its own seed derived from it (reproducible, distinct within a job)",
    )

    def chunk_seed(self, generated: int) -> int | None:
        """Seed of the chunk that continues after ``generated`` tokens: the request's seed plus
        its position, so chunks draw fresh randomness (wraps in the 32-bit seed space)."""
        return None if self.seed is None else (self.seed + generated) % SEED_SPACE


class ChunkRequest(BaseModel):
    """One chunk of one request, as the scheduler hands it to an engine replica."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: str = Field(min_length=1)
    group_id: str = Field(min_length=1)
    response_index: int = Field(0, ge=0, description="which of its group's G responses this is")
    prompt_token_ids: list[int] = Field(min_length=1)
    generated_token_ids: list[int] = Field(default_factory=list)
    chunk_cap: int = Field(ge=1, description="new tokens allowed in this chunk")
    max_tokens: int = Field(ge=1, description="the request's own cap on generated tokens")
    sampling: SamplingParams = Field(default_factory=SamplingParams)
    logprobs: bool = True
    priority: int = Field(0, description="lower runs first (vLLM priority scheduling)")
    is_probe: bool = Field(False, description="its group's probe (drafting favours its tokens)")
    speculate: bool = Field(
        False, description="draft for this chunk when the engine speculates (the policy decides)"
    )

    @model_validator(mode="after")
    def _budget_fits(self) -> ChunkRequest:
        done = len(self.generated_token_ids)
        if done >= self.max_tokens:
            raise ValueError(
                f"generated_token_ids has {done} tokens, already at max_tokens={self.max_tokens}"
            )
        return self

    @property
    def chunk_budget(self) -> int:
        """New tokens this chunk may produce: min(chunk_cap, max_tokens - generated)."""
        return min(self.chunk_cap, self.max_tokens - len(self.generated_token_ids))

    def budget_within(self, max_model_len: int) -> int:
        """The chunk budget capped by the context limit; ValueError when no token fits."""
        context = len(self.prompt_token_ids) + len(self.generated_token_ids)
        room = max_model_len - context
        if room < 1:
            raise ValueError(
                f"request {self.request_id}: context of {context} tokens leaves no room "
                f"under max_model_len={max_model_len}"
            )
        return min(self.chunk_budget, room)

    def budget_end(self, new_tokens: int, max_model_len: int) -> FinishReason:
        """Why a chunk that produced ``new_tokens`` without EOS or abort ended: ``length`` when
        the request's own max_tokens or the context limit is reached, else ``chunk``."""
        generated = len(self.generated_token_ids) + new_tokens
        context = len(self.prompt_token_ids) + generated
        if generated >= self.max_tokens or context >= max_model_len:
            return FinishReason.LENGTH
        return FinishReason.CHUNK

    @property
    def engine_request_id(self) -> str:
        """Unique id of this chunk inside an engine (a request has many chunks)."""
        return f"{self.request_id}@{len(self.generated_token_ids)}"


class ChunkResult(BaseModel):
    """What one chunk produced."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    token_ids: list[int]
    logprobs: list[float] | None = Field(None, description="target-model logprob of each token")
    finish_reason: FinishReason
    drafted_tokens: int = Field(0, ge=0)
    accepted_tokens: int = Field(0, ge=0)
    engine_steps: int = Field(0, ge=0, description="decode steps that produced these tokens")
    elapsed_s: float = Field(0.0, ge=0.0)
    policy_version: int = Field(
        0,
        ge=0,
        description="version of the weights the engine ran the chunk under (its version when the "
        "chunk started; weights load only between chunks)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ChunkResult:
        if self.logprobs is not None:
            if len(self.logprobs) != len(self.token_ids):
                raise ValueError(f"{len(self.logprobs)} logprobs for {len(self.token_ids)} tokens")
            bad = [x for x in self.logprobs if not math.isfinite(x) and x != -math.inf]
            if bad:
                raise ValueError(f"logprobs contain non-finite values {bad[:3]}")
        if self.accepted_tokens > self.drafted_tokens:
            raise ValueError(
                f"accepted_tokens={self.accepted_tokens} > drafted_tokens={self.drafted_tokens}"
            )
        return self

    @property
    def finished(self) -> bool:
        return self.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)


class PolicyCheckpoint(BaseModel):
    """The checkpoint a replica last loaded as its ``policy_version``: what a scheduler that
    started after the update adopts (``app.serve.scheduler.weight_updater``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="the checkpoint directory it loaded")
    digest: str = Field(description="the digest of what it loaded (app.weights_digest)")
    loaded_at: float = Field(description="Unix time the load ended")


class EngineLoad(BaseModel):
    """Load of one engine replica, reported to the scheduler for replica selection."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replica_id: str
    running: int = Field(0, ge=0, description="sequences the engine is decoding")
    waiting: int = Field(0, ge=0, description="sequences queued inside the engine")
    chunks_in_flight: int = Field(0, ge=0, description="run_chunk calls not yet returned")
    kv_usage: float = Field(
        0.0, ge=0.0, description="fraction of KV blocks in use (above 1 means oversubscribed)"
    )
    kv_capacity_tokens: int = Field(0, ge=0, description="total KV token slots of the replica")
    max_running: int = Field(0, ge=0, description="most sequences decoded at once (0: unknown)")
    preemptions: int = Field(0, ge=0, description="requests preempted by the engine, cumulative")
    prefix_cache_queries: int = Field(0, ge=0, description="prompt tokens looked up, cumulative")
    prefix_cache_hits: int = Field(0, ge=0, description="of those, served from the prefix cache")
    draft_tokens: int = Field(0, ge=0, description="draft tokens verified, cumulative")
    accepted_draft_tokens: int = Field(0, ge=0, description="of those, accepted, cumulative")
    policy_version: int = Field(
        0, ge=0, description="policy version of the loaded weights (0: the model it started with)"
    )
    policy_checkpoint: PolicyCheckpoint | None = Field(
        None, description="the checkpoint of that version (None: the model it started with)"
    )
    draft_exchanges: int = Field(
        0, ge=0, description="exchanges with the draft server that succeeded, cumulative"
    )
    draft_exchange_failures: int = Field(
        0, ge=0, description="exchanges with the draft server that failed or timed out"
    )
    node_id: str = Field("", description="Ray node the replica runs on ('' outside Ray)")
    gpu_ids: list[str] = Field(
        default_factory=list, description="GPUs the replica's engine was given (empty on CPU)"
    )
