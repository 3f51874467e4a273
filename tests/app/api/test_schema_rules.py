"""The request models check what their published JSON Schema says, no more and no less, at the
edges schemathesis found: each refusal names its field (no server needed)."""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from app.api import (
    MAX_VERSION,
    CompletionRequest,
    DiskWeightsRequest,
    GenerateRequest,
    RolloutRequest,
)
from app.api.base import decimal_pattern


def _refused(model: type[BaseModel], body: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The locations of the fields ``model`` refuses in ``body`` (empty: accepted)."""
    try:
        model.model_validate(body)
    except ValidationError as exc:
        return [tuple(e["loc"]) for e in exc.errors()]
    return []


STREAMING = [
    (CompletionRequest, {"model": "m", "prompt": "a"}),
    (GenerateRequest, {"text": "a"}),
]


@pytest.mark.parametrize(("model", "body"), STREAMING)
@pytest.mark.parametrize("stream", [0, 1, True, "false", None, 0.0])
def test_stream_is_a_boolean_that_must_be_false(
    model: type[BaseModel], body: dict[str, Any], stream: Any
) -> None:
    """``Literal[False]`` took ``0`` (``0 == False``) while the schema says boolean."""
    assert _refused(model, {**body, "stream": stream}) == [("stream",)]
    assert _refused(model, {**body, "stream": False}) == []
    assert model.model_json_schema()["properties"]["stream"]["type"] == "boolean"
    assert model.model_json_schema()["properties"]["stream"]["const"] is False


@given(limit=st.integers(1, 10**12), n=st.integers(-(10**13), 10**13), zeros=st.integers(0, 3))
def test_decimal_pattern_matches_exactly_1_to_the_limit(limit: int, n: int, zeros: int) -> None:
    near = [limit - 1, limit, limit + 1, 0, 1, n]
    ok = jsonschema_rs.Draft202012Validator({"pattern": decimal_pattern(limit)}).is_valid
    for x in near:
        assert ok("0" * zeros + str(x)) == (1 <= x <= limit), (limit, x)


#: (weight_version, accepted): the edges of 1..MAX_VERSION, and what is not ASCII digits
VERSIONS = [
    ("1", True),
    ("007", True),
    (str(MAX_VERSION), True),
    ("", False),  # schemathesis: the schema allowed any string, the service refused it
    ("0", False),
    (str(MAX_VERSION + 1), False),
    ("5\n", False),
    (" 5", False),
    ("\u0663", False),  # an Arabic-Indic 3: str.isdigit() said yes
    ("\u00b2", False),  # a superscript 2: isdigit() said yes, int() raised
    ("1" * 33, False),
]


@pytest.mark.parametrize(("version", "accepted"), VERSIONS)
def test_weight_version_is_what_its_schema_says(version: str, accepted: bool) -> None:
    """``/update_weights_from_disk``'s ``weight_version`` (a string): 1..MAX_VERSION in decimal
    digits, as ``/v1/weights``'s ``version``; its pattern says so."""
    schema = DiskWeightsRequest.model_json_schema()["properties"]["weight_version"]["anyOf"][0]
    assert jsonschema_rs.Draft202012Validator(schema).is_valid(version) == accepted
    body = {"model_path": "/ckpt", "weight_version": version}
    assert _refused(DiskWeightsRequest, body) == ([] if accepted else [("weight_version",)])


ROLLOUT = {"prompts": ["a"], "group_size": 1, "max_tokens": 4}

#: (model, body, field): a body the schema refuses (schemathesis would send it as valid if the
#: schema did not say so) and that the model refuses, naming ``field``
REFUSED = [
    (RolloutRequest, {**ROLLOUT, "prompt_ids": [""]}, ("prompt_ids", 0)),
    (RolloutRequest, {**ROLLOUT, "prompt_ids": ["x" * 257]}, ("prompt_ids", 0)),
    (GenerateRequest, {"text": "a", "rid": "a b"}, ("rid",)),
    (GenerateRequest, {"text": "a", "rid": "ab\n"}, ("rid",)),
    (GenerateRequest, {"text": []}, ("text",)),
    (GenerateRequest, {"text": ["a"] * 4097}, ("text",)),
    (GenerateRequest, {"input_ids": [[1]] * 4097}, ("input_ids",)),
    (GenerateRequest, {"text": "a", "sampling_params": {"stop": ["s"] * 17}}, ("sampling_params",)),
    (CompletionRequest, {"model": "m", "prompt": ["a"] * 4097}, ("prompt",)),
    (CompletionRequest, {"model": "m", "prompt": "a", "stop": ["s"] * 17}, ("stop",)),
]


@pytest.mark.parametrize(("model", "body", "field"), REFUSED)
def test_what_the_model_refuses_the_schema_refuses(
    model: type[BaseModel], body: dict[str, Any], field: tuple[Any, ...]
) -> None:
    assert not jsonschema_rs.Draft202012Validator(model.model_json_schema()).is_valid(body)
    refused = _refused(model, body)
    assert refused and all(loc[: len(field)] == field for loc in refused), refused
