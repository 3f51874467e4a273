"""OpenAI's dialect: ``POST /v1/completions`` (the subset RL trainers use, as one job) and
``GET /v1/models``: the requests, the answers, and how an answer is built from the job.

Each prompt is one group of ``n`` choices (choice ``i * n + j`` is response j of prompt i);
requests sent one at a time join one group with ``group_key`` (``extra_body`` in the OpenAI
client). Token in, token out: every choice carries its ``token_ids`` and the ``policy_version``
of the weights that sampled it; ``logprobs`` (any value 0-5) returns the sampled token's logprob
at every position (``top_logprobs`` holds only the sampled token: engines return no
alternatives); ``return_tokens_as_token_ids`` names tokens ``token_id:<id>`` as vLLM does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
)

from app.api.base import (
    NEW_TOKENS_BOUND,
    ClientRequest,
    NoStream,
    PromptIdLists,
    PromptIds,
    PromptText,
    PromptTexts,
    Stops,
)
from app.api.dialect import Loc, cut_at_stop, native_rollout, own_loc
from app.api.native import GroupResult, RolloutRequest
from core.engine import SamplingParams
from core.engine.types import SEED_SPACE, LogprobsMode

_OPENAI_NAMES: dict[str, Loc] = {
    "group_size": ["n"],
    "prompt_ids": ["prompt_id"],
    "logprobs": ["logprobs"],
    "sampling.seed": ["seed"],
    "sampling.temperature": ["temperature"],
    "sampling.top_p": ["top_p"],
    "sampling.top_k": ["top_k"],
}

Prompt = PromptText | PromptIds | PromptTexts | PromptIdLists


class CompletionRequest(ClientRequest):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    model: str = Field(min_length=1, max_length=512, description="any name; answered with ours")
    prompt: Prompt = Field(description="text, token ids, or a list of either (one group each)")
    n: int = Field(1, ge=1, le=256, description="choices per prompt: the group size G")
    max_tokens: int = Field(16, ge=1, le=1_048_576, json_schema_extra=NEW_TOKENS_BOUND)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1, le=1_000_000, description="-1 or 0: disabled")
    seed: int | None = Field(None, ge=0, lt=SEED_SPACE)
    logprobs: int | None = Field(None, ge=0, le=5)
    stop: Stops = Field(None, description="up to 16 stop strings")
    return_tokens_as_token_ids: bool = False
    stream: NoStream = Field(False, description="streaming is not supported")
    user: str | None = Field(None, max_length=512, description="accepted, not used")
    group_key: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="join the choices to every other request with this key while its group is "
        "open (one prompt only)",
    )
    prompt_id: str | None = Field(
        None, min_length=1, max_length=256, description="stable id of the prompt (one prompt)"
    )

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise ValueError("prompt is an empty list")
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def own_loc(self, loc: Sequence[str | int]) -> Loc:
        """Where ``loc`` of the native job (``to_rollout``) is in this request."""
        batched = isinstance(self.prompt, list) and not all(isinstance(x, int) for x in self.prompt)
        return own_loc(loc, _OPENAI_NAMES, "prompt", batched)

    def to_rollout(self) -> RolloutRequest:
        """The native job of this request (ValueError naming the field when inconsistent)."""
        return native_rollout(
            self.prompts(),
            group_size=self.n,
            max_tokens=self.max_tokens,
            sampling=SamplingParams(
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=max(self.top_k, 0),
                seed=self.seed,
            ),
            logprobs=self.logprobs is not None,
            group_key=self.group_key,
            prompt_id=self.prompt_id,
        )


class ChoiceLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class Choice(BaseModel):
    index: int
    text: str
    logprobs: ChoiceLogprobs | None
    finish_reason: str = Field(description="stop | length | abort")
    stop_reason: str | None = Field(None, description="the stop string matched, if any")
    token_ids: list[int]
    prompt_token_ids: list[int]
    policy_version: int
    logprobs_mode: LogprobsMode = Field(
        description="raw (the model's untempered logprobs) | processed (of the distribution "
        "sampled from); see the native API"
    )


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    policy_version: int = Field(description="newest policy version among the choices")


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "seer"


class ModelList(BaseModel):
    """``GET /v1/models``: OpenAI clients list the models first; the one served is the only one
    (``/v1/completions`` answers with it whatever ``model`` a request names)."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


def completion_response(
    req: CompletionRequest,
    groups: list[GroupResult],
    job_id: str,
    model: str,
    created: int,
    decode: Callable[[list[int]], str],
) -> CompletionResponse:
    """The OpenAI answer for a finished job (groups in prompt order); blocking (detokenizes)."""
    choices: list[Choice] = []
    stops = req.stops()
    prompt_tokens = 0
    for g in groups:
        prompt_tokens += len(g.prompt_token_ids)  # once per prompt, as vLLM counts
        for r in g.responses:
            cut = cut_at_stop(r.token_ids, r.logprobs, decode(r.token_ids), stops, decode)
            lp = None
            if req.logprobs is not None and cut.logprobs is not None:
                lp = _logprobs(cut.token_ids, cut.logprobs, req.return_tokens_as_token_ids, decode)
            choices.append(
                Choice(
                    index=g.prompt_index * req.n + r.index,
                    text=cut.text,
                    logprobs=lp,
                    finish_reason="stop" if cut.matched is not None else r.finish_reason,
                    stop_reason=cut.matched,
                    token_ids=cut.token_ids,
                    prompt_token_ids=g.prompt_token_ids,
                    policy_version=r.policy_version,
                    logprobs_mode=r.logprobs_mode,
                )
            )
    completion = sum(len(c.token_ids) for c in choices)
    return CompletionResponse(
        id=f"cmpl-{job_id}",
        created=created,
        model=model,
        choices=choices,
        usage=Usage(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion,
            total_tokens=prompt_tokens + completion,
        ),
        policy_version=max((c.policy_version for c in choices), default=0),
    )


def _logprobs(
    token_ids: list[int],
    logprobs: list[float],
    as_ids: bool,
    decode: Callable[[list[int]], str],
) -> ChoiceLogprobs:
    pieces = [decode([t]) for t in token_ids]  # each token's text, decoded once
    names = [f"token_id:{t}" for t in token_ids] if as_ids else pieces
    offsets: list[int] = []
    at = 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    return ChoiceLogprobs(
        tokens=names,
        token_logprobs=list(logprobs),
        top_logprobs=[{n: lp} for n, lp in zip(names, logprobs, strict=True)],
        text_offset=offsets,
    )
