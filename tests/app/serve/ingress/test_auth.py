"""Operator endpoint rules: bearer token and settings updates (no Ray, no server)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fastapi import HTTPException

from app.api import SpeculationUpdate
from app.env import OPERATOR_TOKEN_ENV
from app.serve.ingress.auth import authorize, configured_token, settings_patch
from core.drafting.step_drafter import DraftSettings


@pytest.mark.parametrize(
    ("token", "header", "status"),
    [
        (None, "Bearer x", 403),  # no token configured: operator changes refused
        ("s3cret", None, 401),
        ("s3cret", "", 401),
        ("s3cret", "Bearer nope", 403),
        ("s3cret", "Basic s3cret", 401),  # not a bearer token: no credentials (as DELETE)
        ("s3cret", "Bearer ", 401),
        ("s3cret", "Bearer s3cret", None),
        ("s3cret", "bearer  s3cret ", None),
    ],
)
def test_authorize(token: str | None, header: str | None, status: int | None) -> None:
    if status is None:
        authorize(token, header)
        return
    with pytest.raises(HTTPException) as exc:
        authorize(token, header)
    assert exc.value.status_code == status


def test_token_comes_from_config_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OPERATOR_TOKEN_ENV, raising=False)
    assert configured_token(None) is None
    monkeypatch.setenv(OPERATOR_TOKEN_ENV, "from-env")
    assert configured_token(None) == "from-env"
    assert configured_token("from-config") == "from-config"


def test_updates_are_the_given_fields_checked() -> None:
    assert settings_patch(SpeculationUpdate(settings={"enabled": False})) == {"enabled": False}
    got = settings_patch(SpeculationUpdate(settings={"min_token_prob": 0}))
    assert got == {"min_token_prob": 0.0} and isinstance(got["min_token_prob"], float)


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"max_draft": 0}, "max_draft"),
        ({"max_draft": 4.0}, "max_draft"),
        ({"max_draft": "4"}, "max_draft"),
        ({"enabled": 1}, "enabled"),
        ({"min_token_prob": 1.5}, "min_token_prob"),
        ({"min_token_prob": True}, "min_token_prob"),
        ({"probe_priority": 0.5}, "probe_priority"),
        ({"width": 2}, "width"),
    ],
)
def test_bad_updates_are_422_naming_the_field(settings: dict[str, Any], field: str) -> None:
    with pytest.raises(HTTPException) as exc:
        settings_patch(SpeculationUpdate(settings=settings))
    assert exc.value.status_code == 422
    assert exc.value.detail[0]["loc"] == ["body", "settings", field]


def test_the_published_schema_states_the_cross_field_rules() -> None:
    """Rules the handlers check, in /openapi.json too (schemathesis found schema-valid requests
    refused): one of input_ids and text, a rid or abort_all, no empty prompt, the known
    speculation settings only; and every 422 item carries FastAPI's ``type``."""
    from app.serve.ingress.deployment import api

    doc = api.openapi()["components"]["schemas"]
    gen = doc["GenerateRequest"]["oneOf"]
    assert [b["required"] for b in gen] == [["input_ids"], ["text"]]
    assert [b["required"] for b in doc["AbortRequest"]["anyOf"]] == [["rid"], ["abort_all"]]
    items = doc["RolloutRequest"]["properties"]["prompts"]["items"]["anyOf"]
    assert {"minLength": 1, "type": "string"} in items
    settings = doc["SpeculationUpdate"]["properties"]["settings"]
    assert settings["additionalProperties"] is False
    assert set(settings["properties"]) == {f.name for f in dataclasses.fields(DraftSettings)}
    with pytest.raises(HTTPException) as exc:
        settings_patch(SpeculationUpdate(settings={"width": 2}))
    assert exc.value.detail[0]["type"] == "value_error"
