"""``BodyLimits`` on a real FastAPI app, driven at the ASGI level (each part of a body, and a
client that stops sending, are under the test's control). Over real HTTP through Serve:
``test_service.py::test_oversized_or_stalled_bodies_are_refused``."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request

from app.serve.ingress.body_limits import BodyLimits

LIMIT = 1000


def _app() -> tuple[FastAPI, list[int]]:
    app = FastAPI()
    handled: list[int] = []

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        body = await request.body()
        handled.append(len(body))
        return {"bytes": len(body)}

    app.add_middleware(BodyLimits, limits=lambda: (LIMIT, 0.2))
    return app, handled


def _call(app: Any, parts: list[bytes], declared: int | None, hang: bool = False) -> int:
    headers = [(b"content-type", b"application/octet-stream")]
    if declared is not None:
        headers.append((b"content-length", str(declared).encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/echo", "raw_path": b"/echo", "query_string": b"",
        "headers": headers, "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5),
        "root_path": "",
    }  # fmt: skip
    queue = list(parts)
    status: list[int] = []

    async def receive() -> dict[str, Any]:
        if not queue:
            if hang:
                await asyncio.Event().wait()
            return {"type": "http.disconnect"}
        part = queue.pop(0)
        return {"type": "http.request", "body": part, "more_body": bool(queue) or hang}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    asyncio.run(asyncio.wait_for(app(scope, receive, send), 10))
    return status[0]


def test_a_body_within_the_limit_reaches_the_handler() -> None:
    app, handled = _app()
    assert _call(app, [b"x" * 600, b"y" * 400], declared=1000) == 200
    assert handled == [1000]


def test_a_declared_length_over_the_limit_is_413_before_any_read() -> None:
    app, handled = _app()
    assert _call(app, [b"x" * 10], declared=LIMIT + 1) == 413
    assert handled == []


def test_a_body_that_grows_past_the_limit_is_413() -> None:
    """Chunked (no Content-Length), or longer than declared: counted as it arrives."""
    app, handled = _app()
    assert _call(app, [b"x" * 600, b"y" * 600], declared=None) == 413
    assert _call(app, [b"x" * 600, b"y" * 600], declared=10) == 413
    assert handled == []


def test_a_client_that_stops_sending_mid_body_gets_408() -> None:
    app, handled = _app()
    assert _call(app, [b"x" * 10], declared=100, hang=True) == 408
    assert handled == []
