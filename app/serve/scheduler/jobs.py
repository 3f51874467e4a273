"""Rollout jobs inside the scheduler deployment: state, progress, waiting for results.

Invariant: a job's ``results`` only grow, one ``GroupResult`` per finished group in completion
order, and a terminal job never changes again; every change bumps ``version`` and wakes the
waiters (no polling), so a streaming reader sees every group exactly once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from app.api import GroupResult, JobProgress, JobState, JobStatus, SeedGuarantee
from app.rollout import JobPlan


class JobError(Exception):
    """A request about a job that cannot be served; ``status`` is the HTTP code to answer."""

    def __init__(self, status: int, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(status, message, retry_after_s)  # all args: it pickles across Ray
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class Refusal:
    """A ``JobError`` as the scheduler deployment's answer, not its exception: an expected
    refusal (404, 409, 429, ...) is then one INFO line, where Serve logs every exception a
    deployment raises at ERROR with its traceback. The ingress raises it as its HTTP error."""

    status: int
    message: str
    retry_after_s: float | None = None

    @classmethod
    def of(cls, exc: JobError) -> Refusal:
        return cls(exc.status, exc.message, exc.retry_after_s)


@dataclass
class Job:
    plan: JobPlan
    policy: str
    seed_guarantee: SeedGuarantee = "none"
    created_at: float = field(default_factory=time.time)
    state: JobState = JobState.QUEUED
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    results: list[GroupResult] = field(default_factory=list)
    requests_done: int = 0
    output_tokens: int = 0
    finish_times: list[float] = field(default_factory=list)  # of requests, for the tail time
    # requests whose chunk was aborted when the job ended, until that chunk reports back (with
    # the tokens it made before the abort: a cancelled job's partial responses keep them)
    aborting: set[str] = field(default_factory=set)
    version: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def id(self) -> str:
        return self.plan.job_id

    def touch(self) -> None:
        """Something changed: wake every waiter."""
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def finish(self, state: JobState, error: str | None = None) -> None:
        if self.state.terminal:
            return
        self.state = state
        self.error = error
        self.finished_at = time.time()
        self.touch()

    async def changed(self, seen: int, timeout: float) -> bool:
        """Wait until ``version`` passes ``seen`` (True) or ``timeout`` seconds pass (False)."""
        if self.version != seen:
            return True
        event = self._changed
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def status(self, tokens_per_s: float) -> JobStatus:
        now = time.time()
        end = self.finished_at or now
        return JobStatus(
            id=self.id,
            state=self.state,
            policy=self.policy,
            seed_guarantee=self.seed_guarantee,
            error=self.error,
            created_at=self.created_at,
            finished_at=self.finished_at,
            progress=JobProgress(
                groups=len(self.plan.groups),
                groups_done=len(self.results),
                requests=self.plan.requests,
                requests_done=self.requests_done,
                output_tokens=self.output_tokens,
                elapsed_s=end - self.created_at,
                estimated_remaining_s=self._remaining(tokens_per_s),
            ),
        )

    def _remaining(self, tokens_per_s: float) -> float | None:
        """Tokens still expected (unfinished requests at the mean finished length, or at least
        what they have generated) at the service's current token rate."""
        if self.state.terminal:
            return 0.0
        if self.requests_done == 0 or tokens_per_s <= 0:
            return None
        mean = self.output_tokens_finished / self.requests_done
        left = 0.0
        for run in self.plan.runs.values():
            if run.finish is None:
                left += max(mean, len(run.tokens) * 1.1) - len(run.tokens)
        return max(left, 0.0) / tokens_per_s

    @property
    def output_tokens_finished(self) -> int:
        return sum(len(r.tokens) for r in self.plan.runs.values() if r.finish is not None)
