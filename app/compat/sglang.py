"""``POST /generate`` and ``/abort_request`` in the shape SGLang serves and slime sends.

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
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api import ClientRequest, GroupResult, RolloutRequest
from app.compat.native import native_rollout
from app.compat.stop import cut_at_stop, cut_at_stop_token
from core.engine import SamplingParams
from core.engine.types import SEED_SPACE

_STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
RID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


class SGLangSampling(BaseModel):
    model_config = _STRICT

    max_new_tokens: int = Field(128, ge=1, le=1_048_576)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(-1, ge=-1, le=1_000_000, description="-1: disabled")
    n: int = Field(1, ge=1, le=256, description="samples per prompt (the group size)")
    stop: str | list[str] | None = Field(None, description="stop strings (up to 16)")
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
        **_STRICT,
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

    input_ids: list[int] | list[list[int]] | None = None
    text: str | list[str] | None = None
    sampling_params: SGLangSampling = Field(default_factory=SGLangSampling)
    return_logprob: bool = False
    rid: str | None = Field(None, description="id of this call, for /abort_request")
    stream: Literal[False] = Field(False, description="streaming is not supported")
    group_key: str | None = Field(None, min_length=1, max_length=256)
    prompt_id: str | None = Field(None, min_length=1, max_length=256)

    @model_validator(mode="after")
    def _one_input(self) -> GenerateRequest:
        if (self.input_ids is None) == (self.text is None):
            raise ValueError("give exactly one of input_ids and text")
        if self.rid is not None and not RID.match(self.rid):
            raise ValueError(f"rid {self.rid!r} must be 1-128 of A-Z a-z 0-9 _ . : -")
        if len(self.sampling_params.stops()) > 16:
            raise ValueError("at most 16 stop strings")
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


class AbortRequest(ClientRequest):
    # the schema says what _what checks: a rid, or abort_all true
    model_config = ConfigDict(
        **_STRICT,
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


def generate_response(
    req: GenerateRequest,
    groups: list[GroupResult],
    rid: str,
    decode: Callable[[list[int]], str],
) -> dict[str, Any] | list[dict[str, Any]]:
    """SGLang's answer for a terminal job (groups in prompt order); blocking (detokenizes)."""
    p = req.sampling_params
    out: list[dict[str, Any]] = []
    for g in groups:
        for r in g.responses:
            ids, lps, stop_id = cut_at_stop_token(r.token_ids, r.logprobs, p.stop_token_ids or [])
            cut = cut_at_stop(ids, lps, decode(ids), p.stops(), decode, p.no_stop_trim)
            n = len(cut.token_ids)
            if cut.matched is not None:
                finish: dict[str, Any] = {"type": "stop", "matched": cut.matched}
            elif stop_id is not None:
                finish = {"type": "stop", "matched": stop_id}
            elif r.finish_reason == "length":
                finish = {"type": "length", "length": n}
            elif r.finish_reason == "abort":
                finish = {"type": "abort", "message": "aborted (POST /abort_request)"}
            else:
                finish = {"type": "stop", "matched": cut.token_ids[-1] if n else None}
            meta: dict[str, Any] = {
                "id": rid if len(groups) * p.n == 1 else f"{rid}-{g.prompt_index}-{r.index}",
                "finish_reason": finish,
                "prompt_tokens": len(g.prompt_token_ids),
                "completion_tokens": n,
                "policy_version": r.policy_version,
                "logprobs_mode": r.logprobs_mode,
            }
            if req.return_logprob:
                lps = cut.logprobs or []
                meta["output_token_logprobs"] = [
                    [lp, t, None] for lp, t in zip(lps, cut.token_ids, strict=True)
                ]
            out.append({"text": cut.text, "output_ids": cut.token_ids, "meta_info": meta})
    return out if req.batched else out[0]
