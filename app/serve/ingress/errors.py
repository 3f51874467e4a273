"""How the ingress answers what it refuses: FastAPI's 422 shape for bad fields, the
scheduler's refusals as HTTP errors, the error responses each route documents.

Invariant: bad input is a 422 whose ``detail`` lists ``{"loc", "msg", "type"}`` naming the
field, in the field names of the dialect the caller spoke; nothing the caller sent makes the
answer itself fail (``json_safe``: NaN, bytes, lone surrogates become text), so no bad body is
ever a 500; a refusal of the scheduler keeps its status (404, 409, 422, 429 + Retry-After, 503),
and a call the scheduler's process died under is a 503 + Retry-After naming the restart.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.api import ErrorBody, RolloutRequest
from app.serve.scheduler.deployment import JobOutcome
from app.serve.scheduler.jobs import JobError

T = TypeVar("T")

ERROR_TEXT = {
    400: "the body is not JSON text (FastAPI could not parse it)",
    401: "no bearer token (Authorization: Bearer <token>)",
    403: "a token that may not do this",
    404: "no such job (unknown, or expired after job_ttl_s)",
    408: "the request body stopped arriving (limits.body_read_timeout_s)",
    409: "conflicts with the service's state (an existing id, a version that does not grow)",
    413: "request body over limits.max_body_bytes",
    429: "the service is at an open-work limit: retry after Retry-After seconds",
    503: "unavailable (shutting down, no replica, or the job failed)",
    504: "past request_timeout_s or weight_update_timeout_s",
}

# any route with a body (app.serve.ingress.body_limits; 400: not JSON)
BODY_ERRORS = (400, 408, 413)


def documented(*codes: int, model: type[BaseModel] = ErrorBody) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that answers ``codes`` (documented in /openapi.json) with
    ``model`` bodies (a route with a shape of its own names it)."""
    return {c: {"model": model, "description": ERROR_TEXT[c]} for c in codes}


def unprocessable(field: list[str | int], msg: str) -> HTTPException:
    """A 422 naming ``field`` of the body, in FastAPI's shape."""
    err = {"loc": ["body", *field], "msg": msg, "type": "value_error"}
    return HTTPException(status_code=422, detail=[err])


def json_safe(value: Any) -> Any:
    """``value`` with what JSON cannot carry (NaN, Infinity, exceptions, bytes) as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, str):  # a lone surrogate would fail the answer's encoding (a 500)
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if value is None or isinstance(value, bool | int | float):
        return value
    return repr(value)


async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """FastAPI's own answer to an HTTP error, but a 405's ``Allow`` names every method of the
    path: each route holds one method, and Starlette listed only the first matching route's."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allow: set[str] = set()
        for route in request.app.router.routes:
            methods = getattr(route, "methods", None)
            if methods and route.matches(request.scope)[0] is not Match.NONE:
                allow |= set(methods)
        headers["Allow"] = ", ".join(sorted(allow))
    if exc.status_code in (204, 304):
        return Response(status_code=exc.status_code, headers=headers)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 for a body that fails its model, JSON-safe whatever the body held."""
    detail = [
        {
            k: json_safe(v)
            for k, v in err.items()
            # the input of an error about the whole body is the body: not echoed back
            if k in ("loc", "msg", "type") or (k == "input" and len(err.get("loc", ())) > 1)
        }
        for err in exc.errors()
    ]
    return JSONResponse(status_code=422, content={"detail": detail})


def refused(exc: JobError) -> HTTPException:
    """The scheduler's refusal as the HTTP error it names."""
    headers = None
    if exc.retry_after_s is not None:
        headers = {"Retry-After": str(math.ceil(exc.retry_after_s))}
    if exc.status == 422:  # a 422 is a list of field errors (documented): the scheduler's rules
        # span fields (prompts x group_size, prompt + max_tokens, ...), so the body is named
        detail: Any = [{"loc": list(exc.loc), "msg": exc.message, "type": "value_error"}]
        return HTTPException(status_code=422, detail=detail, headers=headers)
    return HTTPException(status_code=exc.status, detail=exc.message, headers=headers)


#: what a caller is told when the scheduler's process died under its call
SCHEDULER_LOST = (
    "the scheduler restarted (its process died): the jobs it held are lost, this one with them "
    "when it had one; submit again after Retry-After seconds"
)


def scheduler_lost(exc: BaseException, retry_after_s: float) -> HTTPException | None:
    """A call to the scheduler that its process did not live to answer (Ray's actor errors)
    as a 503 naming the restart, with ``Retry-After``; None for any other error."""
    from ray.exceptions import RayActorError  # ActorDiedError, ActorUnavailableError

    if not isinstance(exc, RayActorError):
        return None
    headers = {"Retry-After": str(math.ceil(retry_after_s))}
    return HTTPException(status_code=503, detail=SCHEDULER_LOST, headers=headers)


def failed(outcome: JobOutcome) -> HTTPException:
    """A job that did not end done: 504 past request_timeout_s, else 503."""
    st = outcome.status
    code = 504 if st.error and "request_timeout_s" in st.error else 503
    return HTTPException(code, f"rollout {st.id} {st.state.value}: {st.error}")


def as_native(build: Callable[[], RolloutRequest]) -> RolloutRequest:
    """The native job a dialect's request becomes (``build``); its refusal as a 422 naming the
    dialect's fields."""
    try:
        return build()
    except ValidationError as exc:
        detail = [
            {"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()
        ]
        raise HTTPException(status_code=422, detail=detail) from None
    except ValueError as exc:
        raise unprocessable([], str(exc)) from None


class DialectRequest(Protocol):
    """A trainer dialect's request: it maps the native job's field locations to its own."""

    def own_loc(self, loc: Sequence[str | int]) -> Sequence[str | int]: ...


async def in_their_fields(req: DialectRequest, work: Callable[[], Awaitable[T]]) -> T:
    """``work`` on the native job ``req`` became; a 422 about that job names ``req``'s own
    fields (``n``, ``sampling_params.max_new_tokens``, ``input_ids``), not the job's."""
    try:
        return await work()
    except HTTPException as exc:
        if exc.status_code != 422 or not isinstance(exc.detail, list):
            raise
        detail = [
            {**e, "loc": ["body", *req.own_loc(e["loc"][1:])]} if e["loc"][:1] == ["body"] else e
            for e in exc.detail
        ]
        raise HTTPException(status_code=422, detail=detail, headers=exc.headers) from None


def field_messages(detail: str | Sequence[Mapping[str, Any]] | Any) -> str:
    """An HTTP error's detail as one line: a 422's ``[{"loc", "msg"}]`` as its messages."""
    if isinstance(detail, list):
        return "; ".join(str(d.get("msg", d)) for d in detail)
    return str(detail)
