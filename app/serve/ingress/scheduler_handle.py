"""The SeerScheduler deployment as typed calls: what the ingress may ask it, and its answers.

Serve's handles are untyped (``handle.submit.remote(plan)`` takes any name and any arguments, and
answers ``Any``). Here each call is named once, with its arguments and answer, so mypy checks every
caller; ``tests/app/serve/ingress/test_scheduler_handle.py`` checks that the deployment answers each
call under the same name and parameters. A refusal (the deployment's ``Refusal`` value, or a
``JobError`` it raised) comes back raised as ``JobError``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

from app.api import (
    GroupResult,
    JobStatus,
    ServiceHealth,
    SpeculationState,
    WeightsState,
    WeightsUpdate,
)
from app.rollout import JobPlan
from app.serve.scheduler.deployment import JobOutcome, Submitted
from app.serve.scheduler.jobs import JobError, Refusal


class SchedulerHandle:
    """Typed calls to the SeerScheduler deployment (``handle``: its Serve deployment handle)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    async def _ask(self, method: str, *args: Any) -> Any:
        result = await getattr(self.handle, method).remote(*args)
        if isinstance(result, Refusal):
            raise JobError(result.status, result.message, result.retry_after_s, result.loc)
        return result

    async def speculation(self) -> SpeculationState:
        return cast(SpeculationState, await self._ask("speculation"))

    async def update_speculation(
        self, patch: dict[str, Any], who: str, reason: str | None
    ) -> SpeculationState:
        return cast(SpeculationState, await self._ask("update_speculation", patch, who, reason))

    async def update_weights(
        self, path: str, version: int | None, abort_running: bool, digest: str | None = None
    ) -> WeightsUpdate:
        update = await self._ask("update_weights", path, version, abort_running, digest)
        return cast(WeightsUpdate, update)

    async def weights(self) -> WeightsState:
        return cast(WeightsState, await self._ask("weights"))

    async def policy(self) -> str:
        return cast(str, await self._ask("policy"))

    async def submit(self, plan: JobPlan) -> Submitted:
        return cast(Submitted, await self._ask("submit", plan))

    async def status(self, job_id: str) -> JobStatus:
        return cast(JobStatus, await self._ask("status", job_id))

    async def cancel(self, job_id: str, digest: str | None = None) -> JobStatus:
        return cast(JobStatus, await self._ask("cancel", job_id, digest))

    async def abort_rid(self, rid: str) -> JobStatus:
        return cast(JobStatus, await self._ask("abort_rid", rid))

    def stream_groups(self, job_id: str) -> AsyncIterator[GroupResult]:
        """Every group of the job as it finishes, until the job ends (a Serve stream)."""
        stream = self.handle.options(stream=True).stream_groups.remote(job_id)
        return cast(AsyncIterator[GroupResult], stream)

    async def wait(self, job_id: str, partial: bool = False) -> JobOutcome:
        return cast(JobOutcome, await self._ask("wait", job_id, partial))

    async def cancel_all(self, error: str) -> list[str]:
        return cast(list[str], await self._ask("cancel_all", error))

    async def health(self) -> ServiceHealth:
        return cast(ServiceHealth, await self._ask("health"))

    async def metrics(self) -> bytes:
        return cast(bytes, await self._ask("metrics"))

    async def drain(self, grace_s: float | None = None) -> int:
        return cast(int, await self._ask("drain", grace_s))
