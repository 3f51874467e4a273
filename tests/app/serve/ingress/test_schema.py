"""The bounds a deployment publishes in its /openapi.json (``app.serve.ingress.schema``) are
the ones its ingress enforces: at each published edge the handler accepts, one past it the
handler answers 422 naming the field. No Serve: the ingress's checks run on a bare instance."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from fastapi import HTTPException

from app.api import DEPLOYMENT_BOUND, CompletionRequest, GenerateRequest, RolloutRequest
from app.config import ServiceConfig
from app.engines.config import EngineConfig
from app.engines.registry import make_codec
from app.serve.ingress.deployment import Ingress, api
from app.serve.ingress.schema import deployment_schema

MAX_LEN = 64
CONFIG = ServiceConfig(engine=EngineConfig(backend="fake", max_model_len=MAX_LEN))


def _ingress() -> Any:
    """An Ingress with the config and codec its ``__init__`` sets, and nothing else."""

    class Bare(Ingress.func_or_class):  # type: ignore[misc, name-defined]
        def __del__(self) -> None:  # its Serve wrapper's async __del__ would warn
            pass

    ingress = Bare.__new__(Bare)
    ingress.config = CONFIG
    ingress.codec = make_codec(CONFIG.engine)
    return ingress


INGRESS = _ingress()
VOCAB = INGRESS.codec.vocab_size
SCHEMA = deployment_schema(
    api.openapi(), max_model_len=MAX_LEN, vocab_size=VOCAB, logprobs_mode="raw"
)
PARTS = SCHEMA["components"]["schemas"]


def _ids_schema(node: dict[str, Any]) -> dict[str, Any]:
    [ids] = [b for b in node["anyOf"] if b.get("items", {}).get("type") == "integer"]
    return ids


#: (request model, its published max-tokens field, its published token-id arrays, a body)
#: for each way a client sends token ids and a generation length
SHAPES = [
    (
        RolloutRequest,
        PARTS["RolloutRequest"]["properties"]["max_tokens"],
        _ids_schema(PARTS["RolloutRequest"]["properties"]["prompts"]["items"]),
        lambda ids, n: {"prompts": [ids], "group_size": 1, "max_tokens": n},
    ),
    (
        CompletionRequest,
        PARTS["CompletionRequest"]["properties"]["max_tokens"],
        _ids_schema(PARTS["CompletionRequest"]["properties"]["prompt"]),
        lambda ids, n: {"model": "m", "prompt": ids, "max_tokens": n},
    ),
    (
        GenerateRequest,
        PARTS["SGLangSampling"]["properties"]["max_new_tokens"],
        _ids_schema(PARTS["GenerateRequest"]["properties"]["input_ids"]),
        lambda ids, n: {"input_ids": ids, "sampling_params": {"max_new_tokens": n}},
    ),
]


def _check(model: Any, body: dict[str, Any]) -> str | None:
    """None when the ingress takes ``body`` to the model and context, else the field its 422
    names."""
    req = model.model_validate(body)
    rollout = req if isinstance(req, RolloutRequest) else req.to_rollout()
    try:
        asyncio.run(INGRESS._prompt_ids(rollout))
    except HTTPException as exc:
        assert exc.status_code == 422, exc.detail
        return str(exc.detail[0]["loc"][1])
    return None


@pytest.mark.parametrize(("model", "max_tokens", "ids", "body"), SHAPES)
def test_published_bounds_are_the_enforced_ones(
    model: Any, max_tokens: dict[str, Any], ids: dict[str, Any], body: Any
) -> None:
    most, top, longest = max_tokens["maximum"], ids["items"]["maximum"], ids["maxItems"]
    assert (most, top, longest, ids["items"]["minimum"]) == (MAX_LEN - 1, VOCAB - 1, MAX_LEN - 1, 0)
    assert _check(model, body([top], most)) is None
    assert _check(model, body([top + 1], 1)) == "prompts"
    assert _check(model, body([-1], 1)) == "prompts"
    assert _check(model, body([0], most + 1)) == "max_tokens"
    assert _check(model, body([0] * longest, 1)) is None
    assert _check(model, body([0] * (longest + 1), 1)) == "prompts"


def test_the_published_logprobs_mode_is_the_engines() -> None:
    field = PARTS["RolloutRequest"]["properties"]["logprobs_mode"]
    assert [b["enum"] for b in field["anyOf"] if "enum" in b] == [[CONFIG.engine.logprobs_mode]]
    other = RolloutRequest(prompts=["a"], group_size=1, max_tokens=1, logprobs_mode="processed")
    with pytest.raises(HTTPException) as exc:
        asyncio.run(INGRESS._submit(other))
    assert exc.value.status_code == 422 and exc.value.detail[0]["loc"] == ["body", "logprobs_mode"]


def test_every_marker_is_written_and_the_static_schema_is_left_alone() -> None:
    static = api.openapi()
    before = copy.deepcopy(static)
    served = deployment_schema(static, max_model_len=512, vocab_size=100, logprobs_mode="raw")
    assert static == before
    kinds: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if DEPLOYMENT_BOUND in node:
                kinds.append(node[DEPLOYMENT_BOUND])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(served)
    # token ids: native prompts, OpenAI prompt (ids, list of ids), SGLang input_ids (the same);
    # new tokens: max_tokens (native, OpenAI), max_new_tokens (SGLang); the logprobs mode
    assert sorted(kinds) == sorted(["token_ids"] * 5 + ["new_tokens"] * 3 + ["logprobs_mode"])
    with pytest.raises(ValueError, match="x-deployment-bound"):
        deployment_schema(
            {"a": {DEPLOYMENT_BOUND: "?"}}, max_model_len=8, vocab_size=8, logprobs_mode="raw"
        )
