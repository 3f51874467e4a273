"""Bounds on reading a request body (ASGI middleware of the ingress app).

Invariant: no handler sees more than ``max_body_bytes`` of body, and no read of the body waits
longer than ``body_read_timeout_s`` for its next part. A declared ``Content-Length`` over the
limit is refused with 413 before a byte is read (nothing is tokenized or parsed); a body that
grows past it as it arrives (chunked, or longer than declared) is refused with 413 as soon as it
does; a client that stops sending mid-body gets 408 and its connection back. Once the body is
in, ``receive`` waits unbounded again: what comes next is the client leaving, whenever it does
(a streamed answer listens for it all along). Errors are raised as
``HTTPException`` from ``receive``: FastAPI re-raises those from its body parsing (any other
exception there would become its 400), and the app's exception handling answers them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimits:
    """``limits()`` gives (max_body_bytes, body_read_timeout_s) at each request (the ingress
    sets them from its config after the app is built)."""

    def __init__(self, app: App, limits: Callable[[], tuple[int, float]]) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        max_bytes, timeout = self.limits()
        declared = _content_length(scope)
        if declared is not None and declared > max_bytes:
            await _answer(send, 413, _too_large(max_bytes, f"Content-Length {declared}"))
            return
        seen = 0
        body_done = False

        async def bounded() -> Message:
            nonlocal seen, body_done
            if body_done:  # bounded, a streamed answer was cut after body_read_timeout_s
                return await receive()  # (its disconnect listener raised the 408)
            try:
                message = await asyncio.wait_for(receive(), timeout)
            except TimeoutError:
                raise HTTPException(
                    408,
                    f"the request body stopped arriving: no part of it for "
                    f"body_read_timeout_s={timeout:g} s (after {seen} bytes)",
                ) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    raise HTTPException(413, _too_large(max_bytes, f"{seen} bytes and more"))
                body_done = not message.get("more_body", False)
            return message

        await self.app(scope, bounded, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server in front refuses a malformed one
    return None


def _too_large(max_bytes: int, got: str) -> str:
    return f"request body too large: {got}, over limits.max_body_bytes={max_bytes}"


async def _answer(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
