"""``ServeLinks`` over a stand-in for Serve's deployment handle: which calls are cancelled when
their waiter gives up. A running chunk or probe is (a request for a dead node's replica would
otherwise wait in Serve's router); an abort is not: a late abort must still reach the replica
and stop its chunk (seen in CI: aborts timing out on a loaded machine were cancelled, so the
chunks of a disconnected client ran on)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Generator
from typing import Any

from app.serve.scheduler import ServeLinks


class _Response:
    """Awaitable like a ``DeploymentResponse``: answers once ``release`` is set."""

    def __init__(self, calls: list[tuple[str, str]], method: str, release: asyncio.Event) -> None:
        self.calls, self.method, self.release = calls, method, release
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    async def _answer(self) -> Any:
        await self.release.wait()
        if self.cancelled:
            raise asyncio.CancelledError
        self.calls.append((self.method, "reached the replica"))
        return True

    def __await__(self) -> Generator[Any, None, Any]:
        return self._answer().__await__()


class _Method:
    def __init__(self, handle: _Handle, name: str) -> None:
        self.handle, self.name = handle, name

    def remote(self, *args: Any) -> _Response:
        response = _Response(self.handle.calls, self.name, self.handle.release)
        self.handle.responses.append(response)
        return response


class _Handle:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.responses: list[_Response] = []
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> _Method:
        return _Method(self, name)


def test_an_abort_whose_waiter_timed_out_still_reaches_the_replica() -> None:
    async def body() -> None:
        handle = _Handle()
        links = ServeLinks([handle], ["replica-0"])
        try:
            await asyncio.wait_for(links.abort(0, "r", 0), 0.05)
        except TimeoutError:
            pass
        else:
            raise AssertionError("the abort answered before its replica did")
        assert not handle.responses[0].cancelled
        handle.release.set()
        for _ in range(100):
            if handle.calls:
                break
            await asyncio.sleep(0.01)
        assert handle.calls == [("abort", "reached the replica")]

    asyncio.run(body())


def test_a_probe_and_a_chunk_whose_waiters_gave_up_are_cancelled_in_serve() -> None:
    async def body() -> None:
        handle = _Handle()
        links = ServeLinks([handle], ["replica-0"])
        for call in (links.load(0), links.run_chunk(0, None)):  # type: ignore[arg-type]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(call, 0.05)
        assert [r.cancelled for r in handle.responses] == [True, True]
        handle.release.set()
        await asyncio.sleep(0.05)
        assert handle.calls == []

    asyncio.run(body())
