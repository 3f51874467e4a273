"""``BodyLimits`` bounds the wait for the body, not the answer: a streamed answer outlives
``body_read_timeout_s``, its disconnect listener waiting unbounded once the body is in (the
NDJSON stream of GET /v1/rollouts/{id}/groups was cut at that timeout: schemathesis's stateful
phase, "Response ended prematurely")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from app.serve.ingress.body_limits import BodyLimits

TIMEOUT_S = 0.2


def test_a_stream_longer_than_the_body_timeout_is_answered_whole() -> None:
    app = FastAPI()

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def lines() -> AsyncIterator[bytes]:
            for i in range(4):
                await asyncio.sleep(TIMEOUT_S)
                yield f"{i}\n".encode()

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    app.add_middleware(BodyLimits, limits=lambda: (1000, TIMEOUT_S))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/stream", "raw_path": b"/stream", "query_string": b"",
        "headers": [], "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5), "root_path": "",
    }  # fmt: skip
    sent: list[dict[str, Any]] = []
    parts = [{"type": "http.request", "body": b"", "more_body": False}]  # no body, at once

    async def receive() -> dict[str, Any]:
        if parts:
            return parts.pop()
        await asyncio.Event().wait()  # the client stays until the answer is over
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(asyncio.wait_for(app(scope, receive, send), 10))
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    assert body == b"0\n1\n2\n3\n"
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [200]
