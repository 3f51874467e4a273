"""The request models check what their published JSON Schema says, no more and no less, at the
edges schemathesis found: each refusal names its field (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.api import CompletionRequest, GenerateRequest


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
