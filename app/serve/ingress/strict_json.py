"""JSON bodies read as JSON Schema reads them: a key twice in one object is refused (422), not
read as its last value, and an integral number is an integer whatever its spelling.

- Python's ``json`` (and so FastAPI) keeps the last of duplicate keys: ``{"max_tokens": 8,
  "max_tokens": 100000}`` passed as 100000 while a proxy or log in front may have read 8.
- JSON Schema counts ``8.0`` and ``8e0`` as the integer 8, so a client (or a schema-driven fuzzer)
  holding our published schema may send them for an ``integer`` field; Python's ``json`` makes
  them floats, which strict models refuse for an int. A float field still takes the integer.

Routes of the ingress app use ``StrictJSONRoute``: a JSON body is parsed here once, with hooks
that see every object's keys and every non-integer spelling of a number, and FastAPI reads that
parse (``Request.json`` returns it). Malformed JSON is left to FastAPI's own 422.
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


def _number(text: str) -> int | float:
    """A number written with a fraction or an exponent: an int when integral (``231.0``,
    ``1e3``), else a float (``inf`` and ``nan`` stay floats, for the models to refuse)."""
    value = float(text)
    return int(value) if value.is_integer() else value


def parse(body: bytes) -> Any:
    """``body`` as JSON Schema reads it; ``DuplicateKey`` for a key twice in one object,
    ``ValueError`` for what is not JSON."""
    return json.loads(body, object_pairs_hook=_pairs, parse_float=_number)


def duplicate_key(body: bytes) -> str | None:
    """The first key found twice in one object of ``body`` (None: none, or not JSON)."""
    try:
        parse(body)
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
                try:
                    parsed = parse(await request.body())
                except DuplicateKey as dup:
                    msg = f"key {dup.key!r} appears twice in one JSON object; send each key once"
                    err = {"loc": ["body"], "msg": msg, "type": "duplicate_key"}
                    return JSONResponse(status_code=422, content={"detail": [err]})
                except ValueError:
                    pass  # not JSON: FastAPI parses it again and answers its own 422
                else:
                    # Starlette's Request.json() returns this (its cache); FastAPI reads that
                    request._json = parsed
            return await handler(request)

        return strict
