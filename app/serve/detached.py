"""Tasks that belong to no request.

Ray tracks which request an actor call is made from through a context variable (the calling
task's id, copied into every asyncio task created while serving it), and cancelling a request
cancels, recursively, the calls made from it. Work that must outlive the request that started
it (the cancel of a job whose caller disconnected, the aborts of a cancelled job's chunks)
therefore runs in a fresh context: it is no request's child, and nothing cancels it with one.
Ray Serve's own tests clear that variable for the same reason.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def detached(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """``coro`` as a task of the running loop in a fresh context (keep a reference to it)."""
    return asyncio.get_running_loop().create_task(coro, context=contextvars.Context())


class Background:
    """Tasks that outlive the caller that started them: referenced here until they end (the
    loop holds tasks only weakly), and an error nobody awaited is marked seen (the caller, if
    still waiting, got it; otherwise whoever started it logs what matters). A coroutine runs in
    a fresh context (``detached``); an awaitable (a Serve response) as a task of its own."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def keep(self, work: Any) -> asyncio.Future[Any]:
        task = detached(work) if asyncio.iscoroutine(work) else asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()

    def __len__(self) -> int:
        return len(self._tasks)
