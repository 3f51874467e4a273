"""The jobs' side of the dispatcher: what the scheduler deployment's callers ask of jobs.

Invariants:
- A job is accepted only while the service accepts work (503 once it drains), only when its
  longest response fits the largest replica's KV (422) and the book admits it (422 per-job
  limits, 409 an id held, 429 open totals); an accepted job waits in the inbox until the loop
  admits it into the scheduler. A repeat of an idempotent call is answered with its job.
- Only its own cancel token (its digest), a trusted caller (the operator, the service itself)
  or, for a ``/generate`` call, the ``rid`` it was submitted under ends a job early; ending is
  idempotent.
- Every wait is bounded: for a job by ``request_timeout_s`` per change (an open job is cancelled
  past it), for a drain by its grace and then ``replica_call_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator

from app.api import GroupResult, JobState, JobStatus
from app.config import ServiceConfig
from app.rollout import JobPlan, seed_guarantee
from app.serve.scheduler.job_book import JobBook
from app.serve.scheduler.jobs import Job, JobError
from app.serve.scheduler.metrics import ServiceMetrics
from app.serve.scheduler.policy_switch import PolicySwitch
from app.serve.scheduler.replica_pool import ReplicaPool


class JobDesk(ABC):
    """The job API of the ``Dispatcher`` (its base: see the module invariants)."""

    config: ServiceConfig
    metrics: ServiceMetrics
    pool: ReplicaPool
    policies: PolicySwitch
    _wake: asyncio.Event

    def __init__(self, config: ServiceConfig) -> None:
        self.book = JobBook(config.limits, config.job_ttl_s, config.request_timeout_s)
        self.accepting = True
        self._inbox: deque[Job] = deque()  # accepted, not yet in the scheduler
        self._idle = asyncio.Event()  # set while no job is open

    @abstractmethod
    def _end(self, job: Job, state: JobState, error: str | None) -> None:
        """Make ``job`` terminal; cancel its requests in the scheduler, abort its chunks."""

    @abstractmethod
    async def _chunks_reported(self, bound_s: float) -> None:
        """Until no chunk is in flight, at most ``bound_s``."""

    def submit(self, plan: JobPlan) -> Job:
        """Accept a job or raise ``JobError`` (422 too large, 429 over a total, 503 closing);
        a repeat of an idempotent call is its held job (``JobBook.repeat_of``)."""
        repeat = self.book.repeat_of(plan)
        if repeat is not None:
            return repeat
        if not self.accepting:
            raise JobError(503, "the service is shutting down; not accepting rollouts")
        room = max(self.pool.spec(i).kv_capacity_tokens for i in range(len(self.pool)))
        self.book.check(plan, room)
        drafts = self.config.engines_draft(self.policies.next.speculate)
        guarantee = seed_guarantee(plan.seeded, drafts)
        job = Job(plan=plan, policy=self.policies.next.name, seed_guarantee=guarantee)
        self.book.add(job)
        self._idle.clear()
        self._inbox.append(job)
        self._wake.set()
        return job

    def status(self, job_id: str) -> JobStatus:
        return self.book.get(job_id).status(self.metrics.rate(time.time()))

    def cancel(self, job_id: str, error: str | None = None, digest: str | None = None) -> JobStatus:
        """Cancel a job: queued requests leave at once, running chunks are aborted on their
        replicas (their capacity is freed as the aborts report). Idempotent. With ``digest``
        (of the token a caller showed) it must be the job's own cancel digest, else 403; without,
        the caller is trusted (the operator, the service itself)."""
        job = self.book.get(job_id)
        if digest is not None:
            job.check_cancel(digest)
        self._end(job, JobState.CANCELLED, error)
        return self.status(job_id)

    def abort_rid(self, rid: str) -> JobStatus:
        """``/abort_request``'s abort of the ``/generate`` call submitted under ``rid``; 404
        for any other id, a job of another endpoint's included (its cancel token or the
        operator's may end it, never its id alone)."""
        job = self.book.get(rid)
        if job.plan.rid != rid:
            raise JobError(404, f"no /generate call with rid {rid!r}")
        self._end(job, JobState.CANCELLED, "aborted by /abort_request")
        return self.status(rid)

    def cancel_all(self, error: str) -> list[str]:
        """Cancel every open job (``/abort_request`` with ``abort_all``); returns their ids."""
        jobs = self.book.open_jobs()
        for job in jobs:
            self._end(job, JobState.CANCELLED, error)
        return sorted(j.id for j in jobs)

    async def stream(self, job_id: str) -> AsyncIterator[GroupResult]:
        """Every group of the job as it finishes, in completion order, until the job ends."""
        async for group in self.book.get(job_id).stream(self.config.request_timeout_s):
            yield group

    async def wait(self, job_id: str) -> Job:
        """Until the job is terminal (bounded: a job is cancelled after request_timeout_s)."""
        job = self.book.get(job_id)
        await job.wait(self.config.request_timeout_s)
        return job

    async def settle(self, job: Job) -> None:
        """Until the chunks aborted when ``job`` ended have reported their tokens (bounded: an
        abort is bounded by ``replica_call_timeout_s``, its chunk answers right after)."""
        await job.settle(self.config.replica_call_timeout_s + 1.0)

    async def drain(self, grace_s: float) -> int:
        """Stop accepting; give open jobs ``grace_s`` to finish, cancel the rest and wait
        (bounded) for their aborted chunks to report. Returns how many jobs were cancelled."""
        self.accepting = False
        if self.book.open_count:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), grace_s)
        left = self.book.open_jobs()
        for job in left:
            self._end(job, JobState.CANCELLED, "the service shut down")
        await self._chunks_reported(self.config.replica_call_timeout_s + 1)
        return len(left)
