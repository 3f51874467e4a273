"""JSON bodies with a key twice in one object are refused (422), not read as their last value.

Python's ``json`` (and so FastAPI) keeps the last of duplicate keys: ``{"max_tokens": 8,
"max_tokens": 100000}`` passed as 100000 while a proxy or log in front may have read 8. Routes of
the ingress app use ``StrictJSONRoute``: before FastAPI parses a JSON body, it is parsed once
more with a hook that sees every object's keys, and a duplicate is answered 422 naming it.
Malformed JSON is left to FastAPI's own 422.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(k)
        out[k] = v
    return out


def duplicate_key(body: bytes) -> str | None:
    """The first key found twice in one object of ``body`` (None: none, or not JSON)."""
    try:
        json.loads(body, object_pairs_hook=_pairs)
    except DuplicateKey as dup:
        return dup.key
    except ValueError:
        return None
    return None


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            if "json" in request.headers.get("content-type", ""):
                key = duplicate_key(await request.body())  # cached: FastAPI reads it again
                if key is not None:
                    msg = f"key {key!r} appears twice in one JSON object; send each key once"
                    err = {"loc": ["body"], "msg": msg, "type": "duplicate_key"}
                    return JSONResponse(status_code=422, content={"detail": [err]})
            return await handler(request)

        return strict
