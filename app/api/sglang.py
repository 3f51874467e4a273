"""SGLang's dialect: ``POST /generate``, ``/abort_request`` and ``/update_weights_from_disk`` in
the shape SGLang serves and slime sends: the requests, the answers, and how an answer is built.

One call is one job (its id: the call's ``rid`` when given, for ``/abort_request``); each
prompt (``input_ids`` or ``text``) is one group of ``sampling_params.n`` samples and the answer
lists them prompt-major (a single dict for one prompt and n = 1). Samples of one group sent one
per call join with ``group_key``. ``meta_info.output_token_logprobs`` is
``[[logprob, token_id, null], ...]`` when ``return_logprob``; ``meta_info.finish_reason.type``
is ``stop``, ``length`` or ``abort`` (the call was aborted: the tokens generated so far are
returned); ``meta_info.policy_version`` is the weights version that sampled the tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

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
from app.api.dialect import Loc, cut_at_stop, cut_at_stop_token, native_rollout, own_loc
from app.api.native import GroupResult, RolloutRequest
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


def generate_outputs(
    req: GenerateRequest,
    groups: list[GroupResult],
    rid: str,
    decode: Callable[[list[int]], str],
) -> list[GenerateOutput]:
    """Every sample of a terminal job (groups in prompt order), prompt-major; blocking
    (detokenizes)."""
    p = req.sampling_params
    out: list[GenerateOutput] = []
    for g in groups:
        for r in g.responses:
            ids, lps, stop_id = cut_at_stop_token(r.token_ids, r.logprobs, p.stop_token_ids or [])
            cut = cut_at_stop(ids, lps, decode(ids), p.stops(), decode, p.no_stop_trim)
            n = len(cut.token_ids)
            finish: GenerateStop | GenerateLength | GenerateAbort
            if cut.matched is not None:
                finish = GenerateStop(type="stop", matched=cut.matched)
            elif stop_id is not None:
                finish = GenerateStop(type="stop", matched=stop_id)
            elif r.finish_reason == "length":
                finish = GenerateLength(type="length", length=n)
            elif r.finish_reason == "abort":
                finish = GenerateAbort(type="abort", message="aborted (POST /abort_request)")
            else:
                finish = GenerateStop(type="stop", matched=cut.token_ids[-1] if n else None)
            meta = GenerateMeta(
                id=rid if len(groups) * p.n == 1 else f"{rid}-{g.prompt_index}-{r.index}",
                finish_reason=finish,
                prompt_tokens=len(g.prompt_token_ids),
                completion_tokens=n,
                policy_version=r.policy_version,
                logprobs_mode=r.logprobs_mode,
            )
            if req.return_logprob:  # set only then: absent from the answer without
                lps = cut.logprobs or []
                meta.output_token_logprobs = [
                    (lp, t, None) for lp, t in zip(lps, cut.token_ids, strict=True)
                ]
            out.append(GenerateOutput(text=cut.text, output_ids=cut.token_ids, meta_info=meta))
    return out


def generate_response(
    req: GenerateRequest,
    groups: list[GroupResult],
    rid: str,
    decode: Callable[[list[int]], str],
) -> dict[str, Any] | list[dict[str, Any]]:
    """SGLang's answer (``app.api.GenerateAnswer``) as JSON data: a list of samples, or the
    only one when the request is not batched; blocking (detokenizes)."""
    out = [
        o.model_dump(mode="json", exclude_unset=True)
        for o in generate_outputs(req, groups, rid, decode)
    ]
    return out if req.batched else out[0]
