"""Operator endpoints' rules (no Ray, no HTTP server): bearer-token check, settings updates.

Invariant: an operator request is authorized only by ``Authorization: Bearer <token>`` equal
(constant-time compare) to the configured token (``operator_token`` in the config, else the
``SEER_OPERATOR_TOKEN`` environment variable); a missing header is 401, a wrong token 403, and
with no token configured every operator change is refused with 403 saying how to enable them.
"""

from __future__ import annotations

import dataclasses
import hmac
import os
from typing import Any

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field

from core.drafting.step_drafter import DraftSettings

TOKEN_ENV = "SEER_OPERATOR_TOKEN"


class SpeculationUpdate(BaseModel):
    """Body of ``PUT /v1/speculation``: fields of ``settings`` not given keep their value."""

    model_config = ConfigDict(extra="forbid")

    settings: dict[str, Any] = Field(
        description="any of: enabled (bool), max_draft (1..64, capped by the engine's K), "
        "min_token_prob ([0, 1]), adaptive (bool), probe_priority (>= 1)"
    )
    reason: str | None = Field(None, max_length=500, description="why (kept in the audit log)")


def configured_token(config_token: str | None) -> str | None:
    return config_token or os.environ.get(TOKEN_ENV) or None


def authorize(token: str | None, authorization: str | None) -> None:
    """Raise 401/403 unless ``authorization`` carries ``token`` (see the module invariant)."""
    if token is None:
        raise HTTPException(
            403,
            f"operator changes are disabled: set {TOKEN_ENV} (or operator_token in the config)",
        )
    if not authorization:
        raise HTTPException(
            401, "missing Authorization: Bearer <token>", headers={"WWW-Authenticate": "Bearer"}
        )
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
        raise HTTPException(403, "wrong operator token")


def merged_settings(current: DraftSettings, update: SpeculationUpdate) -> DraftSettings:
    """``current`` with ``update.settings`` applied; 422 naming the first bad field."""
    known = {f.name for f in dataclasses.fields(DraftSettings)}
    unknown = sorted(set(update.settings) - known)
    if unknown:
        raise HTTPException(
            422,
            [
                {
                    "loc": ["body", "settings", unknown[0]],
                    "msg": f"unknown setting; valid: {', '.join(sorted(known))}",
                }
            ],
        )
    given: dict[str, Any] = {}
    for name, value in update.settings.items():
        want = _TYPES[name]
        if want == "bool":
            ok = isinstance(value, bool)
        elif want == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            value = float(value) if ok else value
        if not ok:
            raise _bad(name, f"must be {want}, got {value!r}")
        given[name] = value
    merged = {**dataclasses.asdict(current), **given}
    try:
        return DraftSettings(**merged)
    except ValueError as exc:  # the bounds check names the field first
        name = str(exc).split(" ", 1)[0]
        raise _bad(name if name in _TYPES else "settings", str(exc)) from None


_TYPES = {f.name: str(f.type) for f in dataclasses.fields(DraftSettings)}


def _bad(name: str, msg: str) -> HTTPException:
    return HTTPException(422, [{"loc": ["body", "settings", name], "msg": msg}])
