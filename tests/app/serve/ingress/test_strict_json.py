"""``StrictJSONRoute`` on a real FastAPI app: a key twice in any object of a JSON body is 422
naming it (Python's json would keep the last value); other bodies reach the handler as before.
Over HTTP through Serve: test_service.py's ``test_a_key_sent_twice_is_422``."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from app.serve.ingress.strict_json import StrictJSONRoute, duplicate_key, parse


class Body(BaseModel):
    n: int
    inner: dict[str, int] = {}


class Mixed(BaseModel):
    model_config = {"strict": True, "allow_inf_nan": False}  # as the API models
    n: int
    x: float


def _client() -> TestClient:
    app = FastAPI()
    app.router.route_class = StrictJSONRoute

    @app.post("/x")
    async def x(body: Body) -> dict[str, int]:
        return {"n": body.n}

    return TestClient(app)


def test_duplicate_keys_anywhere_are_found() -> None:
    assert duplicate_key(b'{"a": 1, "b": {"c": 2, "c": 3}}') == "c"
    assert duplicate_key(b'[{"a": 1}, {"a": 2}]') is None  # two objects, one key each
    assert duplicate_key(b"not json") is None


def test_a_key_twice_is_422_and_the_handler_never_runs() -> None:
    c = _client()
    headers = {"content-type": "application/json"}
    r = c.post("/x", content=b'{"n": 8, "n": 100000}', headers=headers)
    assert r.status_code == 422 and "'n' appears twice" in r.json()["detail"][0]["msg"]
    r = c.post("/x", content=b'{"n": 1, "inner": {"k": 1, "k": 2}}', headers=headers)
    assert r.status_code == 422 and "'k'" in r.text
    assert c.post("/x", json={"n": 8}).json() == {"n": 8}
    assert c.post("/x", content=b"{oops", headers=headers).status_code == 422  # FastAPI's own


def test_an_integral_number_is_an_integer_however_it_is_spelled() -> None:
    """JSON Schema counts 8.0 and 8e0 as the integer 8: a client holding the published schema
    may send them for an integer field. 8.5 is still no integer; a float field takes either."""
    app = FastAPI()
    app.router.route_class = StrictJSONRoute

    @app.post("/m")
    async def m(body: Mixed) -> dict[str, Any]:
        return {"n": body.n, "x": body.x, "types": [type(body.n).__name__, type(body.x).__name__]}

    c = TestClient(app)
    headers = {"content-type": "application/json"}
    r = c.post("/m", content=b'{"n": 8.0, "x": 2e0}', headers=headers)
    assert r.status_code == 200 and r.json() == {"n": 8, "x": 2.0, "types": ["int", "float"]}
    r = c.post("/m", content=b'{"n": 8.5, "x": 0.25}', headers=headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "n"]
    assert parse(b"[1e400, 0.5, 3]") == [math.inf, 0.5, 3]  # inf stays a float, to be refused
