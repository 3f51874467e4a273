"""What every part of the ingress shares: its config, the scheduler's handle, the tokenizer, the
operator token, and the one way to ask the scheduler (``ask``: its refusal as an HTTP error).

Invariant: the ingress holds no state of any job; everything about jobs is the scheduler's.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from app.config import ServiceConfig
from app.engines.base import TextCodec
from app.serve.detached import Background
from app.serve.ingress.errors import refused, scheduler_lost
from app.serve.ingress.scheduler_handle import SchedulerHandle
from app.serve.scheduler.jobs import JobError

T = TypeVar("T")


class IngressBase:
    """The attributes ``Ingress.__init__`` sets, for the route classes it is made of."""

    config: ServiceConfig
    scheduler: SchedulerHandle
    codec: TextCodec
    _background: Background  # submissions and cancels outliving their caller
    _started: int  # time.time() of the start (OpenAI's model card ``created``)
    _operator_token: str | None

    async def _ask(self, call: Awaitable[T]) -> T:
        """The scheduler's answer to ``call``; its refusal as the HTTP error it names, its
        process dying under the call as a 503 naming the restart."""
        try:
            return await call
        except JobError as exc:
            raise refused(exc) from None
        except Exception as exc:
            lost = scheduler_lost(exc, self.config.limits.retry_after_s)
            if lost is None:
                raise
            raise lost from None
