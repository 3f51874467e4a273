"""``StrictJSONRoute`` on a real FastAPI app: a key twice in any object of a JSON body is 422
naming it (Python's json would keep the last value); other bodies reach the handler as before.
Over HTTP through Serve: test_service.py's ``test_a_key_sent_twice_is_422``."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from app.serve.strict_json import StrictJSONRoute, duplicate_key


class Body(BaseModel):
    n: int
    inner: dict[str, int] = {}


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
