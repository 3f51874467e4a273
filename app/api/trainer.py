"""What RL trainers already send: OpenAI's ``POST /v1/completions`` and ``GET /v1/models``,
SGLang's ``POST /generate``, ``/abort_request`` and ``/update_weights_from_disk``.

Each request stands for one native job (``to_rollout``: one group per prompt, answered when
done); ``app.compat`` builds the answers from the job's groups.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from app.api.base import (
    MAX_VERSION,
    NEW_TOKENS_BOUND,
    STRICT,
    ClientRequest,
    NoStream,
    PromptIdLists,
    PromptIds,
    PromptText,
    PromptTexts,
    Stops,
    decimal_pattern,
)
from app.api.native import RolloutRequest
from core.engine import SamplingParams
from core.engine.types import SEED_SPACE, LogprobsMode

RID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def _rid(value: str) -> str:
    if not RID.fullmatch(value):
        raise ValueError(f"rid {value[:40]!r} must be 1-128 of A-Z a-z 0-9 _ . : -")
    return value


#: ``/generate``'s ``rid``: the call's job id, so a name safe in a URL path and a log line.
Rid = Annotated[
    str, AfterValidator(_rid), WithJsonSchema({"type": "string", "pattern": RID.pattern})
]


def native_rollout(
    prompts: list[str | list[int]],
    *,
    group_size: int,
    max_tokens: int,
    sampling: SamplingParams,
    logprobs: bool,
    group_key: str | None,
    prompt_id: str | None,
) -> RolloutRequest:
    """One group per prompt, answered when done; prompts are used as they are (no chat
    template). ValueError naming the field when ``group_key`` or ``prompt_id`` is given with
    more than one prompt (``RolloutRequest`` checks ``group_key``)."""
    if prompt_id is not None and len(prompts) != 1:
        raise ValueError(f"prompt_id needs exactly one prompt; got {len(prompts)}")
    return RolloutRequest(
        prompts=prompts,
        prompt_ids=[prompt_id] if prompt_id is not None else None,
        group_size=group_size,
        max_tokens=max_tokens,
        sampling=sampling,
        logprobs=logprobs,
        chat_template=False,
        group_key=group_key,
        wait=True,
    )


Loc = list[str | int]


def own_loc(loc: Sequence[str | int], names: Mapping[str, Loc], prompt: str, batched: bool) -> Loc:
    """The location, in a trainer request, of what ``loc`` names in the native job it became:
    ``names`` maps a native field (or ``sampling.<field>``) to the request's own; a prompt
    (``prompts``, index) is ``prompt`` itself, or its index when the request sent a list."""
    if not loc:
        return []
    head, rest = str(loc[0]), list(loc[1:])
    if head == "prompts":
        return [prompt, *rest] if batched else [prompt, *rest[1:]]
    if head == "sampling" and rest:
        return [*names.get(f"sampling.{rest[0]}", [head, *rest[:1]]), *rest[1:]]
    return [*names.get(head, [head]), *rest]


_OPENAI_NAMES: dict[str, Loc] = {
    "group_size": ["n"],
    "prompt_ids": ["prompt_id"],
    "logprobs": ["logprobs"],
    "sampling.seed": ["seed"],
    "sampling.temperature": ["temperature"],
    "sampling.top_p": ["top_p"],
    "sampling.top_k": ["top_k"],
}
_SGLANG_NAMES: dict[str, Loc] = {
    "group_size": ["sampling_params", "n"],
    "max_tokens": ["sampling_params", "max_new_tokens"],
    "prompt_ids": ["prompt_id"],
    "logprobs": ["return_logprob"],
    "sampling.seed": ["sampling_params", "sampling_seed"],
    "sampling.temperature": ["sampling_params", "temperature"],
    "sampling.top_p": ["sampling_params", "top_p"],
    "sampling.top_k": ["sampling_params", "top_k"],
}


# ------------------------------------------------------------------ OpenAI
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


# ------------------------------------------------------------------ SGLang
class SGLangSampling(BaseModel):
    model_config = STRICT

    max_new_tokens: int = Field(128, ge=1, le=1_048_576, json_schema_extra=NEW_TOKENS_BOUND)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1, le=1_000_000, description="-1: disabled")
    n: int = Field(1, ge=1, le=256, description="samples per prompt (the group size)")
    stop: Stops = Field(None, description="stop strings (up to 16)")
    stop_token_ids: list[int] | None = Field(None, max_length=64)
    no_stop_trim: bool = Field(False, description="keep the matched stop string in the text")
    spaces_between_special_tokens: bool = Field(True, description="accepted, not used")
    sampling_seed: int | None = Field(None, ge=0, lt=SEED_SPACE)
    skip_special_tokens: Literal[True] = True

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class GenerateRequest(ClientRequest):
    # the schema says what _one_input checks: exactly one of input_ids and text, not null
    model_config = ConfigDict(
        **STRICT,
        json_schema_extra={
            "oneOf": [
                {"required": ["input_ids"], "properties": {"input_ids": {"type": "array",
                                                                         "minItems": 1},
                                                           "text": {"type": "null"}}},
                {"required": ["text"], "properties": {"text": {"type": ["string", "array"]},
                                                      "input_ids": {"type": "null"}}},
            ]
        },
    )  # fmt: skip

    input_ids: PromptIds | PromptIdLists | None = None
    text: PromptText | PromptTexts | None = None
    sampling_params: SGLangSampling = Field(default_factory=SGLangSampling)
    return_logprob: bool = False
    rid: Rid | None = Field(None, description="id of this call, for /abort_request")
    stream: NoStream = Field(False, description="streaming is not supported")
    group_key: str | None = Field(None, min_length=1, max_length=256)
    prompt_id: str | None = Field(None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _one_input(self) -> GenerateRequest:
        if (self.input_ids is None) == (self.text is None):
            raise ValueError("give exactly one of input_ids and text")
        return self

    def prompts(self) -> list[str | list[int]]:
        if self.input_ids is not None:
            ids = self.input_ids
            if ids and all(isinstance(x, list) for x in ids):
                return [list(x) for x in ids]  # type: ignore[arg-type]
            return [list(ids)]  # type: ignore[arg-type]
        assert self.text is not None
        return [self.text] if isinstance(self.text, str) else list(self.text)

    @property
    def batched(self) -> bool:
        return (
            len(self.prompts()) > 1
            or self.sampling_params.n > 1
            or (
                isinstance(self.text, list)
                or (self.input_ids is not None and any(isinstance(x, list) for x in self.input_ids))
            )
        )

    def own_loc(self, loc: Sequence[str | int]) -> Loc:
        """Where ``loc`` of the native job (``to_rollout``) is in this request."""
        field = "input_ids" if self.input_ids is not None else "text"
        return own_loc(loc, _SGLANG_NAMES, field, self.batched_prompts)

    @property
    def batched_prompts(self) -> bool:
        """The prompts came as a list of prompts (not one prompt)."""
        if self.input_ids is not None:
            return bool(self.input_ids) and all(isinstance(x, list) for x in self.input_ids)
        return isinstance(self.text, list)

    def to_rollout(self) -> RolloutRequest:
        p = self.sampling_params
        return native_rollout(
            self.prompts(),
            group_size=p.n,
            max_tokens=p.max_new_tokens,
            sampling=SamplingParams(
                temperature=p.temperature,
                top_p=p.top_p,
                top_k=max(p.top_k, 0),
                seed=p.sampling_seed,
            ),
            logprobs=self.return_logprob,
            group_key=self.group_key,
            prompt_id=self.prompt_id,
        )


#: ``meta_info.output_token_logprobs``: one ``[logprob, token id, null]`` per output token.
TokenLogprob = tuple[float, int, None]


class GenerateStop(BaseModel):
    type: Literal["stop"]
    matched: str | int | None = Field(
        description="the stop string or stop token id matched; at EOS its token id (None: no token)"
    )


class GenerateLength(BaseModel):
    type: Literal["length"]
    length: int


class GenerateAbort(BaseModel):
    type: Literal["abort"]
    message: str


#: ``meta_info.finish_reason``, told apart by ``type``.
GenerateFinish = Annotated[
    GenerateStop | GenerateLength | GenerateAbort, Field(discriminator="type")
]


class GenerateMeta(BaseModel):
    id: str = Field(description="the call's rid; ``<rid>-<prompt>-<sample>`` in a list")
    finish_reason: GenerateFinish
    prompt_tokens: int
    completion_tokens: int
    policy_version: int
    logprobs_mode: LogprobsMode
    output_token_logprobs: list[TokenLogprob] | None = Field(
        None, description="with return_logprob (absent without)"
    )


class GenerateOutput(BaseModel):
    """One sample of ``POST /generate``."""

    text: str
    output_ids: list[int]
    meta_info: GenerateMeta


#: The answer of ``POST /generate``: one ``GenerateOutput`` for one prompt and n = 1 (given as
#: one ``text`` or one list of ``input_ids``), else a list of them, prompt-major.
GenerateAnswer = GenerateOutput | list[GenerateOutput]


class AbortRequest(ClientRequest):
    # the schema says what _what checks: a rid, or abort_all true
    model_config = ConfigDict(
        **STRICT,
        json_schema_extra={
            "anyOf": [
                {"required": ["rid"], "properties": {"rid": {"minLength": 1}}},
                {"required": ["abort_all"], "properties": {"abort_all": {"const": True}}},
            ]
        },
    )

    rid: str = Field("", max_length=128, description="the call to abort ('' with abort_all)")
    abort_all: bool = False

    @model_validator(mode="after")
    def _what(self) -> AbortRequest:
        if not self.abort_all and not self.rid:
            raise ValueError("give a rid, or abort_all: true")
        return self


class AbortResponse(BaseModel):
    """``POST /abort_request``: the calls (rids) or jobs aborted; none for an unknown or finished
    rid."""

    aborted: list[str]


def _version_digits(value: str) -> str:
    if not VERSION_DIGITS.fullmatch(value):
        raise ValueError(
            f"weight_version {value[:40]!r} must be a positive integer up to {MAX_VERSION} in "
            "decimal digits (0-9)"
        )
    return value


#: A policy version as SGLang sends it (``weight_version``: decimal digits): 1..MAX_VERSION, as
#: ``POST /v1/weights``'s ``version``; the schema states it as a pattern.
VERSION_DIGITS = re.compile(decimal_pattern(MAX_VERSION))
VersionDigits = Annotated[
    str,
    StringConstraints(max_length=32),
    AfterValidator(_version_digits),
    WithJsonSchema({"type": "string", "maxLength": 32, "pattern": VERSION_DIGITS.pattern}),
]


class DiskWeightsRequest(ClientRequest):
    """``POST /update_weights_from_disk`` (SGLang's shape of POST /v1/weights)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model_path: str = Field(min_length=1, max_length=4096)
    load_format: str | None = Field(None, description="accepted; safetensors is what loads")
    weight_version: VersionDigits | None = Field(
        None, description="the new version as decimal digits (None: current + 1)"
    )
    abort_all_requests: bool = False
    sha256: str | None = Field(None, pattern="^[0-9a-f]{64}$", description="see POST /v1/weights")
    flush_cache: bool = Field(True, description="the prefix cache is always flushed")

    def version(self) -> int | None:
        return None if self.weight_version is None else int(self.weight_version)


class DiskWeightsResponse(BaseModel):
    """``POST /update_weights_from_disk`` in SGLang's shape, its errors too (``success`` false,
    with the HTTP status of ``POST /v1/weights``)."""

    success: bool
    message: str
    num_paused_requests: int = Field(description="unfinished requests started over")
    policy_version: int | None = Field(None, description="the version loaded (on success)")
