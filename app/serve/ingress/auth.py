"""Operator endpoints' rules (no Ray, no HTTP server): bearer-token check, settings updates.

Invariant: an operator request is authorized only by ``Authorization: Bearer <token>`` equal
(constant-time compare) to the configured token (``operator_token`` in the config, else the
``SEER_OPERATOR_TOKEN`` environment variable); a missing header is 401, a wrong token 403, and
with no token configured every operator change is refused with 403 saying how to enable them.

Who may cancel a job: the holder of its cancel token (returned once, in the 202 of its
submission; the job keeps only its sha256) or the operator. ``abort_all`` is an operator change.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from typing import Any

from fastapi import Header, HTTPException, Security
from fastapi.security import HTTPBearer

from app.api import SpeculationUpdate
from app.env import OPERATOR_TOKEN_ENV, operator_token
from core.drafting.step_drafter import DraftSettings


def new_cancel_token() -> tuple[str, str]:
    """A job's cancel token (given to its submitter once) and its digest (kept with the job)."""
    token = secrets.token_urlsafe(24)
    return token, token_digest(token)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def bearer(authorization: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>``, None without one. Headers arrive decoded
    as Latin-1; the token comes back as the text of the bytes sent (UTF-8)."""
    if not authorization:
        return None
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    return given.strip().encode("latin-1", "replace").decode("utf-8", "replace")


def is_operator(token: str | None, authorization: str | None) -> bool:
    """Whether ``authorization`` carries the configured operator token (constant time)."""
    given = bearer(authorization)
    if token is None or given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def configured_token(config_token: str | None) -> str | None:
    return config_token or operator_token()


def authorize(token: str | None, authorization: str | None) -> None:
    """Raise 401/403 unless ``authorization`` carries ``token`` (see the module invariant)."""
    if token is None:
        raise HTTPException(
            403,
            f"operator changes are disabled: set {OPERATOR_TOKEN_ENV} "
            "(or operator_token in the config)",
        )
    if bearer(authorization) is None:  # none, or not a bearer token: as DELETE answers it
        raise HTTPException(
            401,
            "missing Authorization: Bearer <token>"
            + (
                f" (got a {authorization.partition(' ')[0][:20]!r} header)" if authorization else ""
            ),
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not is_operator(token, authorization):  # bytes compared: non-ASCII is no TypeError
        raise HTTPException(403, "wrong operator token")


def settings_patch(update: SpeculationUpdate) -> dict[str, Any]:
    """The fields ``update`` changes, type- and bounds-checked (every bound of ``DraftSettings``
    is one field's, so a patch valid here is valid over any current settings); 422 naming the
    first bad field. The scheduler applies it over its current settings under its lock
    (``SpeculationControl.update``): two concurrent PUTs both land."""
    known = {f.name for f in dataclasses.fields(DraftSettings)}
    unknown = sorted(set(update.settings) - known)
    if unknown:
        raise HTTPException(
            422,
            [
                {
                    "loc": ["body", "settings", unknown[0]],
                    "msg": f"unknown setting; valid: {', '.join(sorted(known))}",
                    "type": "value_error",
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
    try:
        dataclasses.replace(DraftSettings(), **given)
    except ValueError as exc:  # the bounds check names the field first
        name = str(exc).split(" ", 1)[0]
        raise _bad(name if name in _TYPES else "settings", str(exc)) from None
    return given


_TYPES = {f.name: str(f.type) for f in dataclasses.fields(DraftSettings)}


def _bad(name: str, msg: str) -> HTTPException:
    return HTTPException(
        422, [{"loc": ["body", "settings", name], "msg": msg, "type": "value_error"}]
    )


#: How /openapi.json states the rules above (the handlers read the header themselves, so the
#: answers stay this module's 401/403): ``OPERATOR`` on the routes only the operator token
#: opens, ``OPERATOR_OR_OWN`` (an alternative without it) on those a cancel token or a
#: ``/generate`` rid may open too. ``Authorization`` is the one header either reads.
BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="Authorization: Bearer <token>: the operator token (SEER_OPERATOR_TOKEN or "
    "operator_token), or for DELETE /v1/rollouts/{id} the job's cancel_token",
)
OPERATOR: dict[str, Any] = {"dependencies": [Security(BEARER)]}
# the scheme itself is registered by the OPERATOR routes' dependency
OPERATOR_OR_OWN: dict[str, Any] = {"openapi_extra": {"security": [{"bearer": []}, {}]}}
AUTHORIZATION = Header(None, include_in_schema=False)  # declared by the schemes above
