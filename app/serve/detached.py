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
